package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
)

// DecodeJSONImage decodes the article's request body, {"image": "<base64>"}, into dst (grown
// as needed; scratch is a second reusable buffer) without unmarshalling the whole body, and
// returns the image bytes and the buffers for reuse.
func DecodeJSONImage(body, dst, scratch []byte) (img, scratchOut []byte, err error) {
	field, err := JSONField(body, "image")
	if err != nil {
		return nil, scratch, err
	}
	if field, err = StripDataURL(field); err != nil {
		return nil, scratch, err
	}
	return DecodeBase64(dst, scratch, field, nil)
}

// StripDataURL removes a data URL's "data:<type>;base64," prefix (what a
// browser's FileReader.readAsDataURL produces) from the raw contents of a JSON
// string; other strings are returned as they are.
func StripDataURL(v []byte) ([]byte, error) {
	if len(v) < 5 || !bytes.EqualFold(v[:5], []byte("data:")) {
		return v, nil
	}
	head, rest, ok := bytes.Cut(v, []byte(","))
	if !ok || len(head) > 256 {
		return nil, Malformed("the image is a data: URL without its ',' (want data:<type>;base64,<data>)")
	}
	if !bytes.HasSuffix(bytes.ToLower(head), []byte(";base64")) {
		return nil, Malformed("the image is a data: URL that is not base64-encoded (%q); want data:<type>;base64,<data>", Truncate(string(head), 60))
	}
	return rest, nil
}

// JSONField finds the top-level string field key in the JSON object body and returns its raw
// contents (between the quotes, escapes not undone) without unmarshalling the whole body. It
// checks that the body is one well-formed JSON object.
func JSONField(body []byte, key string) ([]byte, error) {
	p := scanner{b: body}
	return p.field(key)
}

// field is JSONField on the scanner's input.
func (p *scanner) field(key string) ([]byte, error) {
	p.ws()
	if !p.eat('{') {
		return nil, Malformed("want a JSON object such as {\"image\": \"<base64>\"}")
	}
	var found []byte
	have := false
	p.ws()
	if p.eat('}') {
		return nil, Malformed("the JSON object has no %q field", key)
	}
	for {
		p.ws()
		k, esc, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if !p.eat(':') {
			return nil, Malformed("malformed JSON at byte %d: want ':'", p.i)
		}
		p.ws()
		if keyEquals(k, esc, key) {
			if have {
				return nil, Malformed("the JSON object has more than one %q field", key)
			}
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, Malformed("field %q must be a string", key)
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
		return nil, Malformed("malformed JSON at byte %d: want ',' or '}'", p.i)
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, Malformed("malformed JSON: unexpected data after the object at byte %d", p.i)
	}
	if !have {
		return nil, Malformed("the JSON object has no %q field", key)
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

// scanner reads JSON from b, at i. words turns the AVX2 string scan off (tests compare both).
type scanner struct {
	b     []byte
	i     int
	words bool
}

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *scanner) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a JSON string at p.i and returns its raw contents and whether it has escapes.
func (p *scanner) str() ([]byte, bool, error) {
	if !p.eat('"') {
		return nil, false, Malformed("malformed JSON at byte %d: want a string", p.i)
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
			if n == 7 && !p.words {
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
					return nil, false, Malformed("malformed JSON: bad \\u escape at byte %d", i)
				}
				i += 4
			default:
				return nil, false, Malformed("malformed JSON: bad escape at byte %d", i)
			}
		case c < 0x20:
			return nil, false, Malformed("malformed JSON: control character in a string at byte %d", i)
		}
	}
	return nil, false, Malformed("malformed JSON: unterminated string (the body may be truncated)")
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

// maxJSONDepth bounds the nesting of values skipped over.
const maxJSONDepth = 64

func (p *scanner) skipValue(depth int) error {
	if depth > maxJSONDepth {
		return Malformed("malformed JSON: nested deeper than %d", maxJSONDepth)
	}
	if p.i >= len(p.b) {
		return Malformed("malformed JSON: unexpected end (the body may be truncated)")
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
					return Malformed("malformed JSON at byte %d: want ':'", p.i)
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
			return Malformed("malformed JSON at byte %d", p.i)
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
			return Malformed("malformed JSON at byte %d: unexpected %q", start, Truncate(lit, 20))
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
	// digits skips a run of digits at i and returns how many there were.
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	if n := digits(); n == 0 || n > 1 && s[i-n] == '0' {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// object reads a JSON object at p.i, calling fn for each key with p.i at its value; fn must
// consume the value. With top, the object must be the whole input (bar whitespace).
func (p *scanner) object(fn func(key []byte, esc bool) error, top bool) error {
	p.ws()
	if !p.eat('{') {
		return Malformed("malformed JSON at byte %d: want an object", p.i)
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
				return Malformed("malformed JSON at byte %d: want ':'", p.i)
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
			return Malformed("malformed JSON at byte %d: want ',' or '}'", p.i)
		}
	}
	if top {
		p.ws()
		if p.i != len(p.b) {
			return Malformed("malformed JSON: unexpected data after the object at byte %d", p.i)
		}
	}
	return nil
}

// array reads a JSON array at p.i, calling fn with p.i at each element; fn must consume it.
func (p *scanner) array(fn func() error) error {
	p.ws()
	if !p.eat('[') {
		return Malformed("malformed JSON at byte %d: want an array", p.i)
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
		return Malformed("malformed JSON at byte %d: want ',' or ']'", p.i)
	}
}

// stringValue reads a JSON string of at most max bytes (escapes undone) for field what.
func (p *scanner) stringValue(max int, what string) ([]byte, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, Malformed("%s must be a string", what)
	}
	raw, esc, err := p.str()
	if err != nil {
		return nil, err
	}
	if len(raw) > 6*max {
		return nil, Malformed("%s is longer than %d bytes", what, max)
	}
	if esc {
		var s string
		q := append(append([]byte{'"'}, raw...), '"')
		if err := json.Unmarshal(q, &s); err != nil {
			return nil, Malformed("%s: %v", what, err)
		}
		raw = []byte(s)
	}
	if len(raw) > max {
		return nil, Malformed("%s is longer than %d bytes", what, max)
	}
	return raw, nil
}

// literal reads a JSON literal (number, true, false, null) at p.i.
func (p *scanner) literal() []byte {
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

func (p *scanner) boolValue(what string) (bool, error) {
	switch string(p.literal()) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, Malformed("%s must be true or false", what)
}

// intValue reads a JSON integer (a number without fraction or exponent, within int64).
func (p *scanner) intValue(what string) (int64, error) {
	lit := p.literal()
	n, err := strconv.ParseInt(string(lit), 10, 64)
	if err != nil || !isJSONNumber(string(lit)) {
		return 0, Malformed("%s must be an integer, got %q", what, Truncate(string(lit), 20))
	}
	return n, nil
}
