//go:build goexperiment.simd && amd64

package wire

import (
	"math/bits"
	"simd/archsimd"
)

// plainPrefix returns how many bytes at the start of b stand for themselves inside a JSON
// string: none of them is '"', '\\' or a control character (< 0x20). It looks at 64 bytes a
// step with AVX2 (a base64 image is ~all such bytes) and stops before the last 64; str's
// word loop takes the rest.
func plainPrefix(b []byte) int {
	if !hasAVX2 {
		return 0
	}
	quote := archsimd.BroadcastUint8x32('"')
	back := archsimd.BroadcastUint8x32('\\')
	ctl := archsimd.BroadcastUint8x32(0x1f)
	i := 0
	defer archsimd.ClearAVXUpperBits()
	for ; i+64 <= len(b); i += 64 {
		x := archsimd.LoadUint8x32Slice(b[i:])
		y := archsimd.LoadUint8x32Slice(b[i+32:])
		// A byte is special when it equals '"' or '\\', or when it is its own minimum
		// with 0x1f (unsigned: it is at most 0x1f).
		mx := x.Equal(quote).Or(x.Equal(back)).Or(x.Min(ctl).Equal(x))
		my := y.Equal(quote).Or(y.Equal(back)).Or(y.Min(ctl).Equal(y))
		if m := uint64(mx.ToBits()) | uint64(my.ToBits())<<32; m != 0 {
			return i + bits.TrailingZeros64(m)
		}
	}
	return i
}
