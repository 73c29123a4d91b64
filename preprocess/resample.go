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
// pixels of one axis.
type coeffs struct {
	ksize  int
	bounds []int32 // per output pixel: first input pixel, number of taps
	k      []int32 // per output pixel: ksize weights
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
	return c
}

func clip8(v int32) uint8 {
	if v <= 0 {
		return 0
	}
	if v >= 255<<precisionBits {
		return 255
	}
	return uint8(v >> precisionBits)
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
	W := p.opts.Width
	return int(hc.bounds[0]), int(hc.bounds[2*W-2] + hc.bounds[2*W-1]), yFirst, yLast
}

// resampleBytes is the scratch memory resample allocates for src's geometry:
// the horizontal pass's rows, one row of accumulators and one output row.
func (p *Preprocessor) resampleBytes(src *source) int64 {
	_, _, yFirst, yLast := p.plan(src)
	rowLen := int64(p.opts.Width * src.ch)
	return goAlloc(int64(yLast-yFirst)*rowLen) + goAlloc(4*rowLen) + goAlloc(rowLen)
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
	j := resampleJob{hc: hc, vc: vc, ch: g.ch, yFirst: yFirst, yLast: yLast, rowLen: W * g.ch,
		xFirst: int(hc.bounds[0]), xLast: int(hc.bounds[2*W-2] + hc.bounds[2*W-1])}
	s.tmp = grow(s.tmp, (yLast-yFirst)*j.rowLen)
	j.tmp = s.tmp
	return j
}

// row runs the horizontal pass on source row y (yFirst <= y < yLast): in
// holds its pixels (bpp bytes each) from column xoff <= xFirst to at least
// xLast. Every row of the span must be given once before finishJob.
func (j *resampleJob) row(y int, in []uint8, bpp, xoff int) {
	dst := j.tmp[(y-j.yFirst)*j.rowLen : (y-j.yFirst+1)*j.rowLen]
	if j.ch == 3 {
		hrow3(dst, in, bpp, j.hc, xoff)
	} else {
		hrow1(dst, in, j.hc, xoff)
	}
}

// finishJob runs the vertical pass and writes the slot into out.
func (p *Preprocessor) finishJob(j *resampleJob, s *scratch, out sink) {
	H := p.opts.Height
	rowLen, ch, tmp, vc, yFirst := j.rowLen, j.ch, j.tmp, j.vc, j.yFirst
	s.acc = grow(s.acc, rowLen)
	s.row = grow(s.row, rowLen)
	acc, row := s.acc, s.row
	ks := vc.ksize
	for yy := range H {
		ymin := int(vc.bounds[2*yy]) - yFirst
		n := int(vc.bounds[2*yy+1])
		k := vc.k[yy*ks : yy*ks+n]
		r0 := tmp[ymin*rowLen : (ymin+1)*rowLen]
		w0 := k[0]
		acc := acc[:len(r0)]
		for j, v := range r0 {
			acc[j] = half + int32(v)*w0
		}
		for i := 1; i < n; i++ {
			w := k[i]
			if w == 0 {
				continue
			}
			r := tmp[(ymin+i)*rowLen : (ymin+i+1)*rowLen]
			r = r[:len(acc)]
			for j, v := range r {
				acc[j] += int32(v) * w
			}
		}
		row := row[:len(acc)]
		for j, a := range acc {
			row[j] = clip8(a)
		}
		p.emit(out, yy, row, ch)
	}
}

// hrow3 resamples one row of RGB(x) pixels with bpp bytes per pixel; in
// starts at column xoff.
func hrow3(dst, in []uint8, bpp int, c *coeffs, xoff int) {
	ks := c.ksize
	n := len(dst) / 3
	b := c.bounds[:2*n]
	for xx := range n {
		xmin := int(b[2*xx]) - xoff
		k := c.k[xx*ks : xx*ks+int(b[2*xx+1])]
		px := in[xmin*bpp:]
		s0, s1, s2 := half, half, half
		for i, w := range k {
			q := px[i*bpp : i*bpp+3]
			s0 += int32(q[0]) * w
			s1 += int32(q[1]) * w
			s2 += int32(q[2]) * w
		}
		d := dst[xx*3 : xx*3+3]
		d[0] = clip8(s0)
		d[1] = clip8(s1)
		d[2] = clip8(s2)
	}
}

// hrow1 resamples one row of gray pixels; in starts at column xoff.
func hrow1(dst, in []uint8, c *coeffs, xoff int) {
	ks := c.ksize
	b := c.bounds[:2*len(dst)]
	for xx := range dst {
		xmin := int(b[2*xx]) - xoff
		k := c.k[xx*ks : xx*ks+int(b[2*xx+1])]
		px := in[xmin:]
		px = px[:len(k)]
		s0 := half
		for i, w := range k {
			s0 += int32(px[i]) * w
		}
		dst[xx] = clip8(s0)
	}
}

// emit writes output row y (W pixels of ch channels) into the slot.
func (p *Preprocessor) emit(out sink, y int, row []uint8, ch int) {
	W, H := p.opts.Width, p.opts.Height
	plane := W * H
	nhwc := p.opts.Layout == NHWC
	if out.f32 != nil {
		l0, l1, l2 := &p.lut[0], &p.lut[1], &p.lut[2]
		if nhwc {
			d := out.f32[y*W*3 : (y+1)*W*3]
			if ch == 3 {
				row = row[:len(d)]
				for x := 0; x+2 < len(d); x += 3 {
					d[x] = l0[row[x]]
					d[x+1] = l1[row[x+1]]
					d[x+2] = l2[row[x+2]]
				}
			} else {
				row = row[:W]
				for x, v := range row {
					e := d[3*x : 3*x+3]
					e[0], e[1], e[2] = l0[v], l1[v], l2[v]
				}
			}
			return
		}
		d0 := out.f32[y*W : (y+1)*W]
		d1 := out.f32[plane+y*W : plane+(y+1)*W]
		d2 := out.f32[2*plane+y*W : 2*plane+(y+1)*W]
		if ch == 3 {
			row = row[:3*W]
			for x := range d0 {
				q := row[3*x : 3*x+3]
				d0[x], d1[x], d2[x] = l0[q[0]], l1[q[1]], l2[q[2]]
			}
		} else {
			row = row[:len(d0)]
			for x, v := range row {
				d0[x], d1[x], d2[x] = l0[v], l1[v], l2[v]
			}
		}
		return
	}
	if nhwc {
		d := out.u8[y*W*3 : (y+1)*W*3]
		if ch == 3 {
			copy(d, row)
		} else {
			row = row[:W]
			for x, v := range row {
				e := d[3*x : 3*x+3]
				e[0], e[1], e[2] = v, v, v
			}
		}
		return
	}
	d0 := out.u8[y*W : (y+1)*W]
	d1 := out.u8[plane+y*W : plane+(y+1)*W]
	d2 := out.u8[2*plane+y*W : 2*plane+(y+1)*W]
	if ch == 3 {
		row = row[:3*W]
		for x := range d0 {
			q := row[3*x : 3*x+3]
			d0[x], d1[x], d2[x] = q[0], q[1], q[2]
		}
	} else {
		copy(d0, row)
		copy(d1, row)
		copy(d2, row)
	}
}
