package wire

import (
	"encoding/base64"
	"encoding/binary"
	"strconv"
)

// Standard base64 decoding, several times encoding/base64's speed on the
// article's image string (BenchmarkDecodeStdBase64; docs/internals.md): four
// table lookups put each group of four characters' 24 bits in place, and one
// OR across the whole string tells whether any character was outside the
// alphabet. Anything
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
func decodeStdBase64(dst, src []byte) (int, error) { return decodeStdBase64With(dst, src, true) }

// decodeStdBase64With is decodeStdBase64, with the vector path only where vec is set (tests
// compare both).
func decodeStdBase64With(dst, src []byte, vec bool) (int, error) {
	if len(src) < 8 || len(src)%4 != 0 || len(dst) < len(src)/4*3 {
		return base64.StdEncoding.Decode(dst, src)
	}
	t0, t1, t2, t3 := &b64Tables[0], &b64Tables[1], &b64Tables[2], &b64Tables[3]
	body := src[:len(src)-4] // the last group may hold padding: encoding/base64 takes it
	// Whole 32-character blocks first, with AVX2 where built in (base64_simd.go).
	i, ok := 0, true
	if vec {
		i, ok = decodeStdBase64Vec(dst, body)
	}
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

// DecodeBase64 decodes src (the raw contents of a JSON string) into dst[:0], growing it as
// needed, and returns the decoded bytes and the scratch buffer it used (for reuse). It accepts
// the standard and URL-safe alphabets, with or without padding, and line breaks or spaces (raw
// or as the JSON escapes \n \r \t, and \/ and \u00XX). Anything else is an error naming the
// offending byte. When the string is not canonical base64 and its characters must be copied
// into scratch first, their size is taken from reserve (when not nil) and its error returned.
func DecodeBase64(dst, scratch, src []byte, reserve func(int64) error) (out, scratchOut []byte, err error) {
	if len(src) == 0 {
		return nil, scratch, Malformed("the image is empty")
	}
	need := base64.RawStdEncoding.DecodedLen(len(src))
	if cap(dst) < need {
		dst = make([]byte, need)
	}
	dst = dst[:need]
	// Fast path: canonical padded standard base64, the common case.
	if len(src)%4 == 0 {
		if n, err := decodeStdBase64(dst, src); err == nil {
			return dst[:n], scratch, nil
		}
	}
	if reserve != nil {
		if err := reserve(int64(len(src))); err != nil {
			return nil, scratch, err
		}
	}
	if cap(scratch) < len(src) {
		scratch = make([]byte, 0, len(src))
	}
	clean := scratch[:0]
	urlSafe, std := false, false
	pad := 0
	for i := 0; i < len(src); i++ {
		c, at, escaped := src[i], i, false
		if c == '\\' && i+1 < len(src) {
			// A JSON escape: \n \r \t are spaces to skip; \/ and \u00XX stand for the
			// ASCII character they name, which must be base64 (or a space).
			i++
			e := src[i]
			switch {
			case e == 'n', e == 'r', e == 't':
				continue
			case e == '/':
			case e == 'u' && i+4 < len(src) && isHex(src[i+1]) && isHex(src[i+2]) && isHex(src[i+3]) && isHex(src[i+4]):
				r, _ := strconv.ParseUint(string(src[i+1:i+5]), 16, 16)
				if r >= 0x80 {
					return nil, clean, Malformed("invalid base64: unexpected character U+%04X (an escape) at byte %d", r, i-1)
				}
				e = byte(r)
				i += 4
			default:
				return nil, clean, Malformed("invalid base64: unexpected escape \\%c at byte %d", e, i-1)
			}
			c, at, escaped = e, i, true
		}
		switch {
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_':
			if pad > 0 {
				return nil, clean, Malformed("invalid base64: data after '=' padding at byte %d", at)
			}
			switch c {
			case '+', '/':
				std = true
			case '-':
				urlSafe, c = true, '+'
			case '_':
				urlSafe, c = true, '/'
			}
			clean = append(clean, c)
		case c == '=':
			pad++
		case c == ' ' || c == '\n' || c == '\r' || c == '\t':
		case escaped:
			return nil, clean, Malformed("invalid base64: unexpected character %q (an escape) at byte %d", c, at)
		default:
			return nil, clean, Malformed("invalid base64: unexpected character %q at byte %d", c, at)
		}
	}
	if urlSafe && std {
		return nil, clean, Malformed("invalid base64: mixes the standard (+/) and URL-safe (-_) alphabets")
	}
	if pad > 2 || (pad > 0 && (len(clean)+pad)%4 != 0) {
		return nil, clean, Malformed("invalid base64: bad '=' padding")
	}
	if len(clean)%4 == 1 {
		return nil, clean, Malformed("invalid base64: %d characters is not a valid base64 length (truncated?)", len(clean))
	}
	if len(clean) == 0 {
		return nil, clean, Malformed("the image is empty")
	}
	n, err := base64.RawStdEncoding.Decode(dst, clean)
	if err != nil {
		return nil, clean, Malformed("invalid base64: %v", err)
	}
	return dst[:n], clean, nil
}
