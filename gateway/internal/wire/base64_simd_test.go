//go:build goexperiment.simd && amd64

package wire

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// decodeBoth decodes src with the vector path on and off.
func decodeBoth(src []byte) (vn int, verr error, vout []byte, pn int, perr error, pout []byte) {
	vout = make([]byte, len(src))
	pout = make([]byte, len(src))
	vn, verr = decodeStdBase64With(vout, src, true)
	pn, perr = decodeStdBase64With(pout, src, false)
	return vn, verr, vout[:vn], pn, perr, pout[:pn]
}

func sameResult(an int, aerr error, aout []byte, bn int, berr error, bout []byte) bool {
	return an == bn && (aerr == nil) == (berr == nil) && (aerr == nil || aerr.Error() == berr.Error()) && bytes.Equal(aout, bout)
}

// checkVecPaths compares the vector path, the table path and encoding/base64 on src.
func checkVecPaths(t *testing.T, src []byte) {
	t.Helper()
	want := make([]byte, len(src))
	wn, werr := base64.StdEncoding.Decode(want, src)
	vn, verr, vout, pn, perr, pout := decodeBoth(src)
	if !sameResult(vn, verr, vout, wn, werr, want[:wn]) {
		t.Fatalf("vector, %d chars %.80q: got %d %v, want %d %v", len(src), src, vn, verr, wn, werr)
	}
	if !sameResult(pn, perr, pout, wn, werr, want[:wn]) {
		t.Fatalf("table, %d chars %.80q: got %d %v, want %d %v", len(src), src, pn, perr, wn, werr)
	}
}

// badPositions are a few positions in the first, a middle and the last 32-byte blocks of
// an n-character string, and around its last group.
func badPositions(n int) []int {
	mid := n / 64 * 32
	var ps []int
	seen := map[int]bool{}
	for _, p := range []int{0, 1, 15, 16, 31, 32, mid, mid + 13, mid + 31, n - 37, n - 33, n - 32, n - 20, n - 5, n - 4, n - 2, n - 1} {
		if p >= 0 && p < n && !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	return ps
}

const stdAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// TestBase64VectorMatchesTable compares the AVX2 path with the table path and with
// encoding/base64 on valid strings of 0..2000 characters and on each with one character
// replaced by every byte value at a few positions.
func TestBase64VectorMatchesTable(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2: the vector path does not run")
	}
	r := rand.New(rand.NewPCG(11, 13))
	for raw := 0; raw <= 1500; raw++ {
		b := make([]byte, raw)
		for k := range b {
			b[k] = byte(r.Uint32())
		}
		src := []byte(base64.StdEncoding.EncodeToString(b))
		checkVecPaths(t, src)
		// The vector kernel alone: whole blocks, all valid, the same bytes.
		if len(src) >= 8 {
			body := src[:len(src)-4]
			dst := make([]byte, len(src)/4*3)
			n, ok := decodeStdBase64Vec(dst, body)
			if !ok || n%32 != 0 || n > len(body) || len(body)-n >= 64 || n > 0 && n/4*3+8 > len(dst) {
				t.Fatalf("%d chars: consumed %d, ok %v", len(src), n, ok)
			}
			if !bytes.Equal(dst[:n/4*3], b[:n/4*3]) {
				t.Fatalf("%d chars: vector kernel output differs", len(src))
			}
		}
		// Bad characters on every length up to 300 characters, then on every 37th.
		if len(src) > 300 && raw%37 != 0 && raw != 1500 {
			continue
		}
		for _, p := range badPositions(len(src)) {
			for c := range 256 {
				bad := bytes.Clone(src)
				bad[p] = byte(c)
				checkVecPaths(t, bad)
				if len(bad) >= 8 {
					dst := make([]byte, len(bad)/4*3)
					n, ok := decodeStdBase64Vec(dst, bad[:len(bad)-4])
					if wantOK := p >= n || strings.IndexByte(stdAlphabet, byte(c)) >= 0; ok != wantOK {
						t.Fatalf("%d chars, %#x at %d: consumed %d, ok %v", len(bad), c, p, n, ok)
					}
				}
			}
		}
	}
}

// TestBase64VectorArticleImage compares the paths on the article's image string.
func TestBase64VectorArticleImage(t *testing.T) {
	body, err := os.ReadFile("../../../../shared/seed/rime_5868.json")
	if err != nil {
		t.Skip("../../shared/seed/rime_5868.json not found:", err)
	}
	src, err := JSONField(body, "image")
	if err != nil {
		t.Fatal(err)
	}
	checkVecPaths(t, src)
	if _, err := decodeStdBase64(make([]byte, len(src)), src); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 5))
	for range 20 {
		bad := bytes.Clone(src)
		bad[r.IntN(len(bad))] = byte(r.Uint32())
		checkVecPaths(t, bad)
	}
}
