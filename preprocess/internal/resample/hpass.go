package resample

// The horizontal pass: for one input row, every output pixel of the crop is
// the sum of its kpad taps (Pillow's fixed-point weights, padded with zeros
// to a fixed count), rounded and clamped to uint8 as Pillow does between
// its two passes. RGB output goes to three planes (R, G, B, Width bytes
// each), which the vertical pass reads as whole rows. The loops are
// unrolled for the tap counts DCT-scaled photos get (2 to 4: the decode
// scale leaves the resize a factor under 2 or 3).

// HPass3 resamples one row of RGB pixels (bpp 3, or 4 with a byte to skip)
// that starts at column xoff into the planes of dst; with vec, with the AVX2
// kernel where there is one.
func HPass3(dst, in []uint8, bpp int, c *Coeffs, xoff int, vec bool) {
	if vec && hpass3Vec(dst, in, bpp, c, xoff) {
		return
	}
	W := len(c.start)
	r, g, b := dst[:W], dst[W:2*W], dst[2*W:3*W]
	st := c.start[:W]
	switch c.kpad {
	case 1:
		kp := c.kp[:W]
		for x, s := range st {
			i := (int(s) - xoff) * bpp
			p := in[i : i+3]
			w := kp[x]
			r[x], g[x], b[x] = clip8(Half+int32(p[0])*w), clip8(Half+int32(p[1])*w), clip8(Half+int32(p[2])*w)
		}
	case 2:
		kp := c.kp[:2*W]
		for x, s := range st {
			i := (int(s) - xoff) * bpp
			p0, p1 := in[i:i+3], in[i+bpp:i+bpp+3]
			k := kp[2*x : 2*x+2]
			w0, w1 := k[0], k[1]
			r[x] = clip8(Half + int32(p0[0])*w0 + int32(p1[0])*w1)
			g[x] = clip8(Half + int32(p0[1])*w0 + int32(p1[1])*w1)
			b[x] = clip8(Half + int32(p0[2])*w0 + int32(p1[2])*w1)
		}
	case 3:
		kp := c.kp[:3*W]
		if bpp == 3 { // one bounds check a pixel: the taps are p[0:9]
			for x, s := range st {
				i := (int(s) - xoff) * 3
				p := in[i : i+9 : i+9]
				k := kp[3*x : 3*x+3 : 3*x+3]
				w0, w1, w2 := k[0], k[1], k[2]
				r[x] = clip8(Half + int32(p[0])*w0 + int32(p[3])*w1 + int32(p[6])*w2)
				g[x] = clip8(Half + int32(p[1])*w0 + int32(p[4])*w1 + int32(p[7])*w2)
				b[x] = clip8(Half + int32(p[2])*w0 + int32(p[5])*w1 + int32(p[8])*w2)
			}
			return
		}
		for x, s := range st {
			i := (int(s) - xoff) * bpp
			p0, p1, p2 := in[i:i+3], in[i+bpp:i+bpp+3], in[i+2*bpp:i+2*bpp+3]
			k := kp[3*x : 3*x+3]
			w0, w1, w2 := k[0], k[1], k[2]
			r[x] = clip8(Half + int32(p0[0])*w0 + int32(p1[0])*w1 + int32(p2[0])*w2)
			g[x] = clip8(Half + int32(p0[1])*w0 + int32(p1[1])*w1 + int32(p2[1])*w2)
			b[x] = clip8(Half + int32(p0[2])*w0 + int32(p1[2])*w1 + int32(p2[2])*w2)
		}
	case 4:
		kp := c.kp[:4*W]
		if bpp == 3 {
			for x, s := range st {
				i := (int(s) - xoff) * 3
				p := in[i : i+12 : i+12]
				k := kp[4*x : 4*x+4 : 4*x+4]
				w0, w1, w2, w3 := k[0], k[1], k[2], k[3]
				r[x] = clip8(Half + int32(p[0])*w0 + int32(p[3])*w1 + int32(p[6])*w2 + int32(p[9])*w3)
				g[x] = clip8(Half + int32(p[1])*w0 + int32(p[4])*w1 + int32(p[7])*w2 + int32(p[10])*w3)
				b[x] = clip8(Half + int32(p[2])*w0 + int32(p[5])*w1 + int32(p[8])*w2 + int32(p[11])*w3)
			}
			return
		}
		for x, s := range st {
			i := (int(s) - xoff) * bpp
			p0, p1, p2, p3 := in[i:i+3], in[i+bpp:i+bpp+3], in[i+2*bpp:i+2*bpp+3], in[i+3*bpp:i+3*bpp+3]
			k := kp[4*x : 4*x+4]
			w0, w1, w2, w3 := k[0], k[1], k[2], k[3]
			r[x] = clip8(Half + int32(p0[0])*w0 + int32(p1[0])*w1 + int32(p2[0])*w2 + int32(p3[0])*w3)
			g[x] = clip8(Half + int32(p0[1])*w0 + int32(p1[1])*w1 + int32(p2[1])*w2 + int32(p3[1])*w3)
			b[x] = clip8(Half + int32(p0[2])*w0 + int32(p1[2])*w1 + int32(p2[2])*w2 + int32(p3[2])*w3)
		}
	default:
		hpass3Range(r, g, b, in, bpp, c, xoff, 0, W)
	}
}

// hpass3Range computes output pixels [from, to) of hpass3, any tap count.
func hpass3Range(r, g, b, in []uint8, bpp int, c *Coeffs, xoff, from, to int) {
	n := c.kpad
	for x := from; x < to; x++ {
		i := (int(c.start[x]) - xoff) * bpp
		p := in[i : i+(n-1)*bpp+3]
		k := c.kp[n*x : n*x+n]
		s0, s1, s2 := Half, Half, Half
		for t, w := range k {
			q := p[t*bpp : t*bpp+3]
			s0 += int32(q[0]) * w
			s1 += int32(q[1]) * w
			s2 += int32(q[2]) * w
		}
		r[x], g[x], b[x] = clip8(s0), clip8(s1), clip8(s2)
	}
}

// HPass1 resamples one row of gray pixels that starts at column xoff.
func HPass1(dst, in []uint8, c *Coeffs, xoff int) {
	W := len(c.start)
	d := dst[:W]
	st := c.start[:W]
	switch c.kpad {
	case 2:
		kp := c.kp[:2*W]
		for x, s := range st {
			i := int(s) - xoff
			p := in[i : i+2]
			k := kp[2*x : 2*x+2]
			d[x] = clip8(Half + int32(p[0])*k[0] + int32(p[1])*k[1])
		}
	case 3:
		kp := c.kp[:3*W]
		for x, s := range st {
			i := int(s) - xoff
			p := in[i : i+3]
			k := kp[3*x : 3*x+3]
			d[x] = clip8(Half + int32(p[0])*k[0] + int32(p[1])*k[1] + int32(p[2])*k[2])
		}
	default:
		n := c.kpad
		for x, s := range st {
			i := int(s) - xoff
			p := in[i : i+n]
			k := c.kp[n*x : n*x+n]
			a := Half
			for t, w := range k {
				a += int32(p[t]) * w
			}
			d[x] = clip8(a)
		}
	}
}
