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

// fuzzSeeds adds the test images whose names match any of pats, and extra seeds.
func fuzzSeeds(f *testing.F, pats []string, extra ...[]byte) {
	for _, dir := range []string{imagesDir, badDir, "testdata/orient", "testdata/webp"} {
		for _, pat := range pats {
			files, _ := filepath.Glob(filepath.Join(dir, pat))
			for _, name := range files {
				if b, err := os.ReadFile(name); err == nil && len(b) <= 1<<20 {
					f.Add(b)
				}
			}
		}
	}
	for _, b := range extra {
		f.Add(b)
	}
}

// fuzzProcess checks one input: it yields a slot or an error wrapping one of the sentinels;
// nothing panics, and no call allocates more Go memory than MaxPixels allows for.
func fuzzProcess(t *testing.T, p *Preprocessor, dst []float32, data []byte) {
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
}

func fuzzTarget(f *testing.F) func(*testing.T, []byte) {
	p, err := New(Options{Width: 32, Height: 32, Resize: 40, MaxPixels: fuzzMaxPixels})
	if err != nil {
		f.Fatal(err)
	}
	dst := make([]float32, p.SlotLen())
	return func(t *testing.T, data []byte) { fuzzProcess(t, p, dst, data) }
}

// FuzzProcess: any bytes, every format (format detection included).
func FuzzProcess(f *testing.F) {
	fuzzSeeds(f, []string{"*.jpg", "*.jpeg", "*.png", "*.webp"}, []byte{}, []byte{0xFF, 0xD8, 0xFF},
		[]byte("RIFF\x00\x00\x00\x00WEBPVP8L"), pngMagic)
	f.Fuzz(fuzzTarget(f))
}

// FuzzJPEG: the libjpeg-turbo decoder and the EXIF parser, seeded with JPEGs only.
func FuzzJPEG(f *testing.F) {
	fuzzSeeds(f, []string{"*.jpg", "*.jpeg"}, []byte{0xFF, 0xD8, 0xFF})
	f.Fuzz(fuzzTarget(f))
}

// FuzzPNG: the PNG decoder behind its header check, seeded with PNGs only.
func FuzzPNG(f *testing.F) {
	fuzzSeeds(f, []string{"*.png"}, pngMagic)
	f.Fuzz(fuzzTarget(f))
}

// FuzzWebP: the WebP decoder behind its header check, seeded with WebPs only.
func FuzzWebP(f *testing.F) {
	fuzzSeeds(f, []string{"*.webp"}, []byte("RIFF\x00\x00\x00\x00WEBPVP8L"))
	f.Fuzz(fuzzTarget(f))
}
