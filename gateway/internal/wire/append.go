package wire

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// JSON output: what the gateway writes is valid JSON whatever a model or a client put in it.

// AppendJSONString appends s as a JSON string (invalid UTF-8 replaced).
func AppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size - 1
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// AppendJSONFloat appends v, or null for NaN and ±Inf (which JSON cannot hold; a model output
// may).
func AppendJSONFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', 6, 64)
}

// AppendJSONFloat32 appends f in its shortest float32 form, or null for NaN and ±Inf.
func AppendJSONFloat32(b []byte, f float32) []byte {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, float64(f), 'g', -1, 32)
}
