// Package resample is the resampler's arithmetic: Pillow's Image.resize(size, BILINEAR) for
// 8-bit images (libImaging/Resample.c), separable convolution with a triangle filter whose
// support grows with the downscale factor, weights normalized per output pixel and converted to
// fixed point with PrecisionBits fraction bits, horizontal pass first, each pass rounded and
// clamped to uint8. Only the output pixels inside the crop window are computed, which gives the
// same values as resizing everything and cropping afterwards.
//
// It holds the weight tables (Coeffs, cached per geometry by Cache) and the kernels of both
// passes, portable and AVX2 (built with GOEXPERIMENT=simd on amd64; they compute exactly what
// the portable ones do). preprocess drives them row by row; this package knows nothing of
// image formats. Its kernels are safe for concurrent use; a Cache too.
package resample

import (
	"math"
	"sync"
)

// PrecisionBits are the fraction bits of the fixed-point weights, and Half is one Half in
// them (the rounding every sum starts from).
const (
	PrecisionBits = 32 - 8 - 2
	Half          = int32(1) << (PrecisionBits - 1)
)

// Coeffs holds the fixed-point filter weights of count consecutive output
// pixels of one axis, twice: as Pillow computes them (bounds, k), and padded
// to the same number of taps for every output pixel (kpad: the most any
// has), the padding weights zero, so the horizontal pass runs loops of a
// fixed length. An output pixel whose padded taps would run past the input's
// end starts earlier instead, its weights shifted: zero weights add exactly
// nothing, so the sums are Pillow's.
type Coeffs struct {
	KSize  int
	Bounds []int32 // per output pixel: first input pixel, number of taps
	K      []int32 // per output pixel: KSize weights
	kpad   int
	start  []int32 // per output pixel: first input pixel of its kpad taps
	kp     []int32 // per output pixel: kpad weights
	// For the vector kernels (resample_simd.go): kq is kpad rounded up to 4;
	// kv holds per output pixel, per group of 4 taps, each weight 4 times.
	kq int
	kv [][16]int32
	// kw, when kq is 4, holds per output pixel the weights of hpass3Blocks: each weight w
	// as w>>11 (kw[x][:16]) and w&2047 (kw[x][16:]), in the lanes of its taps' pixel pairs.
	kw [][32]int16
}

type coeffKey struct {
	inSize, outSize, first, count int
	in0, in1                      float64
}

// Cache caches weight tables per geometry; it is bounded. The zero value is ready to use.
type Cache struct {
	mu sync.RWMutex
	m  map[coeffKey]*Coeffs
}

const maxCachedCoeffs = 512

// Get returns the weights of output pixels [first, first+count) of a resize of the input span
// [in0, in1) (of an axis of inSize pixels) to outSize pixels.
func (c *Cache) Get(inSize int, in0, in1 float64, outSize, first, count int) *Coeffs {
	key := coeffKey{inSize, outSize, first, count, in0, in1}
	c.mu.RLock()
	t := c.m[key]
	c.mu.RUnlock()
	if t != nil {
		return t
	}
	t = makeCoeffs(inSize, in0, in1, outSize, first, count)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedCoeffs {
		c.m = make(map[coeffKey]*Coeffs)
	}
	c.m[key] = t
	c.mu.Unlock()
	return t
}

func triangle(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// makeCoeffs computes the weights of output pixels [first, first+count) of
// a resize of the input span [in0, in1) (of an axis of inSize pixels) to
// outSize pixels, as Pillow's precompute_coeffs + normalize_coeffs_8bpc.
func makeCoeffs(inSize int, in0, in1 float64, outSize, first, count int) *Coeffs {
	scale := (in1 - in0) / float64(outSize)
	filterscale := max(scale, 1)
	support := 1.0 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := &Coeffs{KSize: ksize, Bounds: make([]int32, 2*count), K: make([]int32, count*ksize)}
	pre := make([]float64, ksize)
	ss := 1.0 / filterscale
	for i := range count {
		xx := first + i
		// float64(...) around products forbids fused multiply-add, keeping
		// the rounding of the C code.
		center := in0 + float64((float64(xx)+0.5)*scale)
		xmin := int(center - support + 0.5)
		xmin = max(xmin, 0)
		xmax := int(center + support + 0.5)
		xmax = min(xmax, inSize)
		n := xmax - xmin
		ww := 0.0
		for x := range n {
			w := triangle(float64((float64(x+xmin) - center + 0.5) * ss))
			pre[x] = w
			ww += w
		}
		k := c.K[i*ksize : (i+1)*ksize]
		for x := range n {
			w := pre[x]
			if ww != 0 {
				w /= ww
			}
			if w < 0 {
				k[x] = int32(-0.5 + float64(w*(1<<PrecisionBits)))
			} else {
				k[x] = int32(0.5 + float64(w*(1<<PrecisionBits)))
			}
		}
		c.Bounds[2*i] = int32(xmin)
		c.Bounds[2*i+1] = int32(n)
	}
	c.pad(inSize)
	return c
}

// pad fills kpad, start and kp from bounds and k.
func (c *Coeffs) pad(inSize int) {
	count := len(c.Bounds) / 2
	for i := range count {
		c.kpad = max(c.kpad, int(c.Bounds[2*i+1]))
	}
	c.start = make([]int32, count)
	c.kp = make([]int32, count*c.kpad)
	for i := range count {
		xmin, n := int(c.Bounds[2*i]), int(c.Bounds[2*i+1])
		st := min(xmin, inSize-c.kpad) // n <= kpad <= inSize: st >= 0
		c.start[i] = int32(st)
		copy(c.kp[i*c.kpad+xmin-st:], c.K[i*c.KSize:i*c.KSize+n])
	}
	if !simdResampler {
		return
	}
	c.kq = (c.kpad + 3) &^ 3 // kpad rounded up to 4
	c.kv = make([][16]int32, count*c.kq/4)
	for i := range count {
		for t, w := range c.kp[i*c.kpad : (i+1)*c.kpad] {
			v := c.kv[(i*c.kq+t)/4][t%4*4:]
			v[0], v[1], v[2], v[3] = w, w, w, w
		}
	}
	if c.kq == 4 {
		c.kw = make([][32]int16, count)
		for i := range count {
			for t, w := range c.kp[i*c.kpad : (i+1)*c.kpad] {
				// Tap t's lanes: Half t/2 (8 int16 each), pair element t%2 of R, G, B.
				o := t/2*8 + t%2
				for ch := range 3 {
					c.kw[i][o+2*ch] = int16(w >> 11)
					c.kw[i][16+o+2*ch] = int16(w & 2047)
				}
			}
		}
	}
}

// Columns returns the input pixels [first, last) the padded taps read.
func (c *Coeffs) Columns() (first, last int) {
	first, last = int(c.start[0]), 0
	for _, s := range c.start {
		first, last = min(first, int(s)), max(last, int(s)+c.kpad)
	}
	return first, last
}

// clip8 is Pillow's rounding of a fixed-point sum (Half already added) to
// uint8, clamped.
func clip8(v int32) uint8 {
	return uint8(min(max(v>>PrecisionBits, 0), 255))
}

// VRow computes one output row of one plane: row[x] is the sum over taps i
// of plane row i (stride bytes apart from first) times k[i].
func VRow(row, first []uint8, stride int, k []int32) {
	W := len(row)
	switch len(k) {
	case 1:
		r0, w0 := first[:W], k[0]
		for x := range row {
			row[x] = clip8(Half + int32(r0[x])*w0)
		}
	case 2:
		r0, r1 := first[:W], first[stride:stride+W]
		w0, w1 := k[0], k[1]
		for x := range row {
			row[x] = clip8(Half + int32(r0[x])*w0 + int32(r1[x])*w1)
		}
	case 3:
		r0, r1, r2 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W]
		w0, w1, w2 := k[0], k[1], k[2]
		for x := range row {
			row[x] = clip8(Half + int32(r0[x])*w0 + int32(r1[x])*w1 + int32(r2[x])*w2)
		}
	case 4:
		r0, r1, r2, r3 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W], first[3*stride:3*stride+W]
		w0, w1, w2, w3 := k[0], k[1], k[2], k[3]
		for x := range row {
			row[x] = clip8(Half + int32(r0[x])*w0 + int32(r1[x])*w1 + int32(r2[x])*w2 + int32(r3[x])*w3)
		}
	default:
		for x := range row {
			row[x] = clip8(vsum(first, x, stride, k))
		}
	}
}

// vsum is the vertical pass's fixed-point sum, Half included, for the column
// that starts at first[o]: each tap's weight times the value stride below the
// last.
func vsum(first []uint8, o, stride int, k []int32) int32 {
	a := Half
	for _, w := range k {
		a += int32(first[o]) * w
		o += stride
	}
	return a
}

// VRowF32 is VRow writing lut's float32 for each value straight into d.
func VRowF32(d []float32, first []uint8, stride int, k []int32, lut *[256]float32) {
	W := len(d)
	switch len(k) {
	case 2:
		r0, r1 := first[:W], first[stride:stride+W]
		w0, w1 := k[0], k[1]
		for x := range d {
			d[x] = lut[clip8(Half+int32(r0[x])*w0+int32(r1[x])*w1)]
		}
	case 3:
		r0, r1, r2 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W]
		w0, w1, w2 := k[0], k[1], k[2]
		for x := range d {
			d[x] = lut[clip8(Half+int32(r0[x])*w0+int32(r1[x])*w1+int32(r2[x])*w2)]
		}
	case 4:
		r0, r1, r2, r3 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W], first[3*stride:3*stride+W]
		w0, w1, w2, w3 := k[0], k[1], k[2], k[3]
		for x := range d {
			d[x] = lut[clip8(Half+int32(r0[x])*w0+int32(r1[x])*w1+int32(r2[x])*w2+int32(r3[x])*w3)]
		}
	default:
		for x := range d {
			d[x] = lut[clip8(vsum(first, x, stride, k))]
		}
	}
}
