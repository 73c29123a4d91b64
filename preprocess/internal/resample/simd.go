//go:build goexperiment.simd && amd64

package resample

import (
	"encoding/binary"
	"simd/archsimd"
	"unsafe"
)

// AVX2 kernels of the resampler (Go's experimental simd/archsimd, built with
// GOEXPERIMENT=simd). They compute exactly what the portable kernels
// compute: the same int32 products and sums (integer addition does not care
// about order), the same rounding and clamping, and for the normalized
// output the same float32 operations in the same order (convert, /255,
// -mean, /std; no fused multiply-add). TestSIMDMatchesPortable compares
// them on random geometries.

// simdResampler tells which implementation of the passes runs.
const simdResampler = true

var hasAVX2 = archsimd.X86.AVX2()

// Vector reports whether the AVX2 kernels run (this build and this CPU).
func Vector() bool { return hasAVX2 }

// rgbx are VPSHUFB indices that spread 4 pixels of bpp 3 or 4 bytes into
// 32-bit lanes, two pixels per 8-byte Half: lo takes pixels 0 and 1, hi
// pixels 2 and 3 (the fourth byte of each lane is zeroed).
var rgbx = [5][2]archsimd.Int8x16{
	3: {
		archsimd.LoadInt8x16(&[16]int8{0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
		archsimd.LoadInt8x16(&[16]int8{6, 7, 8, -1, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
	},
	4: {
		archsimd.LoadInt8x16(&[16]int8{0, 1, 2, -1, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
		archsimd.LoadInt8x16(&[16]int8{8, 9, 10, -1, 12, 13, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1}),
	},
}

// hpass3Vec runs hpass3 with AVX2: per output pixel, each group of 4 taps
// is one 16-byte load, two byte shuffles into RGB0 lanes, two 8-lane
// multiplies by the group's weights, and a horizontal add. Output pixels
// whose loads would pass the end of in are left to the portable kernel.
func hpass3Vec(dst, in []uint8, bpp int, c *Coeffs, xoff int) bool {
	if !hasAVX2 || (bpp != 3 && bpp != 4) || len(c.kv) == 0 {
		return false
	}
	W := len(c.start)
	groups := c.kq / 4
	// Vector outputs: those whose last 16-byte load stays in in.
	n := W
	for n > 0 && (int(c.start[n-1])-xoff+4*(groups-1))*bpp+16 > len(in) {
		n--
	}
	r := dst[:n]
	g, b := dst[W:W+n], dst[2*W:2*W+n]
	st := c.start[:n]
	lo, hi := rgbx[bpp][0], rgbx[bpp][1]
	halfv := archsimd.BroadcastInt32x4(Half)
	zero := archsimd.BroadcastInt32x4(0)
	top := archsimd.BroadcastInt32x4(255)
	base := xoff * bpp
	if n > 0 && int(st[0])*bpp < base {
		panic("preprocess: horizontal pass reads before its row") // the window misses columns
	}
	// Starts only grow: the checks above (first) and on n (last) keep every
	// 16-byte load of the loop in in, so the loads go unchecked.
	in0 := unsafe.Pointer(unsafe.SliceData(in))
	if groups == 1 {
		x0 := hpass3Blocks(r, g, b, in0, bpp, base, c.kw[:n], st)
		kv := c.kv[x0:len(st)]
		for x, s := range st[x0:] {
			x += x0
			p := archsimd.LoadUint8x16((*[16]uint8)(unsafe.Add(in0, int(s)*bpp-base)))
			w := &kv[x-x0]
			a := p.PermuteOrZero(lo).ExtendLo8ToUint32().AsInt32x8().Mul(archsimd.LoadInt32x8((*[8]int32)(w[:8])))
			e := p.PermuteOrZero(hi).ExtendLo8ToUint32().AsInt32x8().Mul(archsimd.LoadInt32x8((*[8]int32)(w[8:])))
			a = a.Add(e)
			q := a.GetLo().Add(a.GetHi()).Add(halfv).ShiftAllRight(PrecisionBits).Max(zero).Min(top)
			r[x], g[x], b[x] = uint8(q.GetElem(0)), uint8(q.GetElem(1)), uint8(q.GetElem(2))
		}
	} else {
		kv := c.kv[:len(st)*groups]
		for x, s := range st {
			i := int(s)*bpp - base
			var a archsimd.Int32x8
			ws := kv[x*groups : x*groups+groups]
			for gi := range ws {
				w := &ws[gi] // not a copy: 32-byte loads of 16-byte stores stall
				p := archsimd.LoadUint8x16((*[16]uint8)(in[i+4*gi*bpp:]))
				a = a.Add(p.PermuteOrZero(lo).ExtendLo8ToUint32().AsInt32x8().Mul(archsimd.LoadInt32x8((*[8]int32)(w[:8]))))
				a = a.Add(p.PermuteOrZero(hi).ExtendLo8ToUint32().AsInt32x8().Mul(archsimd.LoadInt32x8((*[8]int32)(w[8:]))))
			}
			q := a.GetLo().Add(a.GetHi()).Add(halfv).ShiftAllRight(PrecisionBits).Max(zero).Min(top)
			r[x], g[x], b[x] = uint8(q.GetElem(0)), uint8(q.GetElem(1)), uint8(q.GetElem(2))
		}
	}
	// The compiler does not yet emit VZEROUPPER: leave no dirty upper halves
	// to the SSE code that follows (the portable tail, the caller). Once per
	// row: VZEROUPPER costs about a cycle, a transition far more.
	archsimd.ClearAVXUpperBits()
	if n < W {
		hpass3Range(dst[:W], dst[W:2*W], dst[2*W:3*W], in, bpp, c, xoff, n, W)
	}
	return true
}

// pairs are VPSHUFB indices that take 4 pixels of bpp 3 or 4 bytes to the byte pairs of
// hpass3Blocks: R0 R1 G0 G1 B0 B1 0 0, R2 R3 G2 G3 B2 B3 0 0.
var pairs = [5]archsimd.Int8x16{
	3: archsimd.LoadInt8x16(&[16]int8{0, 3, 1, 4, 2, 5, -1, -1, 6, 9, 7, 10, 8, 11, -1, -1}),
	4: archsimd.LoadInt8x16(&[16]int8{0, 4, 1, 5, 2, 6, -1, -1, 8, 12, 9, 13, 10, 14, -1, -1}),
}

// planeA and planeB are VPSHUFB indices (per 128-bit Half) that take two packed pixels
// (int16 R G B 0, R G B 0) to byte slots 0, 1 (A) or 2, 3 (B) of the R, G and B dwords;
// planeOrder puts the two halves' dwords of each plane together.
var (
	planeA = archsimd.LoadInt8x32(&[32]int8{0, 8, -1, -1, 2, 10, -1, -1, 4, 12, -1, -1, -1, -1, -1, -1,
		0, 8, -1, -1, 2, 10, -1, -1, 4, 12, -1, -1, -1, -1, -1, -1})
	planeB = archsimd.LoadInt8x32(&[32]int8{-1, -1, 0, 8, -1, -1, 2, 10, -1, -1, 4, 12, -1, -1, -1, -1,
		-1, -1, 0, 8, -1, -1, 2, 10, -1, -1, 4, 12, -1, -1, -1, -1})
	planeOrder = archsimd.LoadUint32x8(&[8]uint32{0, 4, 1, 5, 2, 6, 3, 7})
)

// hpass3Blocks runs hpass3 for a single group of 4 taps, 8 output pixels a step, and returns
// how many pixels it wrote (a multiple of 8; the caller writes the rest). Each pixel's 4 taps
// of R, G and B are multiplied as int16 pairs (VPMADDWD), its weight w split into w>>11 and
// w&2047: (Σ p·(w>>11))<<11 + Σ p·(w&2047) is Σ p·w in int32 arithmetic, the portable
// kernel's sum, to the bit. Pixels x and x+4 share a vector through the reduction; the
// rounding and clamping of 8 pixels take a few instructions, and each plane gets one 8-byte
// store. Every load of in is one hpass3Vec makes for the same pixel.
func hpass3Blocks(r, g, b []uint8, in0 unsafe.Pointer, bpp, base int, kw [][32]int16, st []int32) int {
	n := len(kw) &^ 7
	if n == 0 {
		return 0
	}
	pix := pairs[bpp]
	halfv := archsimd.BroadcastInt32x8(Half)
	zero := archsimd.BroadcastInt16x16(0)
	top := archsimd.BroadcastInt16x16(255)
	idxA, idxB, order := planeA, planeB, planeOrder
	for x := 0; x < n; x += 8 {
		s8, w8 := (*[8]int32)(st[x:x+8]), (*[8][32]int16)(kw[x:x+8])
		// sum is pixel x+i's R, G, B sums: taps 0-1 in the low Half, 2-3 in the high one.
		sum := func(i int) archsimd.Int32x8 {
			p := archsimd.LoadUint8x16((*[16]uint8)(unsafe.Add(in0, int(s8[i])*bpp-base)))
			q := p.PermuteOrZero(pix).ExtendToUint16().AsInt16x16()
			w := &w8[i]
			hi := q.DotProductPairs(archsimd.LoadInt16x16((*[16]int16)(w[:16])))
			lo := q.DotProductPairs(archsimd.LoadInt16x16((*[16]int16)(w[16:])))
			return hi.ShiftAllLeft(11).Add(lo)
		}
		// two is pixels x+i and x+i+4, rounded: R G B 0 of the one, then of the other.
		two := func(i int) archsimd.Int32x8 {
			a, e := sum(i), sum(i+4)
			return a.Select128FromPair(0, 2, e).Add(a.Select128FromPair(1, 3, e)).Add(halfv).ShiftAllRight(PrecisionBits)
		}
		// int16 R G B 0 of pixels x, x+1 (low Half) and x+4, x+5 (high Half); then x+2, x+3
		// and x+6, x+7. Saturating to int16 is exact here; the clamp is clip8's.
		u := two(0).SaturateToInt16ConcatGrouped(two(1)).Max(zero).Min(top)
		v := two(2).SaturateToInt16ConcatGrouped(two(3)).Max(zero).Min(top)
		// R0-3 G0-3 B0-3 (low Half), R4-7 G4-7 B4-7 (high Half), then by plane.
		d := u.AsUint8x32().PermuteOrZeroGrouped(idxA).Or(v.AsUint8x32().PermuteOrZeroGrouped(idxB))
		q := d.AsInt32x8().Permute(order).AsInt64x4()
		lo := q.GetLo()
		binary.LittleEndian.PutUint64(r[x:x+8], uint64(lo.GetElem(0)))
		binary.LittleEndian.PutUint64(g[x:x+8], uint64(lo.GetElem(1)))
		binary.LittleEndian.PutUint64(b[x:x+8], uint64(q.GetHi().GetElem(0)))
	}
	// The caller reloads its vectors, spilled across this call, with legacy-SSE MOVUPS:
	// clean upper halves, or each reload is an SSE/AVX transition (it made hpass3Vec's
	// remaining pixels cost as much as all of these).
	archsimd.ClearAVXUpperBits()
	return n
}

// VRowF32Vec is VRowF32 with AVX2, 8 columns at a time, into d: one output row of one plane
// of an NCHW float32 slot, normalized as (v/255 - mean)/std unless raw, with the float32
// operations in the order the lookup table lut was computed with. It reports false, having
// written nothing, where the vector kernels do not run.
func VRowF32Vec(d []float32, first []uint8, stride int, k []int32, raw bool, mean32, std32 float32, lut *[256]float32) bool {
	if !hasAVX2 {
		return false
	}
	W := len(d)
	halfv := archsimd.BroadcastInt32x8(Half)
	zero := archsimd.BroadcastInt32x8(0)
	top := archsimd.BroadcastInt32x8(255)
	f255 := archsimd.BroadcastFloat32x8(255)
	mean := archsimd.BroadcastFloat32x8(mean32)
	std := archsimd.BroadcastFloat32x8(std32)
	// load reads 8 bytes of a plane row (16 from first[o:]: the caller leaves
	// that room after its rows) as eight int32 lanes.
	load := func(o int) archsimd.Int32x8 {
		return archsimd.LoadUint8x16((*[16]uint8)(first[o:])).ExtendLo8ToUint32().AsInt32x8()
	}
	x := 0
	switch len(k) {
	case 2, 3, 4:
		// Missing taps weigh 0 and read row 0 again. Variables, not arrays:
		// the compiler zeroes arrays with legacy-SSE MOVUPS, which after the
		// 256-bit broadcasts costs an SSE/AVX transition on some CPUs.
		w0, w1, w2, w3 := archsimd.BroadcastInt32x8(k[0]), archsimd.BroadcastInt32x8(k[1]), zero, zero
		o2, o3 := 0, 0
		if len(k) > 2 {
			w2, o2 = archsimd.BroadcastInt32x8(k[2]), 2*stride
		}
		if len(k) > 3 {
			w3, o3 = archsimd.BroadcastInt32x8(k[3]), 3*stride
		}
		for ; x+8 <= W; x += 8 {
			a := halfv.Add(load(x).Mul(w0)).Add(load(x + stride).Mul(w1))
			if len(k) > 2 {
				a = a.Add(load(x + o2).Mul(w2))
			}
			if len(k) > 3 {
				a = a.Add(load(x + o3).Mul(w3))
			}
			f := a.ShiftAllRight(PrecisionBits).Max(zero).Min(top).ConvertToFloat32()
			if !raw {
				f = f.Div(f255).Sub(mean).Div(std)
			}
			f.Store((*[8]float32)(d[x:]))
		}
	default:
		for ; x+8 <= W; x += 8 {
			a := halfv
			o := x
			for _, w := range k {
				a = a.Add(load(o).Mul(archsimd.BroadcastInt32x8(w)))
				o += stride
			}
			f := a.ShiftAllRight(PrecisionBits).Max(zero).Min(top).ConvertToFloat32()
			if !raw {
				f = f.Div(f255).Sub(mean).Div(std)
			}
			f.Store((*[8]float32)(d[x:]))
		}
	}
	// As in hpass3Vec: clean upper halves for the scalar tail (legacy SSE
	// MOVSS) and the caller.
	archsimd.ClearAVXUpperBits()
	if x < W {
		VRowF32(d[x:], first[x:], stride, k, lut) // the last columns, with the portable kernel
	}
	return true
}

// narrow8 picks byte 0 of each 32-bit lane (VPSHUFB within each 128-bit
// Half), then the two halves' first dwords together (VPERMD): 8 lanes of
// 0..255 become 8 bytes in the low 64 bits.
var (
	narrow8Bytes = archsimd.LoadInt8x32(&[32]int8{0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
		0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1})
	narrow8Dwords = archsimd.LoadUint32x8(&[8]uint32{0, 4, 1, 1, 1, 1, 1, 1})
)

// VRowU8Vec is VRow with AVX2, 8 columns at a time, into d: the same sums, rounding and
// clamping. It reports false, having written nothing, where the vector kernels do not run.
func VRowU8Vec(d, first []uint8, stride int, k []int32) bool {
	if !hasAVX2 {
		return false
	}
	W := len(d)
	halfv := archsimd.BroadcastInt32x8(Half)
	zero := archsimd.BroadcastInt32x8(0)
	top := archsimd.BroadcastInt32x8(255)
	load := func(o int) archsimd.Int32x8 {
		return archsimd.LoadUint8x16((*[16]uint8)(first[o:])).ExtendLo8ToUint32().AsInt32x8()
	}
	bytesIdx, dwordIdx := narrow8Bytes, narrow8Dwords // locals: the globals once per row
	// store writes the 8 bytes of a at d[x:]: one 16-byte store where the row has room (its
	// upper 8 bytes are rewritten by the next columns), the low 8 bytes alone at the row's end.
	store := func(x int, a archsimd.Int32x8) {
		q := a.ShiftAllRight(PrecisionBits).Max(zero).Min(top).AsInt8x32().PermuteOrZeroGrouped(bytesIdx).AsInt32x8().Permute(dwordIdx).GetLo()
		if x+16 <= len(d) {
			q.AsUint8x16().Store((*[16]uint8)(d[x:]))
		} else {
			binary.LittleEndian.PutUint64(d[x:x+8], uint64(q.AsInt64x2().GetElem(0)))
		}
	}
	x := 0
	switch len(k) {
	case 2, 3, 4:
		w0, w1, w2, w3 := archsimd.BroadcastInt32x8(k[0]), archsimd.BroadcastInt32x8(k[1]), zero, zero
		o2, o3 := 0, 0
		if len(k) > 2 {
			w2, o2 = archsimd.BroadcastInt32x8(k[2]), 2*stride
		}
		if len(k) > 3 {
			w3, o3 = archsimd.BroadcastInt32x8(k[3]), 3*stride
		}
		for ; x+8 <= W; x += 8 {
			a := halfv.Add(load(x).Mul(w0)).Add(load(x + stride).Mul(w1))
			if len(k) > 2 {
				a = a.Add(load(x + o2).Mul(w2))
			}
			if len(k) > 3 {
				a = a.Add(load(x + o3).Mul(w3))
			}
			store(x, a)
		}
	default:
		for ; x+8 <= W; x += 8 {
			a := halfv
			o := x
			for _, w := range k {
				a = a.Add(load(o).Mul(archsimd.BroadcastInt32x8(w)))
				o += stride
			}
			store(x, a)
		}
	}
	archsimd.ClearAVXUpperBits()
	if x < W {
		VRow(d[x:], first[x:], stride, k) // the last columns, with the portable kernel
	}
	return true
}

// ExpandVec expands bytes s into d, 8 values at a time with the float32 operations of
// VRowF32Vec (convert, /255, -mean, /std, unless raw): it returns how many values it wrote
// (every 16-byte load stays in s; the caller writes the rest).
func ExpandVec(d []float32, s []uint8, raw bool, mean32, std32 float32) int {
	if !hasAVX2 {
		return 0
	}
	f255 := archsimd.BroadcastFloat32x8(255)
	mean := archsimd.BroadcastFloat32x8(mean32)
	std := archsimd.BroadcastFloat32x8(std32)
	i := 0
	for ; i+16 <= len(s) && i+8 <= len(d); i += 8 {
		f := archsimd.LoadUint8x16((*[16]uint8)(s[i:])).ExtendLo8ToUint32().AsInt32x8().ConvertToFloat32()
		if !raw {
			f = f.Div(f255).Sub(mean).Div(std)
		}
		f.Store((*[8]float32)(d[i:]))
	}
	archsimd.ClearAVXUpperBits()
	return i
}
