package gateway

import (
	"encoding/base64"
	"encoding/binary"
)

// Standard base64 decoding, about three times encoding/base64's speed on the
// article's 310 KB image string (BenchmarkDecodeStdBase64): four table lookups
// put each group of four characters' 24 bits in place, and one OR across the
// whole string tells whether any character was outside the alphabet. Anything
// else (an invalid character, a line break, padding, trailing bits) is left to
// encoding/base64, so the result and the errors are always exactly its own.
// Built with GOEXPERIMENT=simd on amd64 with AVX2, whole 32-character blocks
// are decoded first with vector instructions (base64_simd.go).

const b64Invalid = 1 << 31

// b64Tables[k][c] is character c's six bits at position k of a group, shifted
// into place; b64Invalid for characters outside the standard alphabet.
var b64Tables = func() (t [4][256]uint32) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for k := range t {
		for c := range t[k] {
			t[k][c] = b64Invalid
		}
		for v := range len(alphabet) {
			t[k][alphabet[v]] = uint32(v) << (18 - 6*k)
		}
	}
	return t
}()

// decodeStdBase64 decodes padded standard base64 into dst as
// base64.StdEncoding.Decode does, with the same result and error.
func decodeStdBase64(dst, src []byte) (int, error) {
	if len(src) < 8 || len(src)%4 != 0 || len(dst) < len(src)/4*3 {
		return base64.StdEncoding.Decode(dst, src)
	}
	t0, t1, t2, t3 := &b64Tables[0], &b64Tables[1], &b64Tables[2], &b64Tables[3]
	body := src[:len(src)-4] // the last group may hold padding: encoding/base64 takes it
	// Whole 32-character blocks first, with AVX2 where built in (base64_simd.go).
	i, ok := decodeStdBase64Vec(dst, body)
	if !ok {
		return base64.StdEncoding.Decode(dst, src)
	}
	j := i / 4 * 3
	var bad uint32
	// Eight characters at a time: one 64-bit load, six bytes out in one 64-bit store (the
	// two extra bytes land in the last group's place, which is written after).
	for ; i+8 <= len(body); i, j = i+8, j+6 {
		v := binary.LittleEndian.Uint64(body[i:])
		x := t0[byte(v)] | t1[byte(v>>8)] | t2[byte(v>>16)] | t3[byte(v>>24)]
		y := t0[byte(v>>32)] | t1[byte(v>>40)] | t2[byte(v>>48)] | t3[byte(v>>56)]
		bad |= x | y
		binary.BigEndian.PutUint64(dst[j:], (uint64(x)<<24|uint64(y&0xffffff))<<16)
	}
	for ; i+4 <= len(body); i, j = i+4, j+3 {
		s := body[i : i+4 : i+4]
		x := t0[s[0]] | t1[s[1]] | t2[s[2]] | t3[s[3]]
		bad |= x
		d := dst[j : j+3 : j+3]
		d[0], d[1], d[2] = byte(x>>16), byte(x>>8), byte(x)
	}
	if bad&b64Invalid != 0 {
		return base64.StdEncoding.Decode(dst, src)
	}
	n, err := base64.StdEncoding.Decode(dst[j:], src[len(body):])
	if err != nil {
		if ce, ok := err.(base64.CorruptInputError); ok {
			return j + n, base64.CorruptInputError(int64(len(body)) + int64(ce))
		}
		return j + n, err
	}
	return j + n, nil
}
