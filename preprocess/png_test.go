package preprocess

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// pngReference is the slot the earlier path made of a PNG: image/png decodes
// the whole canvas, toSource converts it as Pillow's convert('RGB') does,
// then the same resampler runs. The streamed decoder must match it bit for
// bit (Pillow's semantics were pinned on that path by the goldens and
// TestPNGVariants).
func pngReference(tb testing.TB, p *Preprocessor, data []byte) []byte {
	tb.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("image/png: %v", err)
	}
	if m, ok := img.(*image.Paletted); ok {
		// image/png pads a short palette with black; Pillow's default palette, past the
		// file's entries, is the gray ramp.
		if i := bytes.Index(data, []byte("PLTE")); i >= 4 {
			n := int(binary.BigEndian.Uint32(data[i-4:])) / 3
			m.Palette = slices.Clone(m.Palette)
			for k := n; k < len(m.Palette); k++ {
				m.Palette[k] = color.RGBA{uint8(k), uint8(k), uint8(k), 255}
			}
		}
	}
	s := &scratch{fresh: true}
	src := toSource(img, s)
	out := make([]byte, p.SlotLen())
	if err := p.resample(&src, s, sink{u8: out}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestPNGStreamMatchesFullDecode: every color type, bit depth, tRNS,
// palette and interlace method, in several geometries (crop in the middle,
// at the top, stretch, upscale), gives exactly what the full decode gives.
func TestPNGStreamMatchesFullDecode(t *testing.T) {
	opts := []Options{
		{Layout: NHWC},
		{Width: 64, Height: 48, Resize: 70, Layout: NHWC},
		{Width: 100, Height: 30, Resize: 120, Layout: NHWC},
		{Width: 90, Height: 300, Mode: ModeStretch, Layout: NHWC},
		{Width: 600, Height: 500, Resize: 700, Layout: NHWC}, // upscale: every row and column
	}
	k := 0
	for _, size := range [][2]int{{333, 251}, {97, 410}, {9, 7}} {
		for name, spec := range pngVariantSpecs(size[0], size[1]) {
			data := makePNG(t, spec)
			for _, o := range opts {
				for _, fresh := range []bool{false, true} {
					if k++; raceSkips(k - 1) {
						continue
					}
					p := mustNew(t, o)
					p.fresh = fresh
					want := pngReference(t, p, data)
					got := make([]byte, p.SlotLen())
					if err := p.ProcessUint8(data, got); err != nil {
						t.Fatalf("%dx%d %s %+v: %v", size[0], size[1], name, o, err)
					}
					if !bytes.Equal(got, want) {
						m, x := diff(got, want)
						t.Errorf("%dx%d %s %dx%d/%d %s fresh=%v: differs from image/png: mean %.5f max %.4f",
							size[0], size[1], name, o.Width, o.Height, o.Resize, o.Mode, fresh, m, x)
					}
				}
			}
		}
	}
	// The shared photos (some carry iCCP, iTXt, tEXt: stripped before libspng).
	for _, v := range validImages(t) {
		if detectFormat(v.data) != formatPNG {
			continue
		}
		p := mustNew(t, Options{Layout: NHWC})
		got := make([]byte, p.SlotLen())
		mustProcessU8(t, p, v.data, got)
		if !bytes.Equal(got, pngReference(t, p, v.data)) {
			t.Errorf("%s differs from image/png", v.name)
		}
	}
}

// pngChunks splits a PNG into its chunks (type, data).
func pngChunks(b []byte) (types []string, datas [][]byte) {
	for i := 8; i+12 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[i:]))
		types = append(types, string(b[i+4:i+8]))
		datas = append(datas, b[i+8:i+8+n])
		i += 12 + n
	}
	return types, datas
}

func pngJoin(types []string, datas [][]byte) []byte {
	var out bytes.Buffer
	out.Write(pngMagic)
	for i, t := range types {
		pngChunk(&out, t, datas[i])
	}
	return out.Bytes()
}

// pngHostile are broken PNGs built from a valid one: each must be refused
// with ErrBadImage (or ErrTooLarge / ErrUnsupportedFormat where named).
func pngHostile(tb testing.TB) []hostileInput {
	tb.Helper()
	spec := pngVariantSpecs(300, 200)["rgb8"]
	good := makePNG(tb, spec)
	types, datas := pngChunks(good)
	var out []hostileInput
	add := func(name string, b []byte) { out = append(out, hostileInput{name, b}) }
	mod := func(name string, f func(types []string, datas [][]byte) ([]string, [][]byte)) {
		ts := append([]string(nil), types...)
		ds := make([][]byte, len(datas))
		for i := range datas {
			ds[i] = bytes.Clone(datas[i])
		}
		ts, ds = f(ts, ds)
		add(name, pngJoin(ts, ds))
	}
	idat := 1 // index of the IDAT chunk in a makePNG file without PLTE/tRNS
	// CRC mismatch in the image data, below the crop (never decoded).
	bad := bytes.Clone(good)
	bad[len(bad)-12-1] ^= 1 // last byte of IDAT's CRC
	add("IDAT CRC mismatch", bad)
	// An ancillary chunk with a bad CRC (image/png and Pillow refuse it).
	withText := pngJoin(append([]string{types[0], "tEXt"}, types[1:]...), append([][]byte{datas[0], []byte("k\x00v")}, datas[1:]...))
	i := bytes.Index(withText, []byte("tEXt"))
	withText[i+4+3] ^= 0xFF // corrupt the CRC
	add("tEXt CRC mismatch", withText)
	mod("no IEND", func(t []string, d [][]byte) ([]string, [][]byte) { return t[:len(t)-1], d[:len(d)-1] })
	mod("no IDAT", func(t []string, d [][]byte) ([]string, [][]byte) {
		return append(t[:idat], t[idat+1:]...), append(d[:idat], d[idat+1:]...)
	})
	mod("image data cut short (valid CRCs)", func(t []string, d [][]byte) ([]string, [][]byte) {
		d[idat] = d[idat][:len(d[idat])/2]
		return t, d
	})
	mod("image data corrupt at the top (valid CRCs)", func(t []string, d [][]byte) ([]string, [][]byte) {
		for k := 2; k < 200; k++ {
			d[idat][k] ^= 0x5A
		}
		return t, d
	})
	mod("palette image without PLTE", func(t []string, d [][]byte) ([]string, [][]byte) {
		d[0][9] = 3
		return t, d
	})
	mod("bad filter type", func(t []string, d [][]byte) ([]string, [][]byte) {
		raw := bytes.Repeat([]byte{7, 1, 2, 3}, 10)
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		w.Write(raw)
		w.Close()
		binary.BigEndian.PutUint32(d[0], 3)
		binary.BigEndian.PutUint32(d[0][4:], 3)
		d[idat] = z.Bytes()
		return t, d
	})
	mod("bit depth 3", func(t []string, d [][]byte) ([]string, [][]byte) { d[0][8] = 3; return t, d })
	mod("interlace method 2", func(t []string, d [][]byte) ([]string, [][]byte) { d[0][12] = 2; return t, d })
	mod("zero width", func(t []string, d [][]byte) ([]string, [][]byte) {
		binary.BigEndian.PutUint32(d[0], 0)
		return t, d
	})
	// A chunk length past the end.
	big := bytes.Clone(good)
	binary.BigEndian.PutUint32(big[8+25:], 1<<31-1)
	add("chunk length past the end", big)
	// IHDR CRC wrong.
	ihdr := bytes.Clone(good)
	ihdr[29] ^= 1
	add("IHDR CRC mismatch", ihdr)
	return out
}

func TestPNGHostile(t *testing.T) {
	valid := makePNG(t, pngVariantSpecs(300, 200)["rgba16-adam7"])
	for _, fresh := range []bool{false, true} {
		p := mustNew(t, Options{})
		p.fresh = fresh
		dst := make([]byte, p.SlotLen())
		for _, h := range pngHostile(t) {
			if err := p.ProcessUint8(valid, dst); err != nil {
				t.Fatal(err)
			}
			err := p.ProcessUint8(h.data, dst)
			if !errors.Is(err, ErrBadImage) {
				t.Errorf("fresh=%v: %s: got %v, want %v", fresh, h.name, err, ErrBadImage)
			}
			if _, perr := p.Probe(h.data); perr != nil && !errors.Is(perr, ErrBadImage) {
				t.Errorf("%s: Probe: %v", h.name, perr)
			}
		}
	}
}

// pngBomb is the reproduction: a small PNG whose header declares
// 7000x7000 RGBA 16-bit (49 Mpixels, under max_pixels) and whose image data
// is zeros: 392 MB of scanlines in about 380 KB.
func pngBomb(tb testing.TB) []byte {
	tb.Helper()
	bombOnce.Do(func() {
		bombData = makePNG(tb, pngSpec{w: 7000, h: 7000, colorType: 6, depth: 16, level: zlib.BestCompression})
	})
	return bombData
}

var (
	bombOnce sync.Once
	bombData []byte
)

// TestPNGBombMemory: decoding the bomb holds kilobytes of C heap and a few
// megabytes of Go heap (the resampler's rows feeding the crop), as Probe says.
func TestPNGBombMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations distort the measurement")
	}
	data := pngBomb(t)
	p := mustNew(t, Options{})
	p.fresh = true
	info, mem, err := p.probe(data)
	if err != nil {
		t.Fatal(err)
	}
	goBytes, cBytes, err := measureProcess(t, p, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d-byte PNG, %dx%d RGBA16 (%d MB of scanlines): Go heap %d, C heap %d (libspng, counted); PeakBytes %d",
		len(data), info.Width, info.Height, info.DecodedBytes>>20, goBytes, cBytes, info.PeakBytes)
	if goBytes > mem.goBytes()+goMeasureSlack || cBytes > mem.c {
		t.Errorf("allocated Go %d C %d, modelled Go %d C %d", goBytes, cBytes, mem.goBytes(), mem.c)
	}
	// The whole decode holds less than the 7000-pixel rows the crop reads,
	// 8-bit, through the horizontal pass: 224*3 bytes each.
	if limit := int64(16 << 20); info.PeakBytes > limit || goBytes+cBytes > limit {
		t.Errorf("PeakBytes %d, measured %d: more than %d", info.PeakBytes, goBytes+cBytes, limit)
	}
}

// TestPNGBombBurstRSS: eight bombs decoded at once keep the whole process
// under 600 MB resident (VmHWM of a child process that does only that).
func TestPNGBombBurstRSS(t *testing.T) {
	if os.Getenv("PREPROCESS_BURST_FILE") != "" {
		pngBurstChild(t)
		return
	}
	if testing.Short() {
		t.Skip("decodes 8 x 392 MB of scanlines")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory distorts the measurement (make test runs it without)")
	}
	f := t.TempDir() + "/bomb.png"
	if err := os.WriteFile(f, pngBomb(t), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPNGBombBurstRSS$", "-test.v")
	cmd.Env = append(os.Environ(), "PREPROCESS_BURST_FILE="+f)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var hwm int64 = -1
	for _, line := range strings.Split(string(out), "\n") {
		if _, v, ok := strings.Cut(line, "burst VmHWM kB: "); ok {
			hwm, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if hwm < 0 {
		t.Fatalf("child printed no VmHWM:\n%s", out)
	}
	t.Logf("8 concurrent 7000x7000 RGBA16 PNG decodes: peak RSS of the whole process %d MB", hwm>>10)
	if hwm > 600<<10 {
		t.Errorf("peak RSS %d MB, want under 600 MB", hwm>>10)
	}
}

func pngBurstChild(t *testing.T) {
	data, err := os.ReadFile(os.Getenv("PREPROCESS_BURST_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	p := mustNew(t, Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			dst := make([]float32, p.SlotLen())
			if err := p.Process(data, dst); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	runtime.KeepAlive(data)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Printf("burst VmHWM kB: %s\n", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
}

// TestPNGPaletteIndexPastItsEnd: an index past the end of PLTE (an invalid file, which the
// decoders accept) reads as Pillow reads it, from its default palette, the gray ramp
// (i, i, i); it was black.
func TestPNGPaletteIndexPastItsEnd(t *testing.T) {
	const w, h = 16, 16
	file := makePNG(t, pngSpec{w: w, h: h, colorType: 3, depth: 8, plte: [][3]uint8{{200, 10, 20}, {5, 250, 6}},
		sample: func(x, y, c int) uint16 { return uint16(y*w + x) }})
	want := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(y*w + x), uint8(y*w + x), uint8(y*w + x), 255}
			switch y*w + x {
			case 0:
				c = color.RGBA{200, 10, 20, 255}
			case 1:
				c = color.RGBA{5, 250, 6, 255}
			}
			want.SetRGBA(x, y, c)
		}
	}
	p := mustNew(t, Options{Width: w, Height: h, Mode: ModeStretch, Layout: NHWC})
	ref, got := make([]byte, p.SlotLen()), make([]byte, p.SlotLen())
	mustProcessU8(t, p, encodePNG(t, want), ref)
	mustProcessU8(t, p, file, got)
	if !bytes.Equal(got, ref) {
		m, x := diff(got, ref)
		t.Fatalf("differs from Pillow's reading: mean %.4f max %.4f", m, x)
	}
}
