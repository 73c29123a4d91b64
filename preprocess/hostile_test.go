package preprocess

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// No state may cross calls: a hostile input decoded right after a valid image
// must fail on its own merits (a pooled decoder handle or pixel buffer must not
// lend it the previous image), and a valid image decoded after hostile ones
// must give exactly what a fresh decoder gives.

type validImage struct {
	name string
	data []byte
	end  int // offset just past the image's own data (trailing bytes excluded)
}

// validImages returns every JPEG, PNG and WebP in ../shared/images, the
// WebPs of testdata (the shared set has none) and generated PNGs of the
// color types and interlacing the shared set lacks.
func validImages(tb testing.TB) []validImage {
	tb.Helper()
	readShared(tb, filepath.Join(imagesDir, "README.md")) // skips without ../shared
	var files []string
	for _, pat := range []string{"*.jpg", "*.jpeg", "*.png"} {
		m, _ := filepath.Glob(filepath.Join(imagesDir, pat))
		files = append(files, m...)
	}
	m, _ := filepath.Glob("testdata/webp/*.webp")
	files = append(files, m...)
	var out []validImage
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, validImage{name: filepath.Base(f), data: b, end: imageEnd(b)})
	}
	// PNGs the shared set lacks (libspng's interlaced, palette and 16-bit paths).
	for _, name := range []string{"rgba16-adam7", "pal4", "gray16", "ga8-adam7", "pal8-short-trns"} {
		b := makePNG(tb, pngVariantSpecs(301, 203)[name])
		out = append(out, validImage{name: "generated " + name + ".png", data: b, end: len(b)})
	}
	// GIF, BMP and TIFF (through imaging).
	for _, c := range otherCases(tb, 151, 97) {
		switch c.name {
		case "gif palette", "gif crafted, transparency 4, local table", "bmp 24-bit", "bmp 8-bit palette",
			"bmp 32-bit alpha", "tiff rgb deflate", "tiff gray16", "tiff palette", "tiff orientation 6":
			out = append(out, validImage{name: "generated " + c.name, data: c.data, end: imageEnd(c.data)})
		}
	}
	if len(out) < 10 {
		tb.Fatalf("only %d valid images found", len(out))
	}
	return out
}

// imageEnd returns the length of the image proper: up to and including the
// last JPEG EOI marker, the PNG IEND chunk, or the RIFF size.
func imageEnd(b []byte) int {
	switch detectFormat(b) {
	case formatJPEG:
		if i := bytes.LastIndex(b, []byte{0xFF, 0xD9}); i > 0 {
			return i + 2
		}
	case formatPNG:
		if i := bytes.LastIndex(b, []byte("IEND")); i > 0 {
			return i + 8 // type + CRC
		}
	case formatWebP:
		if n := int(binary.LittleEndian.Uint32(b[4:8])) + 8; n <= len(b) {
			return n
		}
	case formatGIF: // the first frame is the image; later frames and the trailer are not read
		if g, ok := parseGIF(b); ok {
			return g.end
		}
	case formatTIFF: // through the last strip, IFD0 (with the next IFD's offset) and its arrays
		return tiffEnd(b)
	case formatBMP: // pixel data offset + rows padded to 4 bytes
		off := int(binary.LittleEndian.Uint32(b[10:]))
		w, h := int(int32(binary.LittleEndian.Uint32(b[18:]))), int(int32(binary.LittleEndian.Uint32(b[22:])))
		bpp := int(binary.LittleEndian.Uint16(b[28:]))
		if h < 0 {
			h = -h
		}
		if n := off + (w*bpp+31)/32*4*h; n <= len(b) {
			return n
		}
	}
	return len(b)
}

type hostileInput struct {
	name string
	data []byte
}

// want is the error a hostile input must get: ErrBadImage, or
// ErrUnsupportedFormat where the cut left too few bytes to tell the format
// (2 bytes of "BM", 3 of "GIF").
func (h hostileInput) want() error {
	if detectFormat(h.data) == formatUnknown {
		return ErrUnsupportedFormat
	}
	return ErrBadImage
}

// hostileVariants cuts a valid image: at 16 points, to its magic bytes, to its
// headers only, and in the middle of its compressed data.
func hostileVariants(v validImage) []hostileInput {
	b := v.data[:v.end]
	var out []hostileInput
	add := func(what string, n int) {
		if n > 0 && n < len(b) {
			out = append(out, hostileInput{fmt.Sprintf("%s %s (%d of %d bytes)", v.name, what, n, len(b)), b[:n:n]})
		}
	}
	for k := 1; k <= 16; k++ {
		add(fmt.Sprintf("cut %d/17", k), len(b)*k/17)
	}
	add("cut before the last byte", len(b)-1)
	switch detectFormat(b) {
	case formatJPEG:
		add("magic only", 3)
		if i := bytes.Index(b, []byte{0xFF, 0xDA}); i > 0 { // start of scan
			add("header only", i)
			add("scan cut", i+(len(b)-i)/2)
			add("header and scan header", min(i+20, len(b)-1))
		}
	case formatPNG:
		add("magic only", 8)
		add("IHDR only", 33)
		if i := bytes.Index(b, []byte("IDAT")); i > 0 {
			add("header only", i-4)
			add("scan cut", i+(len(b)-i)/2)
		}
	case formatWebP:
		add("magic only", 12)
		add("header only", 30)
		add("scan cut", 30+(len(b)-30)/2)
	case formatGIF:
		add("magic only", 6)
		add("screen descriptor only", 13)
		if g, ok := parseGIF(b); ok {
			add("frame data cut", g.end-(g.end-13)/3)
		}
	case formatBMP:
		add("magic only", 2)
		add("headers only", int(binary.LittleEndian.Uint32(b[10:])))
	case formatTIFF:
		add("magic only", 4)
		add("header only", 8)
	}
	return out
}

// reference is what a fresh (unpooled) preprocessor makes of data.
func reference(tb testing.TB, o Options, data []byte) []byte {
	tb.Helper()
	p := mustNew(tb, o)
	p.fresh = true
	out := make([]byte, p.SlotLen())
	if err := p.ProcessUint8(data, out); err != nil {
		tb.Fatalf("fresh decode: %v", err)
	}
	return out
}

func TestHostileAfterValidSameGoroutine(t *testing.T) {
	valid := validImages(t)
	for _, o := range []Options{{}, {FullDecode: true}} {
		p := mustNew(t, o)
		dst := make([]byte, p.SlotLen())
		n := 0
		for i, v := range valid {
			prev := valid[(i+1)%len(valid)] // decoded right before each variant
			for _, h := range hostileVariants(v) {
				if n++; raceSkips(n - 1) {
					continue
				}
				if err := p.ProcessUint8(prev.data, dst); err != nil {
					t.Fatalf("%s: %v", prev.name, err)
				}
				err := p.ProcessUint8(h.data, dst)
				if want := h.want(); !errors.Is(err, want) {
					t.Errorf("full_decode=%v: %s after %s: got %v, want %v", o.FullDecode, h.name, prev.name, err, want)
				}
			}
		}
		t.Logf("full_decode=%v: %d hostile variants of %d images (a race run tries one in %d)", o.FullDecode, n, len(valid), raceStride)
	}
	// The reproduction: three bytes after a real photo.
	p := mustNew(t, Options{})
	dst := make([]float32, p.SlotLen())
	mustProcess(t, p, readShared(t, filepath.Join(imagesDir, "skimage_rocket.jpg")), dst)
	if err := p.Process([]byte{0xFF, 0xD8, 0xFF}, dst); !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "no image") {
		t.Fatalf("FF D8 FF after a photo: %v", err)
	}
}

// TestHostileAcrossGoroutines: goroutines sharing one Preprocessor (and the
// pools) interleave valid images and hostile variants; every hostile input
// fails, every valid one gives exactly the fresh decoder's output.
func TestHostileAcrossGoroutines(t *testing.T) {
	valid := validImages(t)
	var hostile []hostileInput
	for _, v := range valid {
		hostile = append(hostile, hostileVariants(v)...)
	}
	o := Options{}
	p := mustNew(t, o)
	want := make([][]byte, len(valid))
	for i, v := range valid {
		want[i] = reference(t, o, v.data)
	}
	const workers, rounds = 6, 60
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 8))
			dst := make([]byte, p.SlotLen())
			for range rounds {
				i := r.IntN(len(valid))
				if err := p.ProcessUint8(valid[i].data, dst); err != nil {
					t.Errorf("%s: %v", valid[i].name, err)
					return
				}
				if !bytes.Equal(dst, want[i]) {
					t.Errorf("goroutine %d: %s differs from a fresh decode", g, valid[i].name)
					return
				}
				h := hostile[r.IntN(len(hostile))]
				if err := p.ProcessUint8(h.data, dst); !errors.Is(err, h.want()) {
					t.Errorf("goroutine %d: %s: got %v, want %v", g, h.name, err, h.want())
					return
				}
			}
		})
	}
	wg.Wait()
}

// errClass names the sentinel an error wraps ("ok" for nil).
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrBadImage):
		return "bad"
	case errors.Is(err, ErrTooLarge):
		return "too large"
	case errors.Is(err, ErrUnsupportedFormat):
		return "unsupported"
	}
	return "unclassified: " + err.Error()
}

// FuzzPooledMatchesFresh: the pooled path, dirtied by a valid image decoded
// just before, and a freshly created decoder agree on every input: the same
// error class, and the same output bytes when both succeed.
func FuzzPooledMatchesFresh(f *testing.F) {
	fuzzSeeds(f, []string{"*.jpg", "*.jpeg", "*.png", "*.webp"}, []byte{0xFF, 0xD8, 0xFF}, pngMagic)
	for _, c := range otherCases(f, 23, 17) {
		f.Add(c.data)
	}
	if b, err := os.ReadFile(filepath.Join(imagesDir, "skimage_rocket.jpg")); err == nil {
		v := validImage{name: "rocket", data: b, end: imageEnd(b)}
		for _, h := range hostileVariants(v) {
			f.Add(h.data)
		}
	}
	for _, name := range []string{"rgba16-adam7", "pal2", "gray16-trns", "rgb8"} {
		f.Add(makePNG(f, pngVariantSpecs(40, 30)[name]))
	}
	for _, h := range pngHostile(f) {
		f.Add(h.data)
	}
	o := Options{Width: 32, Height: 32, Resize: 40, MaxPixels: fuzzMaxPixels}
	pooled, err := New(o)
	if err != nil {
		f.Fatal(err)
	}
	fresh, _ := New(o)
	fresh.fresh = true
	warm, err := os.ReadFile("testdata/orient/orient_6.jpg")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := make([]byte, pooled.SlotLen()), make([]byte, pooled.SlotLen())
		if err := pooled.ProcessUint8(warm, a); err != nil {
			t.Fatal(err)
		}
		errA := pooled.ProcessUint8(data, a)
		errB := fresh.ProcessUint8(data, b)
		if ca, cb := errClass(errA), errClass(errB); ca != cb {
			t.Fatalf("pooled: %s (%v), fresh: %s (%v)", ca, errA, cb, errB)
		}
		if errA == nil && !bytes.Equal(a, b) {
			t.Fatal("pooled and fresh decoders give different pixels")
		}
	})
}

// tiffEnd is the end of the last byte x/image/tiff reads of a little-endian
// TIFF: its strips, IFD0 with the next IFD's offset, the out-of-line values
// of the tags it reads. (Unread tag data, such as a resolution written after
// them, may be cut without harm: Pillow warns and goes on too.)
func tiffEnd(b []byte) int {
	le := binary.LittleEndian
	off := int(le.Uint32(b[4:]))
	n := int(le.Uint16(b[off:]))
	end := off + 2 + 12*n + 4
	size := map[uint16]int{1: 1, 2: 1, 3: 2, 4: 4, 5: 8}
	var offsets, counts []int
	for i := range n {
		e := b[off+2+12*i:]
		tag, typ, cnt := le.Uint16(e), le.Uint16(e[2:]), int(le.Uint32(e[4:]))
		vals := func() []int {
			at := e[8:12]
			if cnt*size[typ] > 4 {
				p := int(le.Uint32(e[8:]))
				at = b[p : p+cnt*size[typ]]
			}
			var out []int
			for k := range cnt {
				if typ == 3 {
					out = append(out, int(le.Uint16(at[2*k:])))
				} else {
					out = append(out, int(le.Uint32(at[4*k:])))
				}
			}
			return out
		}
		switch tag {
		case 273:
			offsets = vals()
		case 279:
			counts = vals()
		}
		if tag == 258 || tag == 273 || tag == 279 || tag == 320 || tag == 338 || tag == 339 {
			if l := cnt * size[typ]; l > 4 {
				end = max(end, int(le.Uint32(e[8:]))+l)
			}
		}
	}
	for i := range min(len(offsets), len(counts)) {
		end = max(end, offsets[i]+counts[i])
	}
	return min(end, len(b))
}

// eobScansJPEG crafts a w x h grayscale progressive JPEG (w and h multiples of 64) with a DC
// scan and then acScans identical AC first scans of the full band, each a few bytes:
// end-of-band runs of 16384 blocks (libjpeg ends the last one with the scan). Each scan still
// costs the decoder a pass over every block.
func eobScansJPEG(w, h, acScans int) []byte {
	return progressiveEOBJPEG(w, h, slices.Repeat([][3]byte{{1, 63, 0x00}}, acScans))
}

// progressiveEOBJPEG is eobScansJPEG with the AC scans given as {Ss, Se, Ah<<4|Al}.
func progressiveEOBJPEG(w, h int, acScans [][3]byte) []byte {
	if w%64 != 0 || h%64 != 0 {
		panic("progressiveEOBJPEG: w and h must be multiples of 64")
	}
	blocks := (w / 8) * (h / 8)
	runs := (blocks + 16383) / 16384
	var b bytes.Buffer
	seg := func(marker byte, payload []byte) {
		b.Write([]byte{0xFF, marker, byte((len(payload) + 2) >> 8), byte(len(payload) + 2)})
		b.Write(payload)
	}
	b.Write([]byte{0xFF, 0xD8})
	seg(0xDB, append([]byte{0}, bytes.Repeat([]byte{1}, 64)...))                      // quantization: all 1
	seg(0xC2, []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 1, 1, 0x11, 0}) // SOF2, one component
	seg(0xC4, append([]byte{0x00, 1}, append(make([]byte, 15), 0x00)...))             // DC: "0" is category 0
	seg(0xC4, append([]byte{0x10, 1}, append(make([]byte, 15), 0xE0)...))             // AC: "0" is EOB14
	seg(0xDA, []byte{1, 1, 0x00, 0, 0, 0})                                            // DC scan
	b.Write(make([]byte, blocks/8))                                                   // a "0" bit a block
	run := make([]byte, (runs*15+7)/8)                                                // "0" + 14 zero bits a run of 16384
	if pad := len(run)*8 - runs*15; pad > 0 {
		run[len(run)-1] = byte(1<<pad - 1) // padded with 1 bits
	}
	for _, sc := range acScans {
		seg(0xDA, []byte{1, 1, 0x00, sc[0], sc[1], sc[2]})
		b.Write(run) // in a refinement scan too: no coefficient is nonzero, so no correction bits
	}
	b.Write([]byte{0xFF, 0xD9})
	return b.Bytes()
}

// sequentialScansJPEG crafts a w x h 3-component sequential (baseline) JPEG, w and h multiples
// of 64, scanned one component at a time: the luma scan lumaScans times, then each chroma
// scan once. Every block is a zero DC difference and an end of block: 2 bits.
func sequentialScansJPEG(w, h, lumaScans int) []byte {
	if w%64 != 0 || h%64 != 0 {
		panic("sequentialScansJPEG: w and h must be multiples of 64")
	}
	blocks := (w / 8) * (h / 8)
	var b bytes.Buffer
	seg := func(marker byte, payload []byte) {
		b.Write([]byte{0xFF, marker, byte((len(payload) + 2) >> 8), byte(len(payload) + 2)})
		b.Write(payload)
	}
	b.Write([]byte{0xFF, 0xD8})
	seg(0xDB, append([]byte{0}, bytes.Repeat([]byte{1}, 64)...))
	seg(0xC0, []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0}) // SOF0
	seg(0xC4, append([]byte{0x00, 1}, append(make([]byte, 15), 0x00)...))                                     // DC: "0" is category 0
	seg(0xC4, append([]byte{0x10, 1}, append(make([]byte, 15), 0x00)...))                                     // AC: "0" is EOB
	data := make([]byte, blocks/4)
	scan := func(comp byte) {
		seg(0xDA, []byte{1, comp, 0x00, 0, 63, 0})
		b.Write(data)
	}
	for range lumaScans {
		scan(1)
	}
	scan(2)
	scan(3)
	b.Write([]byte{0xFF, 0xD9})
	return b.Bytes()
}

// TestProgressiveScansAreBudgeted: a progressive JPEG whose scans pass over its blocks more
// than IG_MAX_PASSES times is refused before the scan that would exceed it is decoded, also
// with fewer than IG_MAX_SCANS scans; one within the budget decodes. (A 133 KB file of 499
// such scans over 7000x7000 took 3.3 s of CPU.)
func TestProgressiveScansAreBudgeted(t *testing.T) {
	p, err := New(Options{Width: 32, Height: 32, Resize: 40, MaxPixels: 1 << 26})
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, p.SlotLen())
	ok := eobScansJPEG(2048, 2048, 60) // 61 passes
	if err := p.Process(ok, row); err != nil {
		t.Fatalf("%d bytes, 61 scans over 2048x2048: %v", len(ok), err)
	}
	for _, scans := range []int{64, 200, 499} {
		bomb := eobScansJPEG(2048, 2048, scans)
		err := p.Process(bomb, row)
		if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "pass over its blocks") {
			t.Fatalf("%d bytes, %d scans over 2048x2048: %v, want a refusal of the scans", len(bomb), scans+1, err)
		}
	}
	// A small image may have many scans: they cost little.
	small := eobScansJPEG(512, 512, 498)
	if err := p.Process(small, row); err != nil {
		t.Fatalf("499 scans over 512x512: %v", err)
	}
	// The decoder is pooled: the count starts again with each image.
	if err := p.Process(ok, row); err != nil {
		t.Fatalf("the 61-scan file after refused ones: %v", err)
	}
	// AC refinement scans visit every coefficient of their band: each counts 4 passes here.
	firstThenRefine := func(refines int) []byte {
		return progressiveEOBJPEG(2048, 2048, append([][3]byte{{1, 63, 0x01}}, slices.Repeat([][3]byte{{1, 63, 0x10}}, refines)...))
	}
	if err := p.Process(firstThenRefine(10), row); err != nil { // 1 + 1 + 10*4 passes
		t.Fatalf("10 refinement scans over 2048x2048: %v", err)
	}
	if err := p.Process(firstThenRefine(30), row); !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "pass over its blocks") {
		t.Fatalf("30 refinement scans over 2048x2048 (32 scans, 122 passes by weight): %v, want a refusal of the scans", err)
	}
	// A sequential file scans each component once; repeating one is refused (498 repeats of
	// an arithmetic-coded luma scan over 7040x7040, 10.7 KB, took 6.4 s).
	if err := p.Process(sequentialScansJPEG(1024, 1024, 1), row); err != nil {
		t.Fatalf("a sequential file scanned a component at a time: %v", err)
	}
	if err := p.Process(sequentialScansJPEG(1024, 1024, 40), row); !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "more than once") {
		t.Fatalf("a sequential file with 40 luma scans: %v, want a refusal", err)
	}
}

// tiledGrayTIFF is a little-endian 8-bit gray TIFF of w x h pixels in tile x tile tiles, every
// tile pointing at the same stored tile: a deflate stream of zeros when compression is 8, raw
// zeros when 1 (the shape of a tile bomb: a small file, one decompressor per tile).
func tiledGrayTIFF(w, h, tile int, compression uint16) []byte {
	raw := make([]byte, tile*tile)
	data := raw
	if compression == 8 {
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(raw)
		zw.Close()
		data = z.Bytes()
	}
	nt := ((w + tile - 1) / tile) * ((h + tile - 1) / tile)
	const entries = 10
	offsets := 8 + 2 + 12*entries + 4
	counts := offsets + 4*nt
	dataAt := counts + 4*nt
	le := binary.LittleEndian
	b := le.AppendUint32([]byte("II*\x00"), 8)
	b = le.AppendUint16(b, entries)
	entry := func(tag, typ uint16, n, v uint32) {
		b = le.AppendUint16(b, tag)
		b = le.AppendUint16(b, typ)
		b = le.AppendUint32(b, n)
		if typ == 3 && n == 1 {
			b = le.AppendUint16(b, uint16(v))
			b = le.AppendUint16(b, 0)
		} else {
			b = le.AppendUint32(b, v)
		}
	}
	entry(256, 4, 1, uint32(w))
	entry(257, 4, 1, uint32(h))
	entry(258, 3, 1, 8)
	entry(259, 3, 1, uint32(compression))
	entry(262, 3, 1, 1) // BlackIsZero
	entry(277, 3, 1, 1)
	entry(322, 3, 1, uint32(tile))
	entry(323, 3, 1, uint32(tile))
	entry(324, 4, uint32(nt), uint32(offsets))
	entry(325, 4, uint32(nt), uint32(counts))
	b = le.AppendUint32(b, 0)
	for range nt {
		b = le.AppendUint32(b, uint32(dataAt))
	}
	for range nt {
		b = le.AppendUint32(b, uint32(len(data)))
	}
	return append(b, data...)
}

// TestTIFFTilesAreBounded: a TIFF may have at most max(16384, pixels/1024) strips or tiles.
// Each costs a read and, compressed, a decompressor of its own: a 1.5 MB file of 192k 16x16
// tiles over 7000x7000, all one 20-byte deflate stream, took 2.8 s of a decode worker. The
// refusal comes from the header (Probe), before any decoding; tiles of 32x32 pass, and count
// in the decode's work (WorkBytes) beyond their pixels.
func TestTIFFTilesAreBounded(t *testing.T) {
	p := mustNew(t, Options{Width: 32, Height: 32, Resize: 40, MaxPixels: 1 << 26})
	row := make([]float32, p.SlotLen())
	for _, compression := range []uint16{8, 1} {
		bomb := tiledGrayTIFF(4096, 4096, 16, compression) // 65536 tiles, limit 16384
		if _, err := p.Probe(bomb); !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "strips or tiles") {
			t.Fatalf("compression %d, 65536 tiles of 16x16: Probe says %v; want the tile count refused", compression, err)
		}
		if err := p.Process(bomb, row); !errors.Is(err, ErrUnsupportedFormat) {
			t.Fatalf("compression %d, 65536 tiles of 16x16: Process says %v", compression, err)
		}
		ok := tiledGrayTIFF(4096, 4096, 32, compression) // 16384 tiles
		info, err := p.Probe(ok)
		if err != nil {
			t.Fatalf("compression %d, 16384 tiles of 32x32: %v", compression, err)
		}
		if err := p.Process(ok, row); err != nil {
			t.Fatalf("compression %d, 16384 tiles of 32x32: %v", compression, err)
		}
		if pixels := int64(4096 * 4096 * 3); info.WorkBytes <= pixels {
			t.Fatalf("compression %d: WorkBytes %d, not above the pixels' %d", compression, info.WorkBytes, pixels)
		}
	}
}

// TestBMPWithoutItsRowsIsRefusedAtTheHeader: an uncompressed BMP's header declaring 7000x7000
// with no pixel rows after it (54 bytes) is refused by Probe; the codec allocated its whole
// canvas, 196 MB, before finding the rows missing. A whole BMP still decodes.
func TestBMPWithoutItsRowsIsRefusedAtTheHeader(t *testing.T) {
	p := mustNew(t, Options{Width: 32, Height: 32, Resize: 40, MaxPixels: 1 << 26})
	bmpHeader := func(w, h int) []byte {
		le := binary.LittleEndian
		b := []byte("BM")
		b = le.AppendUint32(b, uint32(54+w*h*4))
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, 54) // pixel data offset
		b = le.AppendUint32(b, 40) // BITMAPINFOHEADER
		b = le.AppendUint32(b, uint32(w))
		b = le.AppendUint32(b, uint32(h))
		b = le.AppendUint16(b, 1)
		b = le.AppendUint16(b, 32) // bits per pixel
		b = le.AppendUint32(b, 0)  // BI_RGB
		b = le.AppendUint32(b, uint32(w*h*4))
		return append(b, make([]byte, 16)...)
	}
	if _, err := p.Probe(bmpHeader(7000, 7000)); !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "need") {
		t.Fatalf("a 7000x7000 BMP header alone: %v; want refused for its missing rows", err)
	}
	whole := append(bmpHeader(40, 30), make([]byte, 40*30*4)...)
	if err := p.Process(whole, make([]float32, p.SlotLen())); err != nil {
		t.Fatalf("a whole 40x30 BMP: %v", err)
	}
}

// TestAnimatedWebPIsUnsupported: a WebP whose VP8X chunk declares an animation gets
// ErrUnsupportedFormat (415) with a message that says so, from Probe and from Process; the
// codec decodes no animation and said "invalid format" (400).
func TestAnimatedWebPIsUnsupported(t *testing.T) {
	p := mustNew(t, Options{Width: 32, Height: 32, Resize: 40})
	le := binary.LittleEndian
	chunk := func(b []byte, fourcc string, payload []byte) []byte {
		b = append(b, fourcc...)
		b = le.AppendUint32(b, uint32(len(payload)))
		b = append(b, payload...)
		if len(payload)%2 == 1 {
			b = append(b, 0)
		}
		return b
	}
	vp8x := []byte{0x02, 0, 0, 0, 63, 0, 0, 47, 0, 0} // the animation flag; a 64x48 canvas
	body := chunk(chunk(nil, "VP8X", vp8x), "ANIM", make([]byte, 6))
	body = chunk(body, "ANMF", make([]byte, 16))
	webp := append(le.AppendUint32([]byte("RIFF"), uint32(4+len(body))), "WEBP"...)
	webp = append(webp, body...)
	if _, err := p.Probe(webp); !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "animated") {
		t.Fatalf("Probe: %v; want an unsupported animated WebP", err)
	}
	if err := p.Process(webp, make([]float32, p.SlotLen())); !errors.Is(err, ErrUnsupportedFormat) {
		t.Fatalf("Process: %v; want an unsupported animated WebP", err)
	}
}
