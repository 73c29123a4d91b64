package preprocess

import "github.com/imagegate/imagegate/preprocess/internal/resample"

// The resampler reproduces Pillow's Image.resize(size, BILINEAR) for 8-bit
// images: the arithmetic is internal/resample's; here a decoded source's
// rows go through its two passes into the slot.

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
	orient       int     // the EXIF orientation applied (0: none, as 1)
}

// plan returns the weights of both passes for src's geometry (src.pix is
// not read) and the rows [yFirst, yLast) of src that feed the output.
func (p *Preprocessor) plan(src *source) (hc, vc *resample.Coeffs, yFirst, yLast int) {
	rw, rh, left, top := p.geometry(src.dispW, src.dispH)
	W, H, _, _ := p.place(src.dispW, src.dispH)
	hc = p.cc.Get(src.w, src.x0, src.x1, rw, left, W)
	vc = p.cc.Get(src.h, src.y0, src.y1, rh, top, H)
	yFirst = int(vc.Bounds[0])
	yLast = int(vc.Bounds[2*H-2] + vc.Bounds[2*H-1])
	return hc, vc, yFirst, yLast
}

// span returns the source columns [xFirst, xLast) and rows [yFirst, yLast)
// that the resize of a source with g's geometry reads.
func (p *Preprocessor) span(g *source) (xFirst, xLast, yFirst, yLast int) {
	hc, _, yFirst, yLast := p.plan(g)
	xFirst, xLast = hc.Columns()
	return xFirst, xLast, yFirst, yLast
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
	hc, vc        *resample.Coeffs
	ch            int
	yFirst, yLast int // source rows that feed the output
	xFirst, xLast int // source columns the horizontal pass reads
	rowLen        int // bytes of one horizontal-pass row: outW*ch
	tmp           []uint8
	vec           bool // the AVX2 kernels, where built in
	// outW x outH pixels are resampled, written into the slot from (dx, dy): the whole slot
	// except in ModeLetterbox, whose padding finishJob fills.
	outW, outH, dx, dy int
	dispW, dispH       int // the source's displayed size and orientation (for Geometry)
	orient             int
}

// newJob plans the resize of a source with g's geometry (g.pix is not read).
func (p *Preprocessor) newJob(s *scratch, g *source) resampleJob {
	hc, vc, yFirst, yLast := p.plan(g)
	W, H, dx, dy := p.place(g.dispW, g.dispH)
	j := resampleJob{hc: hc, vc: vc, ch: g.ch, yFirst: yFirst, yLast: yLast, rowLen: W * g.ch, vec: !p.scalar,
		outW: W, outH: H, dx: dx, dy: dy, dispW: g.dispW, dispH: g.dispH, orient: g.orient}
	j.xFirst, j.xLast = hc.Columns()
	// tmpSlack: vector loads may read a few bytes past the last row.
	s.tmp = grow(s.tmp, (yLast-yFirst)*j.rowLen+tmpSlack)
	j.tmp = s.tmp
	return j
}

// tmpSlack is the room left after the horizontal pass's rows for vector
// loads of 16 bytes that start in the last one (internal/resample's kernels).
const tmpSlack = 16

// row runs the horizontal pass on source row y (yFirst <= y < yLast): in
// holds its pixels (bpp bytes each) from column xoff <= xFirst to at least
// xLast. Every row of the span must be given once before finishJob.
func (j *resampleJob) row(y int, in []uint8, bpp, xoff int) {
	dst := j.tmp[(y-j.yFirst)*j.rowLen : (y-j.yFirst+1)*j.rowLen]
	if j.ch == 3 {
		resample.HPass3(dst, in, bpp, j.hc, xoff, j.vec)
	} else {
		resample.HPass1(dst, in, j.hc, xoff)
	}
}

// finishJob runs the vertical pass and writes the slot into out. The
// horizontal pass left each row as planes (R, G, B or gray, Width bytes
// each): every output row of every plane is a sum of whole plane rows.
func (p *Preprocessor) finishJob(j *resampleJob, s *scratch, out sink) {
	W, H := p.opts.Width, p.opts.Height
	ow, dx := j.outW, j.dx
	s.row = grow(s.row, ow+tmpSlack)
	row := s.row[:ow]
	vc := j.vc
	for yy := range j.outH {
		ymin := int(vc.Bounds[2*yy]) - j.yFirst
		n := int(vc.Bounds[2*yy+1])
		k := vc.K[yy*vc.KSize : yy*vc.KSize+n]
		y := yy + j.dy
		for c := range j.ch {
			first := j.tmp[ymin*j.rowLen+c*ow:]
			if p.vemit(out, y, dx, ow, c, j.ch, first, j.rowLen, k) {
				continue
			}
			if out.f32 != nil && j.ch == 3 && p.opts.Layout == NCHW {
				// The gateway's output: the pass writes the normalized values itself.
				resample.VRowF32(out.f32[c*W*H+y*W+dx:][:ow], first, j.rowLen, k, &p.lut[c])
				continue
			}
			resample.VRow(row, first, j.rowLen, k)
			p.emitPlane(out, y, dx, c, j.ch, row)
		}
	}
	if ow != W || j.outH != H {
		p.pad(out, j)
	}
	if out.geom != nil {
		*out.geom = p.Geometry(j.dispW, j.dispH, j.orient)
	}
}

// pad fills the slot around the resampled outW x outH pixels with the Pad value (letterbox).
func (p *Preprocessor) pad(out sink, j *resampleJob) {
	W, H := p.opts.Width, p.opts.Height
	fill := func(y, x0, x1 int) { // slot row y, columns [x0, x1), every channel
		if x1 <= x0 {
			return
		}
		for c := range 3 {
			v := p.opts.Pad
			f := p.lut[c][v]
			switch {
			case p.opts.Layout == NHWC && out.f32 != nil:
				for x := x0; x < x1; x++ {
					out.f32[(y*W+x)*3+c] = f
				}
			case p.opts.Layout == NHWC:
				for x := x0; x < x1; x++ {
					out.u8[(y*W+x)*3+c] = v
				}
			case out.f32 != nil:
				d := out.f32[c*W*H+y*W+x0 : c*W*H+y*W+x1]
				for i := range d {
					d[i] = f
				}
			default:
				d := out.u8[c*W*H+y*W+x0 : c*W*H+y*W+x1]
				for i := range d {
					d[i] = v
				}
			}
		}
	}
	for y := range H {
		if y < j.dy || y >= j.dy+j.outH {
			fill(y, 0, W)
			continue
		}
		fill(y, 0, j.dx)
		fill(y, j.dx+j.outW, W)
	}
}

// vemit runs the vertical pass of one output row of plane c with the AVX2
// kernels into an NCHW slot (normalized or raw float32, or bytes), and
// reports whether it could.
// Slot row y, columns [x0, x0+w).
func (p *Preprocessor) vemit(out sink, y, x0, w, c, ch int, first []uint8, stride int, k []int32) bool {
	if p.scalar || p.opts.Layout != NCHW || ch != 3 {
		return false
	}
	W := p.opts.Width
	o := c*W*p.opts.Height + y*W + x0
	if out.f32 == nil {
		return resample.VRowU8Vec(out.u8[o:][:w], first, stride, k)
	}
	return resample.VRowF32Vec(out.f32[o:][:w], first, stride, k, p.opts.Scale == ScaleRaw, p.opts.Mean[c], p.opts.Std[c], &p.lut[c])
}

// emitPlane writes output row y of plane c (of ch planes: 1 replicates gray
// to the three channels) into the slot, from column x0.
func (p *Preprocessor) emitPlane(out sink, y, x0, c, ch int, row []uint8) {
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
			d := out.f32[oc*plane+y*W+x0:][:len(row)]
			for x, v := range row {
				d[x] = lut[v]
			}
		case out.f32 != nil:
			lut := &p.lut[oc]
			d := out.f32[(y*W+x0)*3 : (y*W+x0+len(row))*3]
			for x, v := range row {
				d[3*x+oc] = lut[v]
			}
		case !nhwc:
			copy(out.u8[oc*plane+y*W+x0:][:len(row)], row)
		default:
			d := out.u8[(y*W+x0)*3 : (y*W+x0+len(row))*3]
			for x, v := range row {
				d[3*x+oc] = v
			}
		}
	}
}
