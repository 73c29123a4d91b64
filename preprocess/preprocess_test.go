package preprocess

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestNewDefaultsAndValidation(t *testing.T) {
	p := mustNew(t, Options{})
	o := p.Options()
	if o.Width != 224 || o.Height != 224 || o.Resize != 256 || o.Mode != ModeShorterSide ||
		o.Scale != ScaleNormalized || o.Layout != NCHW || o.MaxPixels != DefaultMaxPixels ||
		o.Mean != ImageNetMean || o.Std != ImageNetStd {
		t.Fatalf("defaults: %+v", o)
	}
	if p.SlotLen() != 3*224*224 {
		t.Fatalf("SlotLen %d", p.SlotLen())
	}
	bad := []struct {
		o     Options
		field string
	}{
		{Options{Width: -1, Height: 224}, "width"},
		{Options{Width: 224, Height: 100000}, "height"},
		{Options{Resize: 100}, "resize"},
		{Options{Mode: "crop"}, "mode"},
		{Options{Scale: "unit"}, "scale"},
		{Options{Layout: "CHW"}, "layout"},
		{Options{MaxPixels: -5}, "max_pixels"},
		{Options{Std: [3]float32{1, 0, 1}}, "std[1]"},
		{Options{Mean: [3]float32{float32(math.NaN()), 0, 0}, Std: [3]float32{1, 1, 1}}, "mean[0]"},
	}
	for _, c := range bad {
		_, err := New(c.o)
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.HasPrefix(err.Error(), "preprocess: ") {
			t.Errorf("New(%+v) = %v, want an error naming %q", c.o, err, c.field)
		}
	}
	// Mean 0 / Std 1 and raw output are valid.
	mustNew(t, Options{Mean: [3]float32{}, Std: [3]float32{1, 1, 1}})
	mustNew(t, Options{Scale: ScaleRaw, Mode: ModeStretch, Width: 256, Height: 256})
}

func TestErrorClasses(t *testing.T) {
	p := mustNew(t, Options{})
	dst := make([]float32, p.SlotLen())
	cases := []struct {
		file    string
		want    error
		message string
	}{
		{"empty.jpg", ErrBadImage, "empty body"},
		{"not_an_image.jpg", ErrUnsupportedFormat, "not JPEG, PNG, WebP, GIF, BMP or TIFF"},
		{"truncated_landscape.jpg", ErrBadImage, "truncated"},
		{"bomb_50000x50000.png", ErrTooLarge, "max_pixels=89478485"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data := readShared(t, filepath.Join(badDir, c.file))
			err := p.Process(data, dst)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.message) {
				t.Fatalf("Process(%s) = %v, want %v containing %q", c.file, err, c.want, c.message)
			}
			for _, other := range []error{ErrBadImage, ErrTooLarge, ErrUnsupportedFormat} {
				if other != c.want && errors.Is(err, other) {
					t.Fatalf("%v also wraps %v", err, other)
				}
			}
			t.Logf("%s: %v", c.file, err)
		})
	}
}

func TestErrorClassesInMemory(t *testing.T) {
	p := mustNew(t, Options{})
	small := mustNew(t, Options{MaxPixels: 1000})
	dst := make([]float32, p.SlotLen())
	pngData := encodePNG(t, gradient(40, 30))
	webpData, err := os.ReadFile("testdata/webp/chelsea_lossless.webp")
	if err != nil {
		t.Fatal(err)
	}
	jpegData, err := os.ReadFile("testdata/orient/orient_1.jpg")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		p    *Preprocessor
		data []byte
		want error
	}{
		{"nil", p, nil, ErrBadImage},
		{"gif header cut", p, []byte("GIF89a\x01\x00\x01\x00"), ErrBadImage},
		{"psd", p, []byte("8BPS\x00\x01\x00\x00\x00\x00\x00\x00"), ErrUnsupportedFormat},
		{"BM and text", p, []byte("BMW is a car maker, not a bitmap"), ErrUnsupportedFormat},
		{"jpeg magic only", p, []byte{0xFF, 0xD8, 0xFF}, ErrBadImage},
		{"jpeg header cut", p, jpegData[:200], ErrBadImage},
		{"jpeg scan cut", p, jpegData[:len(jpegData)/2], ErrBadImage},
		{"jpeg over max_pixels", small, jpegData, ErrTooLarge},
		{"png truncated", p, pngData[:len(pngData)-20], ErrBadImage},
		{"png header only", p, pngData[:20], ErrBadImage},
		{"png over max_pixels", small, pngData, ErrTooLarge},
		{"webp truncated", p, webpData[:len(webpData)/2], ErrBadImage},
		{"webp header only", p, webpData[:16], ErrBadImage},
		{"webp over max_pixels", small, webpData, ErrTooLarge},
	}
	for _, c := range cases {
		err := c.p.Process(c.data, dst)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		} else if c.want == ErrTooLarge && !strings.Contains(err.Error(), "max_pixels=1000") {
			t.Errorf("%s: %v does not name the limit", c.name, err)
		}
	}
	if err := p.Process(jpegData, dst[:10]); err == nil {
		t.Error("short dst accepted")
	}
}

// TestOrientationLandscape: the same scene stored upright (orientation 1)
// and rotated (orientation 6) gives nearly the same slot.
func TestOrientationLandscape(t *testing.T) {
	a := readShared(t, filepath.Join(imagesDir, "exif_landscape_orient1.jpg"))
	b := readShared(t, filepath.Join(imagesDir, "exif_landscape_orient6.jpg"))
	if o := jpegOrientation(b); o != 6 {
		t.Fatalf("orientation of exif_landscape_orient6.jpg = %d", o)
	}
	p := mustNew(t, Options{Layout: NHWC})
	sa, sb := make([]byte, p.SlotLen()), make([]byte, p.SlotLen())
	if err := p.ProcessUint8(a, sa); err != nil {
		t.Fatal(err)
	}
	if err := p.ProcessUint8(b, sb); err != nil {
		t.Fatal(err)
	}
	mean, mx := diff(sa, sb)
	// The two files are separate encodings and carry a different digit
	// drawn in the middle; torchvision's own slots differ as much.
	g := map[string][]byte{}
	for _, e := range loadGoldens(t).Images {
		if e.Resize == 256 && (e.Name == "exif_landscape_orient1.jpg" || e.Name == "exif_landscape_orient6.jpg") {
			g[e.Name] = e.pixels(t)
		}
	}
	tvMean, tvMax := diff(g["exif_landscape_orient1.jpg"], g["exif_landscape_orient6.jpg"])
	t.Logf("orient1 vs orient6: ours mean|Δ| %.5f max|Δ| %.4f; torchvision mean|Δ| %.5f max|Δ| %.4f", mean, mx, tvMean, tvMax)
	if mean > tvMean+0.005 {
		t.Errorf("orient1 vs orient6 slots differ: mean |Δ| %.5f (torchvision: %.5f)", mean, tvMean)
	}
}

func TestExifParser(t *testing.T) {
	for o := 1; o <= 8; o++ {
		data, err := os.ReadFile(filepath.Join("testdata/orient", "orient_"+string(rune('0'+o))+".jpg"))
		if err != nil {
			t.Fatal(err)
		}
		if got := jpegOrientation(data); got != o {
			t.Errorf("orient_%d.jpg: orientation %d", o, got)
		}
	}
	// Big-endian TIFF, LONG type, invalid values, truncation.
	mm := []byte("MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x08\x00\x00")
	ii := []byte("II\x2a\x00\x08\x00\x00\x00\x01\x00\x12\x01\x04\x00\x01\x00\x00\x00\x03\x00\x00\x00")
	if got := exifOrientation(mm); got != 8 {
		t.Errorf("MM: %d", got)
	}
	if got := exifOrientation(ii); got != 3 {
		t.Errorf("II LONG: %d", got)
	}
	bad := bytes.Clone(mm)
	bad[len(bad)-3] = 9
	if got := exifOrientation(bad); got != 1 {
		t.Errorf("value 9: %d", got)
	}
	for i := range len(mm) {
		exifOrientation(mm[:i]) // must not panic
	}
	seg := append([]byte{0xFF, 0xD8, 0xFF, 0xE1, 0, byte(2 + 6 + len(mm))}, append([]byte("Exif\x00\x00"), mm...)...)
	if got := jpegOrientation(seg); got != 8 {
		t.Errorf("jpegOrientation: %d", got)
	}
	for i := range len(seg) {
		jpegOrientation(seg[:i])
	}
}

// TestLayoutsAndScales: NCHW/NHWC, float/uint8, normalized/raw agree.
func TestLayoutsAndScales(t *testing.T) {
	data := readShared(t, filepath.Join(imagesDir, "skimage_rocket.jpg"))
	gray := readShared(t, filepath.Join(imagesDir, "skimage_camera_gray.png"))
	for _, img := range [][]byte{data, gray} {
		ref := mustNew(t, Options{Layout: NHWC})
		want := make([]byte, ref.SlotLen())
		if err := ref.ProcessUint8(img, want); err != nil {
			t.Fatal(err)
		}
		const n = 224 * 224
		at := func(layout Layout, i, c int) int { // index of pixel i channel c
			if layout == NHWC {
				return 3*i + c
			}
			return c*n + i
		}
		for _, layout := range []Layout{NCHW, NHWC} {
			u := make([]byte, 3*n)
			mustProcessU8(t, mustNew(t, Options{Layout: layout}), img, u)
			raw := make([]float32, 3*n)
			mustProcess(t, mustNew(t, Options{Layout: layout, Scale: ScaleRaw}), img, raw)
			nrm := make([]float32, 3*n)
			mustProcess(t, mustNew(t, Options{Layout: layout}), img, nrm)
			for i := range n {
				for c := range 3 {
					v := want[3*i+c]
					j := at(layout, i, c)
					if u[j] != v || raw[j] != float32(v) {
						t.Fatalf("%s pixel %d ch %d: uint8 %d raw %v want %d", layout, i, c, u[j], raw[j], v)
					}
					x := (float32(v)/255 - ImageNetMean[c]) / ImageNetStd[c]
					if nrm[j] != x {
						t.Fatalf("%s pixel %d ch %d: normalized %v want %v", layout, i, c, nrm[j], x)
					}
				}
			}
		}
	}
}

// TestNonSquareAndStretch exercises other geometries against a direct
// (uncropped, unscaled) computation.
func TestNonSquare(t *testing.T) {
	data := readShared(t, filepath.Join(imagesDir, "skimage_coffee.png"))
	p := mustNew(t, Options{Width: 160, Height: 96, Resize: 200, Layout: NHWC})
	got := make([]byte, p.SlotLen())
	mustProcessU8(t, p, data, got)
	// Same as resizing to 300x200 completely, then cropping 160x96 at (70, 52).
	full := mustNew(t, Options{Width: 300, Height: 200, Mode: ModeStretch, Layout: NHWC})
	all := make([]byte, full.SlotLen())
	mustProcessU8(t, full, data, all)
	for y := range 96 {
		for x := range 160 {
			for c := range 3 {
				if got[(y*160+x)*3+c] != all[((y+52)*300+x+70)*3+c] {
					t.Fatalf("pixel %d,%d differs from crop of full resize", x, y)
				}
			}
		}
	}
}

// TestPNGVariants: palette, alpha, 16-bit and gray PNGs give the same slot
// as the plain 8-bit RGB(gray) encoding of the same pixels; alpha is
// dropped, not composited (Pillow convert('RGB')).
func TestPNGVariants(t *testing.T) {
	base := gradient(301, 199)
	p := mustNew(t, Options{Layout: NHWC})
	ref := make([]byte, p.SlotLen())
	mustProcessU8(t, p, encodePNG(t, base), ref)

	b := base.Bounds()
	nrgba := image.NewNRGBA(b)
	rgba64 := image.NewNRGBA64(b)
	pal := image.NewPaletted(b, nil)
	index := map[color.RGBA]uint8{}
	for y := range b.Dy() {
		for x := range b.Dx() {
			c := base.RGBAAt(x, y)
			a := uint8((x * 7) ^ y) // arbitrary alpha, must be ignored
			nrgba.SetNRGBA(x, y, color.NRGBA{c.R, c.G, c.B, a})
			rgba64.SetNRGBA64(x, y, color.NRGBA64{uint16(c.R) * 257, uint16(c.G) * 257, uint16(c.B) * 257, uint16(a) * 257})
			i, ok := index[c]
			if !ok {
				i = uint8(len(pal.Palette))
				index[c] = i
				pal.Palette = append(pal.Palette, color.NRGBA{c.R, c.G, c.B, uint8(len(pal.Palette))})
			}
			pal.SetColorIndex(x, y, i)
		}
	}
	if len(pal.Palette) > 256 {
		t.Fatalf("palette %d", len(pal.Palette))
	}
	for name, img := range map[string]image.Image{"nrgba": nrgba, "nrgba64": rgba64, "paletted+trns": pal} {
		got := make([]byte, p.SlotLen())
		mustProcessU8(t, p, encodePNG(t, img), got)
		if !bytes.Equal(got, ref) {
			m, x := diff(got, ref)
			t.Errorf("%s PNG differs from RGB PNG: mean %.5f max %.4f", name, m, x)
		}
	}
	// Gray 8 vs gray 16 vs gray as RGB.
	g8 := image.NewGray(b)
	g16 := image.NewGray16(b)
	rgb := image.NewRGBA(b)
	for y := range b.Dy() {
		for x := range b.Dx() {
			v := base.RGBAAt(x, y).G
			g8.SetGray(x, y, color.Gray{v})
			g16.SetGray16(x, y, color.Gray16{uint16(v)<<8 | 0x7f})
			rgb.SetRGBA(x, y, color.RGBA{v, v, v, 255})
		}
	}
	mustProcessU8(t, p, encodePNG(t, rgb), ref)
	for name, img := range map[string]image.Image{"gray8": g8, "gray16": g16} {
		got := make([]byte, p.SlotLen())
		mustProcessU8(t, p, encodePNG(t, img), got)
		if !bytes.Equal(got, ref) {
			t.Errorf("%s PNG differs from gray-as-RGB PNG", name)
		}
	}
}

// TestConcurrent: many goroutines share one Preprocessor.
func TestConcurrent(t *testing.T) {
	var inputs [][]byte
	for _, n := range []string{"skimage_rocket.jpg", "exif_landscape_orient6.jpg", "go_video-001_cmyk.jpeg", "skimage_chelsea_cat.png", "go_video-005_gray.jpeg"} {
		inputs = append(inputs, readShared(t, filepath.Join(imagesDir, n)))
	}
	p := mustNew(t, Options{})
	want := make([][]float32, len(inputs))
	for i, in := range inputs {
		want[i] = make([]float32, p.SlotLen())
		mustProcess(t, p, in, want[i])
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			dst := make([]float32, p.SlotLen())
			for k := range 12 {
				i := (g + k) % len(inputs)
				if err := p.Process(inputs[i], dst); err != nil {
					t.Error(err)
					return
				}
				for j := range dst {
					if dst[j] != want[i][j] {
						t.Errorf("goroutine %d input %d: value %d differs", g, i, j)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestSteadyStateAllocs: the JPEG path allocates nothing per request once
// pools are warm (pixel memory is pooled, not proportional to image size).
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	data := seedJPEG(t)
	p := mustNew(t, Options{})
	dst := make([]float32, p.SlotLen())
	mustProcess(t, p, data, dst)
	allocs := testing.AllocsPerRun(50, func() {
		if err := p.Process(data, dst); err != nil {
			t.Fatal(err)
		}
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 20
	for range n {
		mustProcess(t, p, data, dst)
	}
	runtime.ReadMemStats(&after)
	perCall := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("allocs per Process: %.2f, bytes per Process: %.0f", allocs, perCall)
	if allocs > 0.5 {
		t.Errorf("Process allocates %.2f times per call in steady state", allocs)
	}
	if perCall > 64<<10 {
		t.Errorf("Process allocates %.0f bytes per call in steady state", perCall)
	}
}

func TestBufferPool(t *testing.T) {
	for _, n := range []int{1, 1 << 16, 1<<16 + 1, 3 << 20, 1 << 24} {
		b := getBuf(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("getBuf(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		putBuf(b)
	}
	huge := getBuf(1<<24 + 1)
	if cap(*huge) != 1<<24+1 {
		t.Fatalf("huge buffer cap %d", cap(*huge))
	}
	putBuf(huge) // dropped, not pooled
}

func mustProcess(t *testing.T, p *Preprocessor, data []byte, dst []float32) {
	t.Helper()
	if err := p.Process(data, dst); err != nil {
		t.Fatal(err)
	}
}

func mustProcessU8(t *testing.T, p *Preprocessor, data []byte, dst []byte) {
	t.Helper()
	if err := p.ProcessUint8(data, dst); err != nil {
		t.Fatal(err)
	}
}

// gradient is a smooth RGB test pattern with at most 256 distinct colors.
func gradient(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetRGBA(x, y, color.RGBA{uint8(x * 16 / w * 16), uint8(y * 8 / h * 32), uint8(((x + y) % 2) * 200), 255})
		}
	}
	return m
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDefaultMaxPixelsIsPillows: the default accepts what torchvision's loader (Pillow)
// decodes without a DecompressionBombWarning, a 50-megapixel phone photo (8160x6144) among
// them, which the old default (50,000,000) refused; one pixel over Pillow's limit is refused.
func TestDefaultMaxPixelsIsPillows(t *testing.T) {
	p := mustNew(t, Options{})
	header := func(w, h int) []byte { // a gray baseline JPEG's header: SOI, SOF0, SOS
		return []byte{0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 1, 1, 0x11, 0,
			0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0}
	}
	if _, err := p.Probe(header(8160, 6144)); err != nil {
		t.Fatalf("8160x6144: %v", err)
	}
	// 9459x9459 = 89,472,681 pixels: under Pillow's 89,478,485; 9460x9459 is over it.
	if _, err := p.Probe(header(9459, 9459)); err != nil {
		t.Fatalf("9459x9459: %v", err)
	}
	if _, err := p.Probe(header(9460, 9459)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("9460x9459 (89,482,140 pixels): %v, want ErrTooLarge", err)
	}
}
