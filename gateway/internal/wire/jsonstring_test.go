package wire

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestAppendJSONStringIsUTF8: what the gateway writes as a JSON string is valid UTF-8 JSON
// that reads back as the string, with bytes that are not UTF-8 as U+FFFD (as encoding/json
// writes them), whatever the string holds (a request's id is echoed).
func TestAppendJSONStringIsUTF8(t *testing.T) {
	for s, want := range map[string]string{
		"plain":           "plain",
		"é ☕ \U0001F600":  "é ☕ \U0001F600",
		"x\xff\xfey":      "x\ufffd\ufffdy",
		"cut \xe2\x98":    "cut \ufffd\ufffd",
		"q\"\\\n\r\t\x01": "q\"\\\n\r\t\x01",
	} {
		b := AppendJSONString(nil, s)
		var got string
		if !utf8.Valid(b) || json.Unmarshal(b, &got) != nil || got != want {
			t.Errorf("%q: wrote %q, reads back %q, want %q", s, b, got, want)
		}
	}
}
