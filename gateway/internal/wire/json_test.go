package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

func TestExtractJSONField(t *testing.T) {
	for _, tc := range []struct {
		body, want, err string
	}{
		{`{"image":"QUJD"}`, "QUJD", ""},
		{` { "other": [1, {"x": null}, "s\"q"], "n": -1.5e3, "image" : "QUJD" , "t": true } `, "QUJD", ""},
		{`{"image":"QU\/JD"}`, `QU\/JD`, ""},
		{`{}`, "", `no "image" field`},
		{`{"img":"x"}`, "", `no "image" field`},
		{`{"image":1}`, "", "must be a string"},
		{`{"image":"a","image":"b"}`, "", "more than one"},
		{`{"image":"abc`, "", "unterminated string"},
		{`{"image":"abc"`, "", "want ',' or '}'"},
		{`{"image":"abc"} x`, "", "unexpected data after"},
		{`["image"]`, "", "want a JSON object"},
		{``, "", "want a JSON object"},
		{`{"a":[1,2,}`, "", "malformed"},
		{`{"a":nul,"image":"x"}`, "", "unexpected"},
		{`{"a":01x,"image":"x"}`, "", "unexpected"},
		{"{\"image\":\"a\x01b\"}", "", "control character"},
		{`{"\u0069mage":"QUJD"}`, "QUJD", ""},
		{`{"im\u0061ge":"x","image":"y"}`, "", "more than one"},
		{`{"imag\u0065x":"x"}`, "", `no "image" field`},
		{`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"image":"x"}`, "", "nested deeper"},
	} {
		got, err := JSONField([]byte(tc.body), "image")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrMalformed) {
				t.Errorf("%q: err = %v, want %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.body, got, err, tc.want)
		}
	}
}

func TestDecodeBase64Variants(t *testing.T) {
	raw := []byte("\x00\xff\xfe binary \xfb\xef data!?")
	std := base64.StdEncoding.EncodeToString(raw)
	for name, src := range map[string]string{
		"std":          std,
		"std-nopad":    strings.TrimRight(std, "="),
		"url":          base64.URLEncoding.EncodeToString(raw),
		"url-nopad":    base64.RawURLEncoding.EncodeToString(raw),
		"lines":        std[:8] + "\n" + std[8:16] + "\r\n" + std[16:],
		"json-escapes": strings.ReplaceAll(std[:8]+`\n`+std[8:], "/", `\/`),
		"spaces":       std[:4] + " " + std[4:],
		"u-escapes":    `\u0020` + strings.ReplaceAll(std, "A", `\u0041`) + `\u000a`,
	} {
		got, _, err := DecodeBase64(nil, nil, []byte(src), nil)
		if err != nil || !bytes.Equal(got, raw) {
			t.Errorf("%s: %q -> %q, %v", name, src, got, err)
		}
	}
	for name, src := range map[string]string{
		"bad char":   "QUJD*A==",
		"mixed":      "ab+/cd-_",
		"after pad":  "QQ==QQ==",
		"bad pad":    "QUJD=",
		"truncated":  "QUJDR",
		"empty":      "",
		"bad escape": `QUJD\x41`,
		"non-ascii":  `QUJD\u00e9`,
		"quote":      `QUJD\"`,
	} {
		_, _, err := DecodeBase64(nil, nil, []byte(src), nil)
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %q: err = %v, want a body error", name, src, err)
		}
	}
}

func TestDecodeJSONImageDataURL(t *testing.T) {
	for body, want := range map[string]string{
		`{"image":"data:image/jpeg;base64,QUJD"}`:           "ABC",
		`{"image":"DATA:image/png;name=x.png;BASE64,QUJD"}`: "ABC",
		`{"image":"QUJD"}`: "ABC",
	} {
		got, _, err := DecodeJSONImage([]byte(body), nil, nil)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v", body, got, err)
		}
	}
	for body, msg := range map[string]string{
		`{"image":"data:image/png,%89PNG"}`: "not base64-encoded",
		`{"image":"data:image/png;base64"}`: "without its ','",
	} {
		_, _, err := DecodeJSONImage([]byte(body), nil, nil)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: err = %v, want %q", body, err, msg)
		}
	}
}

func TestDecodeArticlePayload(t *testing.T) {
	body, err := os.ReadFile("../../../../shared/seed/rime_5868.json")
	if err != nil {
		t.Skip("../shared/seed/rime_5868.json not found (run from a checkout with ../shared beside it):", err)
	}
	var want struct{ Image string }
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(want.Image)
	field, err := JSONField(body, "image")
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := DecodeBase64(nil, nil, field, nil)
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("decoded %d bytes (%v), want %d", len(got), err, len(raw))
	}
	// Steady state: decoding into reused buffers allocates nothing.
	dst, scratch := make([]byte, 0, len(raw)+8), []byte(nil)
	allocs := testing.AllocsPerRun(20, func() {
		f, _ := JSONField(body, "image")
		dst, scratch, _ = DecodeBase64(dst, scratch, f, nil)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per body, want 0", allocs)
	}
}

func BenchmarkParseArticleBody(b *testing.B) {
	body, err := os.ReadFile("../../../../shared/seed/rime_5868.json")
	if err != nil {
		b.Skip("../shared/seed/rime_5868.json not found:", err)
	}
	var dst, scratch []byte
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := JSONField(body, "image")
		if err != nil {
			b.Fatal(err)
		}
		dst, scratch, err = DecodeBase64(dst, scratch, f, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzBody checks that the body parser never panics and agrees with encoding/json: a body
// it accepts is a JSON object whose "image" string (escapes undone, a data: URL prefix
// removed) holds exactly the bytes it decoded; a plain well-formed body that encoding/json
// reads with one "image" field of canonical base64 is accepted.
func FuzzBody(f *testing.F) {
	f.Add([]byte(`{"image":"QUJD"}`))
	f.Add([]byte(`{"a":[1,{"b":null}],"image":"QU\/JD\n"}`))
	f.Add([]byte(`{"\u0069mage":"\u0051UJD"}`))
	f.Add([]byte(`{"image":"data:image/jpeg;base64,QUJD"}`))
	f.Add([]byte(`{"image":"QUJD`))
	if body, err := os.ReadFile("../../../../shared/seed/rime_5868.json"); err == nil {
		f.Add(body[:2000])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		img, _, err := DecodeJSONImage(body, nil, nil)
		var ref map[string]json.RawMessage
		refErr := json.Unmarshal(body, &ref)
		var s string
		strErr := json.Unmarshal(ref["image"], &s)
		if err == nil {
			if refErr != nil {
				t.Fatalf("accepted %q which encoding/json rejects: %v", body, refErr)
			}
			if strErr != nil {
				t.Fatalf("accepted a non-string image field in %q", body)
			}
			if field, _ := StripDataURL([]byte(s)); !bytes.Equal(img, lenientBase64(t, string(field))) {
				t.Fatalf("%q: decoded %q, encoding/json's string decodes to something else", body, img)
			}
			return
		}
		if refErr == nil && strErr == nil && len(s) > 0 && countKey(body, "image") == 1 && !bytes.ContainsAny(body, "\\\x7f") {
			if raw, e := base64.StdEncoding.DecodeString(s); e == nil && len(raw) > 0 {
				t.Fatalf("%q: refused (%v) a canonical body", body, err)
			}
		}
	})
}

// lenientBase64 decodes s as the gateway's rules allow (spaces, URL-safe alphabet, padding
// optional), failing the test if it is not base64 at all.
func lenientBase64(t *testing.T, s string) []byte {
	t.Helper()
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\n', '\r', '\t', '=':
			return -1
		case '-':
			return '+'
		case '_':
			return '/'
		}
		return r
	}, s)
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("the gateway decoded a string that is not base64: %q: %v", s, err)
	}
	return b
}

// countKey counts the top-level keys of a JSON object equal to key (escapes undone).
func countKey(body []byte, key string) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0
		}
		if tok == key {
			n++
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return 0
		}
	}
	return n
}

// TestPlain8 checks the word trick against the byte-by-byte rule: every byte value at every
// position among plain neighbours, and random words.
func TestPlain8(t *testing.T) {
	isPlain := func(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' }
	ref := func(w [8]byte) bool {
		for _, c := range w {
			if !isPlain(c) {
				return false
			}
		}
		return true
	}
	check := func(w [8]byte) {
		if got, want := plain8(binary.LittleEndian.Uint64(w[:])), ref(w); got != want {
			t.Fatalf("plain8(% x) = %v, want %v", w, got, want)
		}
	}
	for _, fill := range []byte{0x20, 'A', 0x7f, 0x80, 0x9f, 0xa0, 0xff, '"' + 1, '\\' - 1} {
		for pos := range 8 {
			for c := range 256 {
				var w [8]byte
				for k := range w {
					w[k] = fill
				}
				w[pos] = byte(c)
				check(w)
				w[(pos+3)%8] = byte(255 - c)
				check(w)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
		for k := range w { // mostly plain words, where a miss would hide
			if !isPlain(w[k]) && r.IntN(4) != 0 {
				w[k] |= 0x40
			}
		}
		check(w)
	}
}
