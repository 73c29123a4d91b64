package wire

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"testing"
)

// TestDecodeStdBase64 compares with encoding/base64 on valid strings of every length class,
// each with one character replaced by every byte value, padding in the middle, line breaks.
func TestDecodeStdBase64(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	check := func(src []byte) { t.Helper(); decodesAsStdlib(t, src) }
	for n := range 40 {
		raw := make([]byte, n)
		for k := range raw {
			raw[k] = byte(r.Uint32())
		}
		src := []byte(base64.StdEncoding.EncodeToString(raw))
		check(src)
		for pos := range src {
			for c := range 256 {
				bad := bytes.Clone(src)
				bad[pos] = byte(c)
				check(bad)
			}
		}
	}
	check([]byte("QUJDREVG\nQUJD"))
	check([]byte("QU==QUJDQUJD"))
	check([]byte("QUJDQUJDQR=="))
	check([]byte("QUJDQUJDQS=="))
}

// FuzzDecodeStdBase64: the same comparison on arbitrary input.
func FuzzDecodeStdBase64(f *testing.F) {
	f.Add([]byte("QUJDREVGR0hJ"))
	f.Add([]byte("QUJDREVGR0g="))
	f.Add([]byte("QUJD\r\nREVG"))
	// Long enough for whole 32-character blocks (the vector path under GOEXPERIMENT=simd).
	f.Add([]byte(base64.StdEncoding.EncodeToString([]byte("The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog."))))
	f.Fuzz(decodesAsStdlib)
}

// decodesAsStdlib checks that decodeStdBase64 gives encoding/base64's bytes and error on src.
func decodesAsStdlib(t *testing.T, src []byte) {
	t.Helper()
	want := make([]byte, len(src))
	got := make([]byte, len(src))
	wn, werr := base64.StdEncoding.Decode(want, src)
	gn, gerr := decodeStdBase64(got, src)
	if wn != gn || (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() || !bytes.Equal(want[:wn], got[:gn]) {
		t.Fatalf("%q: got %d %v, want %d %v", src, gn, gerr, wn, werr)
	}
}

func benchBase64(b *testing.B, decode func(dst, src []byte) (int, error)) {
	body, err := os.ReadFile("../../../../shared/seed/rime_5868.json")
	if err != nil {
		b.Skip("../shared/seed/rime_5868.json not found:", err)
	}
	src, err := JSONField(body, "image")
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := decode(dst, src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeStdBase64(b *testing.B) { benchBase64(b, decodeStdBase64) }
func BenchmarkEncodingBase64(b *testing.B)  { benchBase64(b, base64.StdEncoding.Decode) }
