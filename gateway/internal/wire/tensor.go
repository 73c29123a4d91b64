package wire

import (
	"encoding/binary"
	"math"
	"strconv"
	"unsafe"
)

// Elem is the element type of a model's input tensor: float32, or uint8 for raw pixels.
type Elem interface{ float32 | uint8 }

// MaxDims bounds a tensor's dimensions in a request.
const MaxDims = 8

// JSONStrings returns the raw contents (escapes not undone) of the n strings of a JSON array,
// flat or nested; any other count or element is an error.
func JSONStrings(data []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	p := scanner{b: data}
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > MaxDims {
			return Malformed("BYTES data nested deeper than %d", MaxDims)
		}
		return p.array(func() error {
			if p.i < len(p.b) && p.b[p.i] == '[' {
				return walk(depth + 1)
			}
			if len(out) == n {
				return Malformed("BYTES data holds more than the %d elements the shape says", n)
			}
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return Malformed("BYTES data must be strings (base64-encoded images)")
			}
			s, _, err := p.str()
			out = append(out, s)
			return err
		})
	}
	if err := walk(0); err != nil {
		return nil, err
	}
	if p.ws(); p.i != len(p.b) {
		return nil, Malformed("malformed BYTES data at byte %d", p.i)
	}
	if len(out) != n {
		return nil, Malformed("BYTES input shape says %d elements, the data holds %d", n, len(out))
	}
	return out, nil
}

// FillJSON fills rows, in row-major order, from JSON numbers, flat or nested. It stops at
// the first value beyond the rows and refuses a short fill, NaN/Inf, and for uint8 anything
// but an integer 0..255.
func FillJSON[T Elem](rows [][]T, data []byte) error {
	if len(rows) == 0 {
		return nil
	}
	rowLen := len(rows[0])
	total := len(rows) * rowLen
	_, isU8 := any(rows[0]).([]uint8)
	k := 0
	p := scanner{b: data}
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > MaxDims+1 {
			return Malformed("tensor data nested deeper than %d", MaxDims+1)
		}
		return p.array(func() error {
			if p.i < len(p.b) && p.b[p.i] == '[' {
				return walk(depth + 1)
			}
			if k == total {
				return Malformed("tensor data holds more than the %d values its shape says", total)
			}
			lit := p.literal()
			if len(lit) == 0 || !isJSONNumber(unsafe.String(&lit[0], len(lit))) {
				return Malformed("tensor data must be numbers, got %q at value %d", Truncate(string(lit), 20), k)
			}
			s := unsafe.String(&lit[0], len(lit))
			row := rows[k/rowLen]
			if isU8 {
				v, err := strconv.ParseUint(s, 10, 8)
				if err != nil {
					return Malformed("UINT8 data must be integers 0..255, got %q at value %d", Truncate(s, 20), k)
				}
				row[k%rowLen] = T(v)
			} else {
				v, err := strconv.ParseFloat(s, 32)
				if err != nil || math.IsInf(v, 0) {
					return Malformed("FP32 value %q at %d is out of range", Truncate(s, 20), k)
				}
				row[k%rowLen] = T(v)
			}
			k++
			return nil
		})
	}
	if err := walk(0); err != nil {
		return err
	}
	if p.ws(); p.i != len(p.b) {
		return Malformed("malformed tensor data at byte %d", p.i)
	}
	if k != total {
		return Malformed("tensor data holds %d values, its shape needs %d", k, total)
	}
	return nil
}

// FillBinary fills rows from raw little-endian data of exactly their size (checked by the
// caller); FP32 NaN and Inf are refused.
func FillBinary[T Elem](rows [][]T, raw []byte) error {
	for i, row := range rows {
		switch r := any(row).(type) {
		case []uint8:
			copy(r, raw[i*len(r):])
		case []float32:
			src := raw[i*4*len(r):]
			for j := range r {
				f := math.Float32frombits(binary.LittleEndian.Uint32(src[4*j:]))
				if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
					return Malformed("FP32 input holds NaN or Inf in sample %d", i)
				}
				r[j] = f
			}
		}
	}
	return nil
}

// BYTES tensor data in binary (the binary tensor data extension): each element is a 4-byte
// little-endian length and that many bytes.

// CountBytesElements checks that raw is a whole number of BYTES elements and returns it.
func CountBytesElements(raw []byte) (int, error) {
	count := 0
	for p := raw; len(p) > 0; count++ {
		if len(p) < 4 {
			return 0, Malformed("binary BYTES data: element %d has a truncated length", count)
		}
		l := binary.LittleEndian.Uint32(p)
		if uint64(l) > uint64(len(p)-4) {
			return 0, Malformed("binary BYTES data: element %d declares %d bytes, %d remain", count, l, len(p)-4)
		}
		p = p[4+l:]
	}
	return count, nil
}

// NextBytesElement splits the first element off raw, which CountBytesElements accepted.
func NextBytesElement(raw []byte) (elem, rest []byte) {
	l := binary.LittleEndian.Uint32(raw)
	return raw[4 : 4+l], raw[4+l:]
}

// AppendBytesElement appends e as a BYTES element.
func AppendBytesElement(b, e []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
	return append(b, e...)
}
