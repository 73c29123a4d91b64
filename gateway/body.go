package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"unsafe"
)

// DecodeJSONImage decodes the article's request body, {"image": "<base64>"}, into dst (grown
// as needed; scratch is a second reusable buffer) without unmarshalling the whole body, and
// returns the image bytes and the buffers for reuse. It is what /predict/ does with a JSON
// body; exported for benchmarks that measure the same work without HTTP.
func DecodeJSONImage(body, dst, scratch []byte) (img, scratchOut []byte, err error) {
	field, err := extractJSONField(body, "image")
	if err != nil {
		return nil, scratch, err
	}
	if field, err = stripDataURL(field); err != nil {
		return nil, scratch, err
	}
	return decodeBase64(dst, scratch, field)
}

// stripDataURL removes a data URL's "data:<type>;base64," prefix (what a
// browser's FileReader.readAsDataURL produces) from the raw contents of a JSON
// string; other strings are returned as they are.
func stripDataURL(v []byte) ([]byte, error) {
	if len(v) < 5 || !bytes.EqualFold(v[:5], []byte("data:")) {
		return v, nil
	}
	head, rest, ok := bytes.Cut(v, []byte(","))
	if !ok || len(head) > 256 {
		return nil, bodyErr("the image is a data: URL without its ',' (want data:<type>;base64,<data>)")
	}
	if !bytes.HasSuffix(bytes.ToLower(head), []byte(";base64")) {
		return nil, bodyErr("the image is a data: URL that is not base64-encoded (%q); want data:<type>;base64,<data>", truncate(string(head), 60))
	}
	return rest, nil
}

// extractJSONField finds the top-level string field key in the JSON object body and returns
// its raw contents (between the quotes, escapes not undone) without unmarshalling the whole
// body. It checks that the body is one well-formed JSON object.
func extractJSONField(body []byte, key string) ([]byte, error) {
	p := jsonScanner{b: body}
	p.ws()
	if !p.eat('{') {
		return nil, bodyErr("want a JSON object such as {\"image\": \"<base64>\"}")
	}
	var found []byte
	have := false
	p.ws()
	if p.eat('}') {
		return nil, bodyErr("the JSON object has no %q field", key)
	}
	for {
		p.ws()
		k, esc, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if !p.eat(':') {
			return nil, bodyErr("malformed JSON at byte %d: want ':'", p.i)
		}
		p.ws()
		if keyEquals(k, esc, key) {
			if have {
				return nil, bodyErr("the JSON object has more than one %q field", key)
			}
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, bodyErr("field %q must be a string", key)
			}
			v, _, err := p.str()
			if err != nil {
				return nil, err
			}
			found, have = v, true
		} else if err := p.skipValue(0); err != nil {
			return nil, err
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			break
		}
		return nil, bodyErr("malformed JSON at byte %d: want ',' or '}'", p.i)
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, bodyErr("malformed JSON: unexpected data after the object at byte %d", p.i)
	}
	if !have {
		return nil, bodyErr("the JSON object has no %q field", key)
	}
	return found, nil
}

// keyEquals reports whether the raw contents of a JSON string (esc: it holds
// escapes) spell key, reading escapes as any JSON parser does ("\u0069mage" is
// "image"). Keys with escapes are rare and short: encoding/json unescapes them.
func keyEquals(raw []byte, esc bool, key string) bool {
	if !esc {
		return string(raw) == key
	}
	if len(raw) > 6*len(key) { // each character is at most a six-byte escape
		return false
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var s string
	return json.Unmarshal(q, &s) == nil && s == key
}

type jsonScanner struct {
	b []byte
	i int
}

func (p *jsonScanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonScanner) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a JSON string at p.i and returns its raw contents and whether it has escapes.
func (p *jsonScanner) str() ([]byte, bool, error) {
	if !p.eat('"') {
		return nil, false, bodyErr("malformed JSON at byte %d: want a string", p.i)
	}
	start := p.i
	esc := false
	b := p.b
	for i := p.i; i < len(b); i++ {
		// Skip plain string bytes eight at a time, and once 64 of them were plain, 64 at a
		// time with AVX2 (the image is ~all of them; a string with an escape every few
		// bytes never pays for the vector setup).
		for n := 0; i+8 <= len(b) && plain8(binary.LittleEndian.Uint64(b[i:])); n++ {
			i += 8
			if n == 7 {
				i += plainPrefix(b[i:])
			}
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			p.i = i + 1
			return b[start:i], esc, nil
		case c == '\\':
			esc = true
			i++
			if i >= len(b) {
				break
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return nil, false, bodyErr("malformed JSON: bad \\u escape at byte %d", i)
				}
				i += 4
			default:
				return nil, false, bodyErr("malformed JSON: bad escape at byte %d", i)
			}
		case c < 0x20:
			return nil, false, bodyErr("malformed JSON: control character in a string at byte %d", i)
		}
	}
	return nil, false, bodyErr("malformed JSON: unterminated string (the body may be truncated)")
}

// plain8 reports whether none of the eight bytes in x is '"', '\\' or a control
// character (< 0x20), i.e. all of them stand for themselves inside a JSON string. Each test
// is the exact "has a byte equal to / less than" word trick: a byte's borrow reaches its top
// bit only where that byte matched, and bytes that matched are what is asked about.
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	ctl := (x - 0x20*ones) &^ x // top bit where a byte is < 0x20 (or borrowed into)
	q := x ^ '"'*ones           // zero bytes where x has '"'
	bs := x ^ '\\'*ones         // zero bytes where x has '\\'
	quote := (q - ones) &^ q    // top bit where q has a zero byte
	back := (bs - ones) &^ bs   // same for '\\'
	return (ctl|quote|back)&highs == 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

const maxJSONDepth = 64

func (p *jsonScanner) skipValue(depth int) error {
	if depth > maxJSONDepth {
		return bodyErr("malformed JSON: nested deeper than %d", maxJSONDepth)
	}
	if p.i >= len(p.b) {
		return bodyErr("malformed JSON: unexpected end (the body may be truncated)")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, _, err := p.str()
		return err
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.i++
		p.ws()
		if p.eat(closing) {
			return nil
		}
		for {
			p.ws()
			if c == '{' {
				if _, _, err := p.str(); err != nil {
					return err
				}
				p.ws()
				if !p.eat(':') {
					return bodyErr("malformed JSON at byte %d: want ':'", p.i)
				}
				p.ws()
			}
			if err := p.skipValue(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat(closing) {
				return nil
			}
			return bodyErr("malformed JSON at byte %d", p.i)
		}
	default:
		start := p.i
		for p.i < len(p.b) {
			c := p.b[p.i]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			p.i++
		}
		lit := string(p.b[start:p.i])
		switch lit {
		case "true", "false", "null":
			return nil
		}
		if !isJSONNumber(lit) {
			return bodyErr("malformed JSON at byte %d: unexpected %q", start, truncate(lit, 20))
		}
		return nil
	}
}

func isJSONNumber(s string) bool {
	if s == "" {
		return false
	}
	i := 0
	if s[i] == '-' {
		i++
	}
	digits := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		digits++
	}
	if digits == 0 || digits > 1 && s[i-digits] == '0' {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			d++
		}
		if d == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			d++
		}
		if d == 0 {
			return false
		}
	}
	return i == len(s)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// decodeBase64 decodes src (the raw contents of a JSON string) into dst[:0], growing it as
// needed, and returns the decoded bytes and the scratch buffer it used (for reuse). It accepts
// the standard and URL-safe alphabets, with or without padding, and line breaks or spaces (raw
// or as the JSON escapes \n \r \t, and \/). Anything else is an error naming the offending byte.
func decodeBase64(dst, scratch, src []byte) (out, scratchOut []byte, err error) {
	return decodeBase64Budget(dst, scratch, src, nil)
}

// decodeBase64Budget is decodeBase64 that, when the string is not canonical base64 and its
// characters must be copied into scratch first, takes their size from reserve (when not nil).
func decodeBase64Budget(dst, scratch, src []byte, reserve func(int64) error) (out, scratchOut []byte, err error) {
	if len(src) == 0 {
		return nil, scratch, bodyErr("the image is empty")
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
		c := src[i]
		switch {
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_':
			if pad > 0 {
				return nil, clean, bodyErr("invalid base64: data after '=' padding at byte %d", i)
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
		case c == '\\' && i+1 < len(src):
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
					return nil, clean, bodyErr("invalid base64: unexpected character U+%04X (an escape) at byte %d", r, i-1)
				}
				e = byte(r)
				i += 4
			default:
				return nil, clean, bodyErr("invalid base64: unexpected escape \\%c at byte %d", e, i-1)
			}
			switch {
			case e == ' ' || e == '\n' || e == '\r' || e == '\t':
				continue
			case !(e >= 'A' && e <= 'Z' || e >= 'a' && e <= 'z' || e >= '0' && e <= '9' || e == '+' || e == '/' || e == '-' || e == '_' || e == '='):
				return nil, clean, bodyErr("invalid base64: unexpected character %q (an escape) at byte %d", e, i)
			case e == '=':
				pad++
				continue
			case pad > 0:
				return nil, clean, bodyErr("invalid base64: data after '=' padding at byte %d", i)
			}
			switch e {
			case '+', '/':
				std = true
			case '-':
				urlSafe, e = true, '+'
			case '_':
				urlSafe, e = true, '/'
			}
			clean = append(clean, e)
		default:
			return nil, clean, bodyErr("invalid base64: unexpected character %q at byte %d", c, i)
		}
	}
	if urlSafe && std {
		return nil, clean, bodyErr("invalid base64: mixes the standard (+/) and URL-safe (-_) alphabets")
	}
	if pad > 2 || (pad > 0 && (len(clean)+pad)%4 != 0) {
		return nil, clean, bodyErr("invalid base64: bad '=' padding")
	}
	if len(clean)%4 == 1 {
		return nil, clean, bodyErr("invalid base64: %d characters is not a valid base64 length (truncated?)", len(clean))
	}
	if len(clean) == 0 {
		return nil, clean, bodyErr("the image is empty")
	}
	n, err := base64.RawStdEncoding.Decode(dst, clean)
	if err != nil {
		return nil, clean, bodyErr("invalid base64: %v", err)
	}
	return dst[:n], clean, nil
}

// object reads a JSON object at p.i, calling fn for each key with p.i at its value; fn must
// consume the value. With top, the object must be the whole input (bar whitespace).
func (p *jsonScanner) object(fn func(key []byte, esc bool) error, top bool) error {
	p.ws()
	if !p.eat('{') {
		return bodyErr("malformed JSON at byte %d: want an object", p.i)
	}
	p.ws()
	if !p.eat('}') {
		for {
			p.ws()
			k, esc, err := p.str()
			if err != nil {
				return err
			}
			p.ws()
			if !p.eat(':') {
				return bodyErr("malformed JSON at byte %d: want ':'", p.i)
			}
			p.ws()
			if err := fn(k, esc); err != nil {
				return err
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			if p.eat('}') {
				break
			}
			return bodyErr("malformed JSON at byte %d: want ',' or '}'", p.i)
		}
	}
	if top {
		p.ws()
		if p.i != len(p.b) {
			return bodyErr("malformed JSON: unexpected data after the object at byte %d", p.i)
		}
	}
	return nil
}

// array reads a JSON array at p.i, calling fn with p.i at each element; fn must consume it.
func (p *jsonScanner) array(fn func() error) error {
	p.ws()
	if !p.eat('[') {
		return bodyErr("malformed JSON at byte %d: want an array", p.i)
	}
	p.ws()
	if p.eat(']') {
		return nil
	}
	for {
		p.ws()
		if err := fn(); err != nil {
			return err
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat(']') {
			return nil
		}
		return bodyErr("malformed JSON at byte %d: want ',' or ']'", p.i)
	}
}

// stringValue reads a JSON string of at most max bytes (escapes undone) for field what.
func (p *jsonScanner) stringValue(max int, what string) ([]byte, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, bodyErr("%s must be a string", what)
	}
	raw, esc, err := p.str()
	if err != nil {
		return nil, err
	}
	if len(raw) > 6*max {
		return nil, bodyErr("%s is longer than %d bytes", what, max)
	}
	if esc {
		var s string
		q := append(append([]byte{'"'}, raw...), '"')
		if err := json.Unmarshal(q, &s); err != nil {
			return nil, bodyErr("%s: %v", what, err)
		}
		raw = []byte(s)
	}
	if len(raw) > max {
		return nil, bodyErr("%s is longer than %d bytes", what, max)
	}
	return raw, nil
}

// literal reads a JSON literal (number, true, false, null) at p.i.
func (p *jsonScanner) literal() []byte {
	start := p.i
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return p.b[start:p.i]
		}
		p.i++
	}
	return p.b[start:p.i]
}

func (p *jsonScanner) boolValue(what string) (bool, error) {
	switch string(p.literal()) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, bodyErr("%s must be true or false", what)
}

// intValue reads a JSON integer (a number without fraction or exponent, within int64).
func (p *jsonScanner) intValue(what string) (int64, error) {
	lit := p.literal()
	n, err := strconv.ParseInt(string(lit), 10, 64)
	if err != nil || !isJSONNumber(string(lit)) {
		return 0, bodyErr("%s must be an integer, got %q", what, truncate(string(lit), 20))
	}
	return n, nil
}

// jsonStrings returns the raw contents (escapes not undone) of the n strings of a JSON array,
// flat or nested; any other count or element is an error.
func jsonStrings(data []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	p := jsonScanner{b: data}
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > maxDims {
			return bodyErr("BYTES data nested deeper than %d", maxDims)
		}
		return p.array(func() error {
			if p.i < len(p.b) && p.b[p.i] == '[' {
				return walk(depth + 1)
			}
			if len(out) == n {
				return bodyErr("BYTES data holds more than the %d elements the shape says", n)
			}
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return bodyErr("BYTES data must be strings (base64-encoded images)")
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
		return nil, bodyErr("malformed BYTES data at byte %d", p.i)
	}
	if len(out) != n {
		return nil, bodyErr("BYTES input shape says %d elements, the data holds %d", n, len(out))
	}
	return out, nil
}

// fillRowsJSON fills rows, in row-major order, from JSON numbers, flat or nested. It stops at
// the first value beyond the rows and refuses a short fill, NaN/Inf, and for uint8 anything
// but an integer 0..255.
func fillRowsJSON[T Elem](rows [][]T, data []byte) error {
	if len(rows) == 0 {
		return nil
	}
	rowLen := len(rows[0])
	total := len(rows) * rowLen
	_, isU8 := any(rows[0]).([]uint8)
	k := 0
	p := jsonScanner{b: data}
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > maxDims+1 {
			return bodyErr("tensor data nested deeper than %d", maxDims+1)
		}
		return p.array(func() error {
			if p.i < len(p.b) && p.b[p.i] == '[' {
				return walk(depth + 1)
			}
			if k == total {
				return bodyErr("tensor data holds more than the %d values its shape says", total)
			}
			lit := p.literal()
			if len(lit) == 0 || !isJSONNumber(unsafe.String(&lit[0], len(lit))) {
				return bodyErr("tensor data must be numbers, got %q at value %d", truncate(string(lit), 20), k)
			}
			s := unsafe.String(&lit[0], len(lit))
			row := rows[k/rowLen]
			if isU8 {
				v, err := strconv.ParseUint(s, 10, 8)
				if err != nil {
					return bodyErr("UINT8 data must be integers 0..255, got %q at value %d", truncate(s, 20), k)
				}
				row[k%rowLen] = T(v)
			} else {
				v, err := strconv.ParseFloat(s, 32)
				if err != nil || math.IsInf(v, 0) {
					return bodyErr("FP32 value %q at %d is out of range", truncate(s, 20), k)
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
		return bodyErr("malformed tensor data at byte %d", p.i)
	}
	if k != total {
		return bodyErr("tensor data holds %d values, its shape needs %d", k, total)
	}
	return nil
}

// fillRowsBinary fills rows from raw little-endian data of exactly their size (checked by the
// caller); FP32 NaN and Inf are refused.
func fillRowsBinary[T Elem](rows [][]T, raw []byte) error {
	for i, row := range rows {
		switch r := any(row).(type) {
		case []uint8:
			copy(r, raw[i*len(r):])
		case []float32:
			src := raw[i*4*len(r):]
			for j := range r {
				f := math.Float32frombits(binary.LittleEndian.Uint32(src[4*j:]))
				if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
					return bodyErr("FP32 input holds NaN or Inf in sample %d", i)
				}
				r[j] = f
			}
		}
	}
	return nil
}
