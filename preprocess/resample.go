package preprocess

import (
	"math"
	"sync"
)

// The resampler reproduces Pillow's Image.resize(size, BILINEAR) for 8-bit
// images (libImaging/Resample.c): separable convolution with a triangle
// filter whose support grows with the downscale factor, weights normalized
// per output pixel and converted to fixed point with precisionBits fraction
// bits, horizontal pass first, each pass rounded and clamped to uint8.
// Only the output pixels inside the crop window are computed, which gives
// the same values as resizing everything and cropping afterwards.

const (
	precisionBits = 32 - 8 - 2
	half          = int32(1) << (precisionBits - 1)
)

// source is a decoded image ready for resampling.
type source struct {
	pix          []uint8
	stride       int // bytes per row
	bpp          int // bytes per pixel (3 or 4 for RGB, 1 for gray)
	ch           int // 3: RGB in the first 3 bytes of a pixel; 1: gray
	w, h         int // pixels in pix
	x0, x1       float64
	y0, y1       float64 // span of pix that represents the whole image
	dispW, dispH int     // displayed size at full resolution (after EXIF orientation)
}

// coeffs holds the fixed-point filter weights of count consecutive output
// pixels of one axis, twice: as Pillow computes them (bounds, k), and padded
// to the same number of taps for every output pixel (kpad: the most any
// has), the padding weights zero, so the horizontal pass runs loops of a
// fixed length. An output pixel whose padded taps would run past the input's
// end starts earlier instead, its weights shifted: zero weights add exactly
// nothing, so the sums are Pillow's.
type coeffs struct {
	ksize  int
	bounds []int32 // per output pixel: first input pixel, number of taps
	k      []int32 // per output pixel: ksize weights
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

// coeffCache caches weight tables per geometry; it is bounded.
type coeffCache struct {
	mu sync.RWMutex
	m  map[coeffKey]*coeffs
}

const maxCachedCoeffs = 512

func (c *coeffCache) get(inSize int, in0, in1 float64, outSize, first, count int) *coeffs {
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
		c.m = make(map[coeffKey]*coeffs)
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
func makeCoeffs(inSize int, in0, in1 float64, outSize, first, count int) *coeffs {
	scale := (in1 - in0) / float64(outSize)
	filterscale := max(scale, 1)
	support := 1.0 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := &coeffs{ksize: ksize, bounds: make([]int32, 2*count), k: make([]int32, count*ksize)}
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
		k := c.k[i*ksize : (i+1)*ksize]
		for x := range n {
			w := pre[x]
			if ww != 0 {
				w /= ww
			}
			if w < 0 {
				k[x] = int32(-0.5 + float64(w*(1<<precisionBits)))
			} else {
				k[x] = int32(0.5 + float64(w*(1<<precisionBits)))
			}
		}
		c.bounds[2*i] = int32(xmin)
		c.bounds[2*i+1] = int32(n)
	}
	c.pad(inSize)
	return c
}

// pad fills kpad, start and kp from bounds and k.
func (c *coeffs) pad(inSize int) {
	count := len(c.bounds) / 2
	for i := range count {
		c.kpad = max(c.kpad, int(c.bounds[2*i+1]))
	}
	c.start = make([]int32, count)
	c.kp = make([]int32, count*c.kpad)
	for i := range count {
		xmin, n := int(c.bounds[2*i]), int(c.bounds[2*i+1])
		st := min(xmin, inSize-c.kpad) // n <= kpad <= inSize: st >= 0
		c.start[i] = int32(st)
		copy(c.kp[i*c.kpad+xmin-st:], c.k[i*c.ksize:i*c.ksize+n])
	}
	if !simdResampler {
		return
	}
	c.kq = roundUp(c.kpad, 4)
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
				// Tap t's lanes: half t/2 (8 int16 each), pair element t%2 of R, G, B.
				o := t/2*8 + t%2
				for ch := range 3 {
					c.kw[i][o+2*ch] = int16(w >> 11)
					c.kw[i][16+o+2*ch] = int16(w & 2047)
				}
			}
		}
	}
}

// clip8 is Pillow's rounding of a fixed-point sum (half already added) to
// uint8, clamped.
func clip8(v int32) uint8 {
	return uint8(min(max(v>>precisionBits, 0), 255))
}

// plan returns the weights of both passes for src's geometry (src.pix is
// not read) and the rows [yFirst, yLast) of src that feed the output.
func (p *Preprocessor) plan(src *source) (hc, vc *coeffs, yFirst, yLast int) {
	o := &p.opts
	W, H := o.Width, o.Height
	rw, rh, left, top := p.geometry(src.dispW, src.dispH)
	hc = p.cc.get(src.w, src.x0, src.x1, rw, left, W)
	vc = p.cc.get(src.h, src.y0, src.y1, rh, top, H)
	yFirst = int(vc.bounds[0])
	yLast = int(vc.bounds[2*H-2] + vc.bounds[2*H-1])
	return hc, vc, yFirst, yLast
}

// span returns the source columns [xFirst, xLast) and rows [yFirst, yLast)
// that the resize of a source with g's geometry reads.
func (p *Preprocessor) span(g *source) (xFirst, xLast, yFirst, yLast int) {
	hc, _, yFirst, yLast := p.plan(g)
	xFirst, xLast = hc.columns()
	return xFirst, xLast, yFirst, yLast
}

// columns returns the input pixels [first, last) the padded taps read.
func (c *coeffs) columns() (first, last int) {
	first, last = int(c.start[0]), 0
	for _, s := range c.start {
		first, last = min(first, int(s)), max(last, int(s)+c.kpad)
	}
	return first, last
}

// resampleBytes is the scratch memory resample allocates for src's geometry:
// the horizontal pass's rows and one row of one plane of the vertical pass.
func (p *Preprocessor) resampleBytes(src *source) int64 {
	_, _, yFirst, yLast := p.plan(src)
	rowLen := int64(p.opts.Width * src.ch)
	return goAlloc(int64(yLast-yFirst)*rowLen+tmpSlack) + goAlloc(int64(p.opts.Width)+tmpSlack)
}

// resample resizes src to the configured geometry, crops, and writes the
// slot into out.
func (p *Preprocessor) resample(src *source, s *scratch, out sink) error {
	j := p.newJob(s, src)
	for y := j.yFirst; y < j.yLast; y++ {
		j.row(y, src.pix[y*src.stride:], src.bpp, 0)
	}
	p.finishJob(&j, s, out)
	return nil
}

// resampleJob is one resize whose source rows arrive one at a time, in any
// order (a streaming decoder gives them top to bottom): the horizontal pass
// runs on each row as it comes, the vertical pass at the end.
type resampleJob struct {
	hc, vc        *coeffs
	ch            int
	yFirst, yLast int // source rows that feed the output
	xFirst, xLast int // source columns the horizontal pass reads
	rowLen        int // bytes of one horizontal-pass row: Width*ch
	tmp           []uint8
}

// newJob plans the resize of a source with g's geometry (g.pix is not read).
func (p *Preprocessor) newJob(s *scratch, g *source) resampleJob {
	hc, vc, yFirst, yLast := p.plan(g)
	W := p.opts.Width
	j := resampleJob{hc: hc, vc: vc, ch: g.ch, yFirst: yFirst, yLast: yLast, rowLen: W * g.ch}
	j.xFirst, j.xLast = hc.columns()
	// tmpSlack: vector loads may read a few bytes past the last row.
	s.tmp = grow(s.tmp, (yLast-yFirst)*j.rowLen+tmpSlack)
	j.tmp = s.tmp
	return j
}

// tmpSlack is the room left after the horizontal pass's rows for vector
// loads of 16 bytes that start in the last one.
const tmpSlack = 16

// row runs the horizontal pass on source row y (yFirst <= y < yLast): in
// holds its pixels (bpp bytes each) from column xoff <= xFirst to at least
// xLast. Every row of the span must be given once before finishJob.
func (j *resampleJob) row(y int, in []uint8, bpp, xoff int) {
	dst := j.tmp[(y-j.yFirst)*j.rowLen : (y-j.yFirst+1)*j.rowLen]
	if j.ch == 3 {
		hpass3(dst, in, bpp, j.hc, xoff)
	} else {
		hpass1(dst, in, j.hc, xoff)
	}
}

// finishJob runs the vertical pass and writes the slot into out. The
// horizontal pass left each row as planes (R, G, B or gray, Width bytes
// each): every output row of every plane is a sum of whole plane rows.
func (p *Preprocessor) finishJob(j *resampleJob, s *scratch, out sink) {
	W, H := p.opts.Width, p.opts.Height
	s.row = grow(s.row, W+tmpSlack)
	row := s.row[:W]
	vc := j.vc
	for yy := range H {
		ymin := int(vc.bounds[2*yy]) - j.yFirst
		n := int(vc.bounds[2*yy+1])
		k := vc.k[yy*vc.ksize : yy*vc.ksize+n]
		for c := range j.ch {
			first := j.tmp[ymin*j.rowLen+c*W:]
			if p.vemit(out, yy, c, j.ch, first, j.rowLen, k) {
				continue
			}
			if out.f32 != nil && j.ch == 3 && p.opts.Layout == NCHW {
				// The gateway's output: the pass writes the normalized values itself.
				vrowF32(out.f32[c*W*H+yy*W:][:W], first, j.rowLen, k, &p.lut[c])
				continue
			}
			vrow(row, first, j.rowLen, k)
			p.emitPlane(out, yy, c, j.ch, row)
		}
	}
}

// vrow computes one output row of one plane: row[x] is the sum over taps i
// of plane row i (stride bytes apart from first) times k[i].
func vrow(row, first []uint8, stride int, k []int32) {
	W := len(row)
	switch len(k) {
	case 1:
		r0, w0 := first[:W], k[0]
		for x := range row {
			row[x] = clip8(half + int32(r0[x])*w0)
		}
	case 2:
		r0, r1 := first[:W], first[stride:stride+W]
		w0, w1 := k[0], k[1]
		for x := range row {
			row[x] = clip8(half + int32(r0[x])*w0 + int32(r1[x])*w1)
		}
	case 3:
		r0, r1, r2 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W]
		w0, w1, w2 := k[0], k[1], k[2]
		for x := range row {
			row[x] = clip8(half + int32(r0[x])*w0 + int32(r1[x])*w1 + int32(r2[x])*w2)
		}
	case 4:
		r0, r1, r2, r3 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W], first[3*stride:3*stride+W]
		w0, w1, w2, w3 := k[0], k[1], k[2], k[3]
		for x := range row {
			row[x] = clip8(half + int32(r0[x])*w0 + int32(r1[x])*w1 + int32(r2[x])*w2 + int32(r3[x])*w3)
		}
	default:
		for x := range row {
			row[x] = clip8(vsum(first, x, stride, k))
		}
	}
}

// vsum is the vertical pass's fixed-point sum, half included, for the column
// that starts at first[o]: each tap's weight times the value stride below the
// last.
func vsum(first []uint8, o, stride int, k []int32) int32 {
	a := half
	for _, w := range k {
		a += int32(first[o]) * w
		o += stride
	}
	return a
}

// vrowF32 is vrow writing lut's float32 for each value straight into d.
func vrowF32(d []float32, first []uint8, stride int, k []int32, lut *[256]float32) {
	W := len(d)
	switch len(k) {
	case 2:
		r0, r1 := first[:W], first[stride:stride+W]
		w0, w1 := k[0], k[1]
		for x := range d {
			d[x] = lut[clip8(half+int32(r0[x])*w0+int32(r1[x])*w1)]
		}
	case 3:
		r0, r1, r2 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W]
		w0, w1, w2 := k[0], k[1], k[2]
		for x := range d {
			d[x] = lut[clip8(half+int32(r0[x])*w0+int32(r1[x])*w1+int32(r2[x])*w2)]
		}
	case 4:
		r0, r1, r2, r3 := first[:W], first[stride:stride+W], first[2*stride:2*stride+W], first[3*stride:3*stride+W]
		w0, w1, w2, w3 := k[0], k[1], k[2], k[3]
		for x := range d {
			d[x] = lut[clip8(half+int32(r0[x])*w0+int32(r1[x])*w1+int32(r2[x])*w2+int32(r3[x])*w3)]
		}
	default:
		for x := range d {
			d[x] = lut[clip8(vsum(first, x, stride, k))]
		}
	}
}

// emitPlane writes output row y of plane c (of ch planes: 1 replicates gray
// to the three channels) into the slot.
func (p *Preprocessor) emitPlane(out sink, y, c, ch int, row []uint8) {
	W, H := p.opts.Width, p.opts.Height
	plane := W * H
	nhwc := p.opts.Layout == NHWC
	c0, c1 := c, c+1 // output channels: gray fills all three
	if ch == 1 {
		c0, c1 = 0, 3
	}
	for oc := c0; oc < c1; oc++ {
		switch {
		case out.f32 != nil && !nhwc:
			lut := &p.lut[oc]
			d := out.f32[oc*plane+y*W:][:len(row)]
			for x, v := range row {
				d[x] = lut[v]
			}
		case out.f32 != nil:
			lut := &p.lut[oc]
			d := out.f32[y*W*3 : (y+1)*W*3]
			for x, v := range row {
				d[3*x+oc] = lut[v]
			}
		case !nhwc:
			copy(out.u8[oc*plane+y*W:][:len(row)], row)
		default:
			d := out.u8[y*W*3 : (y+1)*W*3]
			for x, v := range row {
				d[3*x+oc] = v
			}
		}
	}
}
