package preprocess

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withOrientation returns a JPEG with an APP1 Exif segment carrying EXIF
// orientation o inserted right after SOI (the first APP1 is the one read).
func withOrientation(jpg []byte, o int) []byte {
	tiff := []byte("MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00")
	tiff[19] = byte(o)
	seg := append([]byte("Exif\x00\x00"), tiff...)
	out := []byte{0xFF, 0xD8, 0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	out = append(out, seg...)
	return append(out, jpg[2:]...)
}

// windowJPEGs are the JPEGs the window decode is checked on: every shared
// photo, the testdata orientations and progressive files.
func windowJPEGs(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, pat := range []string{filepath.Join(imagesDir, "*.jp*g"), "testdata/orient/*.jpg", "testdata/progressive/*.jpg"} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				tb.Fatal(err)
			}
			out[f] = b
		}
	}
	if len(out) < 12 {
		tb.Skipf("only %d JPEGs (../shared absent?)", len(out))
	}
	return out
}

// windowOptions span DCT scales (oversample), geometries and crops.
func windowOptions() []struct {
	o          Options
	oversample float64
} {
	return []struct {
		o          Options
		oversample float64
	}{
		{Options{}, 1},
		{Options{}, 2},
		{Options{FullDecode: true}, 0},
		{Options{Width: 64, Height: 48, Resize: 70}, 1},
		{Options{Width: 100, Height: 30, Resize: 120}, 1.5},
		{Options{Width: 30, Height: 120, Resize: 140}, 3},
		{Options{Width: 200, Height: 150, Mode: ModeStretch}, 1},
		{Options{Width: 224, Height: 224, Resize: 600}, 1}, // upscaled small images
	}
}

// TestJPEGWindowMatchesWholeDecode: decoding only the window the crop reads
// (libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines, mapped through
// the EXIF orientation) gives exactly the slot the whole decode gives, for
// every JPEG in every orientation at several scales and geometries.
func TestJPEGWindowMatchesWholeDecode(t *testing.T) {
	files := windowJPEGs(t)
	orientations := []int{1, 2, 3, 4, 5, 6, 7, 8}
	n, k := 0, 0
	for name, jpg := range files {
		for _, o := range orientations {
			data := jpg
			if o > 1 || jpegOrientation(jpg) != 1 {
				data = withOrientation(jpg, o)
			}
			if got := jpegOrientation(data); got != o {
				t.Fatalf("%s: orientation %d, want %d", name, got, o)
			}
			for _, c := range windowOptions() {
				if k++; raceSkips(k - 1) { // cgo and one goroutine: the detector only slows it down
					continue
				}
				c.o.Layout = NHWC
				win, whole := mustNew(t, c.o), mustNew(t, c.o)
				if c.oversample > 0 {
					win.oversample, whole.oversample = c.oversample, c.oversample
				}
				whole.noWindow = true
				a, b := make([]byte, win.SlotLen()), make([]byte, win.SlotLen())
				if err := win.ProcessUint8(data, a); err != nil {
					t.Fatalf("%s orientation %d %+v: %v", name, o, c, err)
				}
				if err := whole.ProcessUint8(data, b); err != nil {
					t.Fatalf("%s orientation %d %+v (whole): %v", name, o, c, err)
				}
				if !bytes.Equal(a, b) {
					m, x := diff(a, b)
					t.Errorf("%s orientation %d %+v x%.1f: window decode differs from the whole decode: mean %.5f max %.4f",
						filepath.Base(name), o, c.o, c.oversample, m, x)
				}
				n++
			}
		}
	}
	t.Logf("%d decodes compared", n)
}

// TestOrientMapping: orientToStored and storedToOrient agree with orient on
// every pixel, and storedRect/displayedRect with them on random rectangles.
func TestOrientMapping(t *testing.T) {
	const w, h = 7, 5
	pix := make([]byte, 3*w*h) // each pixel holds its stored coordinates
	for y := range h {
		for x := range w {
			pix[3*(y*w+x)], pix[3*(y*w+x)+1] = byte(x), byte(y)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for o := 1; o <= 8; o++ {
		src := source{pix: pix, stride: 3 * w, bpp: 3, ch: 3, w: w, h: h, x1: w, y1: h}
		dst := make([]byte, len(pix))
		out := orient(&src, o, dst)
		for y := range out.h {
			for x := range out.w {
				q := out.pix[y*out.stride+3*x:]
				sx, sy := orientToStored(o, w, h, x, y)
				if int(q[0]) != sx || int(q[1]) != sy {
					t.Fatalf("orientation %d: (%d, %d) shows stored (%d, %d), orientToStored says (%d, %d)", o, x, y, q[0], q[1], sx, sy)
				}
				if bx, by := storedToOrient(o, w, h, sx, sy); bx != x || by != y {
					t.Fatalf("orientation %d: storedToOrient(%d, %d) = (%d, %d), want (%d, %d)", o, sx, sy, bx, by, x, y)
				}
			}
		}
		for range 50 {
			x0, y0 := r.IntN(out.w), r.IntN(out.h)
			x1, y1 := x0+1+r.IntN(out.w-x0), y0+1+r.IntN(out.h-y0)
			sx0, sy0, sx1, sy1 := storedRect(o, w, h, x0, y0, x1, y1)
			if (sx1-sx0)*(sy1-sy0) != (x1-x0)*(y1-y0) {
				t.Fatalf("orientation %d: %v maps to a rectangle of another area", o, [4]int{x0, y0, x1, y1})
			}
			if a, b, c, d := displayedRect(o, w, h, sx0, sy0, sx1, sy1); [4]int{a, b, c, d} != [4]int{x0, y0, x1, y1} {
				t.Fatalf("orientation %d: displayedRect(storedRect(%v)) = %v", o, [4]int{x0, y0, x1, y1}, [4]int{a, b, c, d})
			}
		}
	}
}

// TestJPEGWindowIsSmaller: for the article's photo the window is what the
// crop reads plus the margins, not the whole scaled image.
func TestJPEGWindowIsSmaller(t *testing.T) {
	data := seedJPEG(t)
	p := mustNew(t, Options{})
	d := new(jpegDecoder)
	if err := d.open(data); err != nil {
		t.Fatal(err)
	}
	defer d.close()
	pl, err := p.jpegHeader(d, data)
	if err != nil {
		t.Fatal(err)
	}
	w := p.jpegWindow(&pl)
	t.Logf("%dx%d at %d/8 = %dx%d; window columns %d+%d rows [%d, %d): %.0f %% of the pixels",
		pl.w, pl.h, pl.num, pl.sw, pl.sh, w.x0, w.cw, w.y0, w.y1, 100*float64(w.cw*(w.y1-w.y0))/float64(pl.sw*pl.sh))
	if w.cw >= pl.sw || w.y1-w.y0 >= pl.sh {
		t.Errorf("window %+v is not smaller than the %dx%d image", w, pl.sw, pl.sh)
	}
}

// TestJPEGRowsBelowWindowNotDecoded: the entropy-coded data of the rows below
// the window is not decoded, and a file cut short is still refused. The
// article's photo, cut at points through its scan:
//   - as cut, it is refused as truncated, wherever the cut falls (its data no
//     longer reaches an end-of-image marker);
//   - with an end-of-image marker put back, it decodes to exactly the intact
//     file's slot when the cut falls below the window, and is refused as
//     truncated when the cut falls inside it (the decoder meets the marker
//     before the window's last row); the whole decode refuses it.
func TestJPEGRowsBelowWindowNotDecoded(t *testing.T) {
	data := seedJPEG(t)
	if !bytes.HasSuffix(data, []byte{0xFF, 0xD9}) {
		t.Fatal("the article's photo does not end with an end-of-image marker")
	}
	sos := bytes.Index(data, []byte{0xFF, 0xDA})
	if sos < 0 {
		t.Fatal("no start-of-scan marker")
	}
	scan := sos + 2 + (int(data[sos+2])<<8 | int(data[sos+3])) // the entropy-coded data starts here
	end := len(data) - 2
	p, whole := mustNew(t, Options{Layout: NHWC}), mustNew(t, Options{Layout: NHWC})
	whole.noWindow = true
	want := make([]byte, p.SlotLen())
	if err := p.ProcessUint8(data, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, p.SlotLen())
	sealedOK, sealedRefused := 0, 0
	for _, f := range []float64{0.9995, 0.998, 0.99, 0.98, 0.97, 0.96, 0.9, 0.7, 0.5, 0.2, 0.01} {
		k := scan + int(f*float64(end-scan))
		for _, cut := range [][]byte{data[:k], data[:len(data)-1], data[:len(data)-2]} {
			err := p.ProcessUint8(cut, got)
			if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "truncated") {
				t.Fatalf("cut at %d of %d bytes: %v, want a refusal as truncated", len(cut), len(data), err)
			}
		}
		sealed := append(bytes.Clone(data[:k]), 0xFF, 0xD9)
		err := p.ProcessUint8(sealed, got)
		switch {
		case err == nil:
			if !bytes.Equal(got, want) {
				m, x := diff(got, want)
				t.Fatalf("cut at %.2f %% of the scan, marker put back: decodes, but not to the intact file's slot (mean %.5f max %.4f)", 100*f, m, x)
			}
			sealedOK++
			if sealedRefused > 0 {
				t.Errorf("cut at %.2f %% of the scan, marker put back: decodes, but a cut further in was refused", 100*f)
			}
			if err := whole.ProcessUint8(sealed, got); !errors.Is(err, ErrBadImage) {
				t.Errorf("cut at %.2f %% of the scan, marker put back: the whole decode gives %v, want a refusal", 100*f, err)
			}
		case errors.Is(err, ErrBadImage) && strings.Contains(err.Error(), "truncated"):
			sealedRefused++
		default:
			t.Fatalf("cut at %.2f %% of the scan, marker put back: %v", 100*f, err)
		}
	}
	t.Logf("marker put back: %d cuts below the window decoded, %d inside it refused", sealedOK, sealedRefused)
	if sealedOK == 0 || sealedRefused == 0 {
		t.Errorf("want cuts both below the window (decoded) and inside it (refused): %d and %d", sealedOK, sealedRefused)
	}
}
