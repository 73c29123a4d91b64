//go:build goexperiment.simd && amd64

package wire

import "simd/archsimd"

// AVX2 base64 decoding (Go's experimental simd/archsimd, built with
// GOEXPERIMENT=simd): 32 characters in, 24 bytes out per step. Each character
// is split into its high and low nibble; two byte shuffles of 16-entry tables
// tell whether it is in the alphabet (the AND of its two class bits is zero),
// a third gives the offset that turns it into its six bits. Two multiply-adds
// pack each group's 4x6 bits into a 32-bit lane, and a byte shuffle plus a
// cross-lane permute make the 24 bytes contiguous. decodeStdBase64 checks the
// validity flag and decodes the rest with its table loop.

var hasAVX2 = archsimd.X86.AVX2()

// twice repeats a 16-byte table in both 128-bit lanes (VPSHUFB works per lane).
func twice(t [16]int8) *[32]int8 {
	var r [32]int8
	copy(r[:16], t[:])
	copy(r[16:], t[:])
	return &r
}

// Class bits: a character is invalid when b64ClassLo[low nibble] and
// b64ClassHi[high nibble] share a bit.
//
//	0x01: high nibble 2, valid low nibbles b ('+') and f ('/')
//	0x02: high nibble 3, valid 0-9 ('0'-'9')
//	0x04: high nibbles 4 and 6, valid 1-f ('A'-'O', 'a'-'o')
//	0x08: high nibbles 5 and 7, valid 0-a ('P'-'Z', 'p'-'z')
//	0x10: every other high nibble, nothing valid
var (
	b64ClassLo = twice([16]int8{
		0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
		0x11, 0x11, 0x13, 0x1a, 0x1b, 0x1b, 0x1b, 0x1a,
	})
	b64ClassHi = twice([16]int8{
		0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08,
		0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
	})
	// b64Offset[high nibble] is what to add to a valid character to get its
	// value; '/' uses index 1 (its high nibble 2, minus one).
	b64Offset = twice([16]int8{
		0, 63 - '/', 62 - '+', 52 - '0', -'A', -'A', 26 - 'a', 26 - 'a',
		0, 0, 0, 0, 0, 0, 0, 0,
	})
	// b64Pack moves each 32-bit lane's low three bytes, high byte first, to
	// the first 12 bytes of its 128-bit lane.
	b64Pack = twice([16]int8{2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1})
	// b64Join puts the two 12-byte halves next to each other.
	b64Join = [8]uint32{0, 1, 2, 4, 5, 6, 3, 7}
	// b64Mul1 (bytes 0x40, 0x01) makes each pair of 6-bit values a 12-bit one;
	// b64Mul2 (16-bit 0x1000, 0x0001) each pair of 12-bit values a 24-bit one.
	b64Mul1 = func() *[32]int8 {
		var r [32]int8
		for k := range r {
			r[k] = [2]int8{0x40, 0x01}[k%2]
		}
		return &r
	}()
	b64Mul2 = func() *[16]int16 {
		var r [16]int16
		for k := range r {
			r[k] = [2]int16{0x1000, 0x0001}[k%2]
		}
		return &r
	}()
)

// decodeStdBase64Vec decodes whole 32-character blocks of src (none of which
// may hold padding) into dst, as long as a block's 32-byte store (24 bytes of
// output, 8 bytes of junk after them) fits in dst. It returns the number of
// characters consumed (a multiple of 32; the bytes written are 3/4 of that)
// and whether all of them were in the standard alphabet. If not, dst holds
// junk and the caller must decode another way.
func decodeStdBase64Vec(dst, src []byte) (n int, ok bool) {
	if !hasAVX2 {
		return 0, true
	}
	classLo := archsimd.LoadInt8x32(b64ClassLo)
	classHi := archsimd.LoadInt8x32(b64ClassHi)
	offset := archsimd.LoadInt8x32(b64Offset)
	pack := archsimd.LoadInt8x32(b64Pack)
	join := archsimd.LoadUint32x8(&b64Join)
	mul1 := archsimd.LoadInt8x32(b64Mul1)
	mul2 := archsimd.LoadInt16x16(b64Mul2)
	nibble := archsimd.BroadcastUint8x32(0x0f)
	slash := archsimd.BroadcastUint8x32('/')
	// A shift by a vector of counts (VPSRLVD): ShiftAllRight(4) loads its count into
	// an XMM register with a legacy-SSE MOVQ in every iteration, which costs
	// an SSE/AVX transition and makes the loop several times slower.
	four := archsimd.BroadcastUint32x8(4)
	var bad archsimd.Int8x32
	i, j := 0, 0
	for ; i+32 <= len(src) && j+32 <= len(dst); i, j = i+32, j+24 {
		c := archsimd.LoadUint8x32((*[32]uint8)(src[i : i+32]))
		hi := c.AsUint32x8().ShiftRight(four).AsUint8x32().And(nibble).AsInt8x32()
		lo := c.And(nibble).AsInt8x32()
		bad = bad.Or(classLo.PermuteOrZeroGrouped(lo).And(classHi.PermuteOrZeroGrouped(hi)))
		// '/' shares its high nibble with '+': the equality mask (-1) moves
		// it to its own offset entry.
		idx := hi.Add(c.Equal(slash).ToInt8x32())
		v := c.Add(offset.PermuteOrZeroGrouped(idx).AsUint8x32())
		w := v.DotProductPairsSaturated(mul1).DotProductPairs(mul2)
		out := w.AsUint8x32().PermuteOrZeroGrouped(pack).AsUint32x8().Permute(join).AsUint8x32()
		out.Store((*[32]uint8)(dst[j : j+32]))
	}
	ok = bad.IsZero()
	// The compiler does not yet emit VZEROUPPER: leave no dirty upper halves
	// to the SSE code that follows.
	archsimd.ClearAVXUpperBits()
	return i, ok
}
