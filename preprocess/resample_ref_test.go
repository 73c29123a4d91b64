package preprocess

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/imagegate/imagegate/preprocess/internal/resample"
)

// The resampler as it was before its kernels were rewritten for speed
// (710653e..adcb774: Pillow's loops, interleaved rows, an accumulator row),
// kept as the reference the new kernels must match bit for bit on any
// geometry, beyond what the goldens cover.

func refClip8(v int32) uint8 {
	if v <= 0 {
		return 0
	}
	if v >= 255<<resample.PrecisionBits {
		return 255
	}
	return uint8(v >> resample.PrecisionBits)
}

// refResample resizes src as resample did.
func (p *Preprocessor) refResample(src *source, out sink) {
	W := p.opts.Width
	hc, vc, yFirst, yLast := p.plan(src)
	rowLen := W * src.ch
	tmp := make([]uint8, (yLast-yFirst)*rowLen)
	for y := yFirst; y < yLast; y++ {
		dst := tmp[(y-yFirst)*rowLen : (y-yFirst+1)*rowLen]
		if src.ch == 3 {
			refHrow3(dst, src.pix[y*src.stride:], src.bpp, hc, 0)
		} else {
			refHrow1(dst, src.pix[y*src.stride:], hc, 0)
		}
	}
	p.refFinish(tmp, rowLen, src.ch, yFirst, vc, out)
}

// TestResamplerMatchesReference: random image sizes and contents, RGB (3 or
// 4 bytes a pixel) and gray, random geometries (downscales up to 20x,
// upscales, stretch, crops anywhere), every output kind.
func TestResamplerMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 13))
	cases := 400
	if raceEnabled { // one goroutine: the race detector only slows it down
		cases = 80
	}
	for i := range cases {
		w, h := 1+r.IntN(700), 1+r.IntN(700)
		if i%10 == 0 {
			w, h = 1+r.IntN(4000), 1+r.IntN(60)
		}
		bpp, ch := []int{3, 4, 1}[i%3], 3
		if bpp == 1 {
			ch = 1
		}
		pix := make([]uint8, w*h*bpp)
		for k := range pix {
			pix[k] = uint8(r.Uint32())
		}
		if i%4 == 0 { // smooth content, as photos
			for k := range pix {
				pix[k] = uint8((k/bpp%w)*3 + (k/bpp/w)*2 + k%bpp*50)
			}
		}
		o := Options{Width: 1 + r.IntN(300), Height: 1 + r.IntN(300)}
		o.Resize = max(o.Width, o.Height) + r.IntN(400)
		if i%5 == 0 {
			o.Mode, o.Resize = ModeStretch, 0
		}
		o.Layout = []Layout{NCHW, NHWC}[r.IntN(2)]
		o.Scale = []Scale{ScaleNormalized, ScaleRaw}[r.IntN(2)]
		p := mustNew(t, o)
		src := source{pix: pix, stride: w * bpp, bpp: bpp, ch: ch, w: w, h: h, x1: float64(w), y1: float64(h), dispW: w, dispH: h}
		if i%7 == 0 { // a DCT-scaled span, as JPEG decodes give
			src.x1, src.y1 = float64(w)-0.375, float64(h)-0.625
			src.dispW, src.dispH = w*8/3, h*8/3
		}
		for _, f32 := range []bool{false, true} {
			var got, want sink
			if f32 {
				got, want = sink{f32: make([]float32, p.SlotLen())}, sink{f32: make([]float32, p.SlotLen())}
			} else {
				got, want = sink{u8: make([]uint8, p.SlotLen())}, sink{u8: make([]uint8, p.SlotLen())}
			}
			p.refResample(&src, want)
			if err := p.resample(&src, &scratch{fresh: true}, got); err != nil {
				t.Fatal(err)
			}
			same := bytes.Equal(got.u8, want.u8)
			if f32 {
				same = true
				for k := range got.f32 {
					if got.f32[k] != want.f32[k] {
						same = false
						break
					}
				}
			}
			if !same {
				t.Fatalf("case %d: %dx%d bpp %d -> %+v (f32 %v): differs from the reference", i, w, h, bpp, o, f32)
			}
		}
	}
}

// refFinish is the vertical pass as it was (interleaved rows, one accumulator row).
func (p *Preprocessor) refFinish(tmp []uint8, rowLen, ch, yFirst int, vc *resample.Coeffs, out sink) {
	H := p.opts.Height
	acc, row := make([]int32, rowLen), make([]uint8, rowLen)
	ks := vc.KSize
	for yy := range H {
		ymin := int(vc.Bounds[2*yy]) - yFirst
		n := int(vc.Bounds[2*yy+1])
		k := vc.K[yy*ks : yy*ks+n]
		r0 := tmp[ymin*rowLen : (ymin+1)*rowLen]
		w0 := k[0]
		acc := acc[:len(r0)]
		for j, v := range r0 {
			acc[j] = resample.Half + int32(v)*w0
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
			row[j] = refClip8(a)
		}
		p.refEmit(out, yy, row, ch)
	}
}

// hrow3 resamples one row of RGB(x) pixels with bpp bytes per pixel; in
// starts at column xoff.
func refHrow3(dst, in []uint8, bpp int, c *resample.Coeffs, xoff int) {
	ks := c.KSize
	n := len(dst) / 3
	b := c.Bounds[:2*n]
	for xx := range n {
		xmin := int(b[2*xx]) - xoff
		k := c.K[xx*ks : xx*ks+int(b[2*xx+1])]
		px := in[xmin*bpp:]
		s0, s1, s2 := resample.Half, resample.Half, resample.Half
		for i, w := range k {
			q := px[i*bpp : i*bpp+3]
			s0 += int32(q[0]) * w
			s1 += int32(q[1]) * w
			s2 += int32(q[2]) * w
		}
		d := dst[xx*3 : xx*3+3]
		d[0] = refClip8(s0)
		d[1] = refClip8(s1)
		d[2] = refClip8(s2)
	}
}

// hrow1 resamples one row of gray pixels; in starts at column xoff.
func refHrow1(dst, in []uint8, c *resample.Coeffs, xoff int) {
	ks := c.KSize
	b := c.Bounds[:2*len(dst)]
	for xx := range dst {
		xmin := int(b[2*xx]) - xoff
		k := c.K[xx*ks : xx*ks+int(b[2*xx+1])]
		px := in[xmin:]
		px = px[:len(k)]
		s0 := resample.Half
		for i, w := range k {
			s0 += int32(px[i]) * w
		}
		dst[xx] = refClip8(s0)
	}
}

// emit writes output row y (W pixels of ch channels) into the slot.
func (p *Preprocessor) refEmit(out sink, y int, row []uint8, ch int) {
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
