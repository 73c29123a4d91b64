//go:build goexperiment.simd && amd64

package wire

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// plainPrefixRef is plainPrefix byte by byte, without its rounding to 64-byte steps.
func plainPrefixRef(b []byte) int {
	for i, c := range b {
		if c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(b)
}

// TestPlainPrefixFindsEverySpecialByte: the AVX2 scan stops exactly at the first '"', '\\'
// or control character wherever it lies in a 64-byte step, for every such byte and the
// bytes around them (0x1f/0x20, 0x7f/0x80, 0xff: the comparison is unsigned), and never
// reads or skips past the last full step.
func TestPlainPrefixFindsEverySpecialByte(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this CPU: plainPrefix finds nothing and str's word loop scans alone")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	plain := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			for {
				c := byte(rng.UintN(256))
				if c != '"' && c != '\\' && c >= 0x20 {
					b[i] = c
					break
				}
			}
		}
		return b
	}
	check := func(b []byte) {
		t.Helper()
		got, ref := plainPrefix(b), plainPrefixRef(b)
		// plainPrefix stops at the special byte, or at the start of the step in which the
		// buffer ends (the word loop's part).
		want := min(ref, len(b)/64*64)
		if got != want {
			t.Fatalf("%d bytes, first special byte at %d: plainPrefix %d, want %d", len(b), ref, got, want)
		}
	}
	for _, n := range []int{0, 1, 31, 63, 64, 65, 127, 128, 129, 200, 1000} {
		check(plain(n))
	}
	special := []byte{'"', '\\', 0, 1, 0x0a, 0x1f}
	for _, n := range []int{64, 65, 128, 191, 256, 300} {
		for pos := 0; pos < n; pos++ {
			for _, c := range special {
				b := plain(n)
				b[pos] = c
				check(b)
				if pos+5 < n { // a second special byte after the first changes nothing
					b[pos+5] = '"'
					check(b)
				}
			}
		}
	}
	// Bytes next to the special ones are plain.
	for _, c := range []byte{0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0x9f, 0xa0, 0xdc, 0xff} {
		b := bytes.Repeat([]byte{c}, 256)
		check(b)
	}
	for range 2000 {
		b := plain(64 + rng.IntN(400))
		for range rng.IntN(3) {
			b[rng.IntN(len(b))] = special[rng.IntN(len(special))]
		}
		check(b)
	}
}

// TestStrVectorMatchesWords: str returns the same contents, escape flag and error with the
// AVX2 scan as with the word loop alone, on the article's payload, strings with escapes and
// control characters at every offset, and truncated strings.
func TestStrVectorMatchesWords(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	type res struct {
		raw []byte
		esc bool
		err string
		i   int
	}
	run := func(b []byte, words bool) res {
		p := scanner{b: b, words: words}
		raw, esc, err := p.str()
		r := res{raw: raw, esc: esc, i: p.i}
		if err != nil {
			r.err = err.Error()
		}
		return r
	}
	check := func(b []byte) {
		t.Helper()
		v := run(b, false)
		w := run(b, true)
		if !bytes.Equal(v.raw, w.raw) || v.esc != w.esc || v.err != w.err || v.i != w.i {
			t.Fatalf("%.60q (%d bytes): vector %d bytes esc=%v err=%q at %d, words %d bytes esc=%v err=%q at %d",
				b, len(b), len(v.raw), v.esc, v.err, v.i, len(w.raw), w.esc, w.err, w.i)
		}
	}
	body := []byte(`"` + string(bytes.Repeat([]byte("QUJDRGVmZ2g"), 40)) + `"`)
	if seed, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "shared", "seed", "rime_5868.json")); err == nil {
		if k := bytes.IndexByte(seed, ':'); k > 0 {
			body = bytes.TrimSpace(seed[k+1:])
			body = body[:bytes.LastIndexByte(body, '"')+1]
		}
	} else {
		t.Logf("../shared/seed/rime_5868.json not readable (%v): a synthetic base64 string instead", err)
	}
	check(body)
	for _, cut := range []int{1, 2, 63, 64, 65, len(body) / 2, len(body) - 1} {
		check(body[:cut]) // unterminated
	}
	base := []byte(`"` + string(bytes.Repeat([]byte("abcdefgh"), 40)) + `"`)
	for pos := 1; pos < len(base)-1; pos++ {
		for _, ins := range []string{`\"`, `\\`, `\n`, `\u00e9`, `\x`, `\u12`, "\x01", "\x1f", `"`} {
			b := append(append(append([]byte{}, base[:pos]...), ins...), base[pos:]...)
			check(b)
		}
	}
}

// BenchmarkScanArticleString: finding the end of the article's image string, with the AVX2
// scan and with the word loop alone.
func BenchmarkScanArticleString(b *testing.B) {
	body, err := os.ReadFile("../../../../shared/seed/rime_5868.json")
	if err != nil {
		b.Skip("../shared/seed/rime_5868.json not found:", err)
	}
	for _, vec := range []bool{true, false} {
		name := map[bool]string{true: "avx2", false: "words"}[vec]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				p := scanner{b: body, words: !vec}
				if _, err := p.field("image"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScanEscapes: strings of escapes (hostile bodies) cost no more with the AVX2 scan
// than without: it is tried only after 64 plain bytes.
func BenchmarkScanEscapes(b *testing.B) {
	for _, c := range []struct{ name, unit string }{{"all", `\n`}, {"every9", `abcdefgh\n`}, {"every65", strings.Repeat("a", 64) + `\n`}} {
		for _, vec := range []bool{true, false} {
			name := c.name + "/" + map[bool]string{true: "avx2", false: "words"}[vec]
			body := []byte(`{"image": "` + string(bytes.Repeat([]byte(c.unit), 2<<20/len(c.unit))) + `"}`)
			benchScan(b, name, vec, body)
		}
	}
}

func benchScan(b *testing.B, name string, vec bool, body []byte) {
	b.Run(name, func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			p := scanner{b: body[10:], words: !vec}
			if _, _, err := p.str(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
