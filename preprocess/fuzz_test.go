package preprocess

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// fuzzMaxPixels keeps every fuzz input small enough that decoding cannot
// exhaust memory.
const fuzzMaxPixels = 1 << 20

// FuzzProcess: any input either yields a slot or an error wrapping one of
// the sentinels; nothing panics, and no call allocates more Go memory than
// MaxPixels allows for.
func FuzzProcess(f *testing.F) {
	for _, dir := range []string{imagesDir, badDir, "testdata/orient", "testdata/webp"} {
		for _, pat := range []string{"*.jpg", "*.jpeg", "*.png", "*.webp"} {
			files, _ := filepath.Glob(filepath.Join(dir, pat))
			for _, name := range files {
				if b, err := os.ReadFile(name); err == nil && len(b) <= 1<<20 {
					f.Add(b)
				}
			}
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0xFF, 0xD8, 0xFF})
	f.Add([]byte("RIFF\x00\x00\x00\x00WEBPVP8L"))
	f.Add(pngMagic)
	p, err := New(Options{Width: 32, Height: 32, Resize: 40, MaxPixels: fuzzMaxPixels})
	if err != nil {
		f.Fatal(err)
	}
	dst := make([]float32, p.SlotLen())
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := p.Process(data, dst)
		runtime.ReadMemStats(&after)
		if err != nil && !errors.Is(err, ErrBadImage) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnsupportedFormat) {
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		// 16-bit RGBA canvas (8 B/pixel) + our RGB copy + decoder slack.
		const limit = 12*fuzzMaxPixels + 8<<20
		if got := after.TotalAlloc - before.TotalAlloc; got > limit {
			t.Fatalf("allocated %d bytes for a %d-byte input (limit %d)", got, len(data), limit)
		}
	})
}
