package preprocess

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig reference for JPEG headers
	"os"
	"path/filepath"
	"runtime"
	"testing"

	_ "golang.org/x/image/webp"

	"github.com/imagegate/imagegate/internal/testutil"
)

// probeCases are the inputs the Probe tests run on: every valid image, a
// few geometries, and generated PNGs of every color type, bit depth and
// interlace method.
func probeCases(tb testing.TB) []validImage {
	tb.Helper()
	cases := validImages(tb)
	for name, s := range pngVariantSpecs(333, 251) {
		b := makePNG(tb, s)
		cases = append(cases, validImage{name: "generated " + name, data: b, end: len(b)})
	}
	for _, c := range otherCases(tb, 211, 157) {
		cases = append(cases, validImage{name: "generated " + c.name, data: c.data, end: len(c.data)})
	}
	for _, c := range otherCases(tb, 901, 600)[:12] { // models above 1 MiB
		cases = append(cases, validImage{name: "generated 901x600 " + c.name, data: c.data, end: len(c.data)})
	}
	for _, name := range []string{"rgba16-adam7", "rgb16"} { // models above 1 MiB
		b := makePNG(tb, pngVariantSpecs(1500, 1100)[name])
		cases = append(cases, validImage{name: "generated 1500x1100 " + name, data: b, end: len(b)})
	}
	more, _ := filepath.Glob("testdata/progressive/*.jpg")
	for o := 1; o <= 8; o++ {
		more = append(more, fmt.Sprintf("testdata/orient/orient_%d.jpg", o))
	}
	for _, name := range more {
		b, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		cases = append(cases, validImage{name: name, data: b, end: len(b)})
	}
	return cases
}

// probeOptions are option sets with different DCT scales and geometries.
func probeOptions() []Options {
	return []Options{{}, {FullDecode: true}, {Width: 64, Height: 48, Resize: 70}, {Width: 300, Height: 200, Mode: ModeStretch}}
}

func TestProbeHeaders(t *testing.T) {
	p := mustNew(t, Options{})
	for _, v := range probeCases(t) {
		info, err := p.Probe(v.data)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(v.data))
		if err != nil {
			t.Fatalf("%s: image.DecodeConfig: %v", v.name, err)
		}
		if info.Format != format || info.Width != cfg.Width || info.Height != cfg.Height {
			t.Errorf("%s: Probe says %s %dx%d, the standard library %s %dx%d", v.name, info.Format, info.Width, info.Height, format, cfg.Width, cfg.Height)
		}
		if info.DecodedBytes != int64(info.Width*info.Height*info.Channels*info.BytesPerSample) || info.PeakBytes <= 0 {
			t.Errorf("%s: %+v", v.name, info)
		}
	}
	// A 16-bit RGBA PNG and a palette PNG.
	info, err := p.Probe(makePNG(t, pngVariantSpecs(7, 5)["rgba16"]))
	if err != nil || info.Channels != 4 || info.BytesPerSample != 2 || info.DecodedBytes != 7*5*8 {
		t.Errorf("rgba16: %+v, %v", info, err)
	}
	info, err = p.Probe(makePNG(t, pngVariantSpecs(7, 5)["pal4"]))
	if err != nil || info.Channels != 1 || info.BytesPerSample != 1 {
		t.Errorf("pal4: %+v, %v", info, err)
	}
}

// probeAgrees tells whether Probe's error class pc is consistent with
// Process's c: an error from Probe is Process's error; a nil one may meet bad
// data past the header, or a feature the codec lacks that only the decode
// reaches (a TIFF tag's data type), but never ErrTooLarge.
func probeAgrees(pc, c string) bool {
	return pc == c || pc == "ok" && (c == "bad" || c == "unsupported")
}

// TestProbeErrorsMatchProcess: Probe refuses what Process refuses for the
// header, with the same class (probeAgrees).
func TestProbeErrorsMatchProcess(t *testing.T) {
	var inputs []hostileInput
	for _, v := range probeCases(t) {
		inputs = append(inputs, hostileInput{v.name, v.data})
		inputs = append(inputs, hostileVariants(v)...)
	}
	for _, f := range []string{"empty.jpg", "not_an_image.jpg", "truncated_landscape.jpg", "bomb_50000x50000.png"} {
		inputs = append(inputs, hostileInput{f, readShared(t, filepath.Join(badDir, f))})
	}
	for _, o := range []Options{{}, {MaxPixels: 20000}} {
		p := mustNew(t, o)
		dst := make([]byte, p.SlotLen())
		for k, in := range inputs {
			if raceSkips(k) {
				continue
			}
			_, perr := p.Probe(in.data)
			err := p.ProcessUint8(in.data, dst)
			pc, c := errClass(perr), errClass(err)
			if !probeAgrees(pc, c) {
				t.Errorf("max_pixels=%d: %s: Probe: %s (%v), Process: %s (%v)", o.MaxPixels, in.name, pc, perr, c, err)
			}
		}
	}
}

// measureProcess runs one Process call with nothing pooled and returns the
// Go heap it allocated and the C heap it held at its peak (where a hook can
// see it: libjpeg-turbo's just before the decompressor is freed, libspng's by
// its allocator).
func measureProcess(tb testing.TB, p *Preprocessor, data []byte) (goBytes, cBytes int64, err error) {
	tb.Helper()
	if !p.fresh {
		tb.Fatal("measureProcess needs a fresh (unpooled) Preprocessor")
	}
	if testutil.CHeapInUse() < 0 {
		tb.Skip("the C library does not report its heap (mallinfo2 is glibc's)")
	}
	dst := make([]byte, p.SlotLen())
	var c0 int64
	p.cHeapProbe, p.onCHeapPeak = testutil.CHeapProbe(), func(inUse int64) { cBytes = max(cBytes, inUse-c0) }
	defer func() { p.cHeapProbe, p.onCHeapPeak = nil, nil }()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c0 = testutil.CHeapInUse()
	spng0 := spngPeakReset()
	err = p.ProcessUint8(data, dst)
	cBytes = max(cBytes, spngPeak()-spng0)
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc), cBytes, err
}

// TestPeakBytesBoundsAllocations measures what Process allocates (Go heap
// by runtime.MemStats, libjpeg-turbo's C heap by mallinfo2 at its peak) on
// every test image under several options, and checks that Probe's model
// bounds it, and bounds it tightly where the model is meant to be exact.
func TestPeakBytesBoundsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations distort the measurement")
	}
	for _, o := range probeOptions() {
		p := mustNew(t, o)
		p.fresh = true
		for _, v := range probeCases(t) {
			info, mem, err := p.probe(v.data)
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			goBytes, cBytes, err := measureProcess(t, p, v.data)
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			if goBytes > mem.goBytes()+goMeasureSlack || cBytes > mem.c {
				t.Errorf("%+v %s: allocated Go %d C %d, modelled Go %d C %d", o, v.name, goBytes, cBytes, mem.goBytes(), mem.c)
			}
			// A bound far above what is used would refuse images for nothing. With
			// nothing pooled the model counts exact sizes: it must be within 10 % where
			// it matters (above 1 MiB), except where it bounds what it does not parse:
			// lossless WebP's transforms, a compressed TIFF's inflate buffers.
			tight := 0.9
			if info.Format == "webp" && parseWebPHeader(v.data).lossless {
				tight = 0.5
			}
			if c, ok := tiffTag(v.data, 259); info.Format == "tiff" && ok && c != 1 {
				tight = 0.3
			}
			if m := mem.goBytes() + mem.c; m > 1<<20 && float64(goBytes+cBytes) < tight*float64(m) {
				t.Errorf("%+v %s: allocated Go %d C %d, far below the model's Go %d C %d", o, v.name, goBytes, cBytes, mem.goBytes(), mem.c)
			}
			t.Logf("%-40s %-36s peak %9d: Go %9d of %9d, C %8d of %8d", fmt.Sprintf("%+v", o)[:40], v.name, info.PeakBytes, goBytes, mem.goBytes(), cBytes, mem.c)
		}
	}
}

// goMeasureSlack: allocations of the runtime and the testing package that
// land in a measurement window (MemStats itself, timers).
const goMeasureSlack int64 = 8 << 10

// TestProbeAllocatesNoPixels: probing huge images allocates kilobytes.
func TestProbeAllocatesNoPixels(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations distort the measurement")
	}
	p := mustNew(t, Options{MaxPixels: 1 << 40})
	inputs := map[string][]byte{
		"bomb_50000x50000.png": readShared(t, filepath.Join(badDir, "bomb_50000x50000.png")),
		"rgba16 7000x7000":     makePNG(t, pngSpec{w: 7000, h: 7000, colorType: 6, depth: 16}),
		"rime_5868.jpg":        seedJPEG(t),
	}
	for name, data := range inputs {
		p.Probe(data) // the weight cache fills on the first call
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c0 := testutil.CHeapInUse()
		info, err := p.Probe(data)
		c1 := testutil.CHeapInUse()
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		goBytes := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: %+v; Probe allocated %d bytes of Go heap, C heap in use changed by %d", name, info, goBytes, c1-c0)
		if goBytes > 64<<10 || c1-c0 > 64<<10 {
			t.Errorf("%s: Probe allocated %d bytes (Go), %d (C)", name, goBytes, c1-c0)
		}
	}
}

// FuzzProbe: Probe never panics, its errors wrap a sentinel, agree with
// Process's as in TestProbeErrorsMatchProcess, and what a fresh Process
// allocates stays within the model.
func FuzzProbe(f *testing.F) {
	fuzzSeeds(f, []string{"*.jpg", "*.jpeg", "*.png", "*.webp"}, []byte{0xFF, 0xD8, 0xFF}, pngMagic)
	for _, c := range otherCases(f, 23, 17) {
		f.Add(c.data)
	}
	o := Options{Width: 32, Height: 32, Resize: 40, MaxPixels: fuzzMaxPixels}
	p, err := New(o)
	if err != nil {
		f.Fatal(err)
	}
	p.fresh = true
	f.Fuzz(func(t *testing.T, data []byte) {
		info, mem, perr := p.probe(data)
		if perr != nil && !errors.Is(perr, ErrBadImage) && !errors.Is(perr, ErrTooLarge) && !errors.Is(perr, ErrUnsupportedFormat) {
			t.Fatalf("error wraps no sentinel: %v", perr)
		}
		goBytes, cBytes, err := measureProcess(t, p, data)
		pc, c := errClass(perr), errClass(err)
		if !probeAgrees(pc, c) {
			t.Fatalf("Probe: %s (%v), Process: %s (%v)", pc, perr, c, err)
		}
		if err == nil && !raceEnabled && (goBytes > mem.goBytes()+goMeasureSlack || cBytes > mem.c) {
			t.Fatalf("%+v: allocated Go %d C %d, modelled Go %d C %d", info, goBytes, cBytes, mem.goBytes(), mem.c)
		}
	})
}
