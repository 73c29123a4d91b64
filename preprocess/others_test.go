package preprocess

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"slices"
	"testing"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
)

// Images of the formats clients send besides JPEG, PNG and WebP, written in
// the test by Go's encoders (and a few by hand where the encoders cannot
// express a case), checked against what Pillow makes of them: the reasoning
// is encoded as an RGB image whose PNG (a path pinned to torchvision by the
// goldens) must give the same slot bit for bit.

// smoothRGB is a w x h test picture with many colors.
func smoothRGB(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetRGBA(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x*y)%251 + 2), 255})
		}
	}
	return m
}

// paletteOf returns an image with at most 256 colors and its palette.
func palettedOf(w, h int) *image.Paletted {
	pal := make(color.Palette, 0, 256)
	for i := range 216 {
		pal = append(pal, color.RGBA{uint8(i % 6 * 51), uint8(i / 6 % 6 * 51), uint8(i / 36 * 51), 255})
	}
	m := image.NewPaletted(image.Rect(0, 0, w, h), pal)
	for y := range h {
		for x := range w {
			m.SetColorIndex(x, y, uint8((x/3+y/5*7)%len(pal)))
		}
	}
	return m
}

// rgbOf converts any test image to its expected RGB (alpha dropped).
func rgbOf(img image.Image) *image.RGBA {
	b := img.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := range b.Dy() {
		for x := range b.Dx() {
			q := nrgbOf(img.At(b.Min.X+x, b.Min.Y+y))
			out.SetRGBA(x, y, color.RGBA{q[0], q[1], q[2], 255})
		}
	}
	return out
}

func encodeGIF(tb testing.TB, m *image.Paletted) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := gif.Encode(&b, m, nil); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func encodeBMP(tb testing.TB, m image.Image) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := bmp.Encode(&b, m); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func encodeTIFF(tb testing.TB, m image.Image, c tiff.CompressionType) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := tiff.Encode(&b, m, &tiff.Options{Compression: c}); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// tiffWithOrientation writes an uncompressed 8-bit RGB TIFF (one strip)
// carrying Orientation o, which x/image/tiff's encoder cannot write.
func tiffWithOrientation(m *image.RGBA, o int) []byte {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	pix := make([]byte, 0, 3*w*h)
	for y := range h {
		for x := range w {
			c := m.RGBAAt(x, y)
			pix = append(pix, c.R, c.G, c.B)
		}
	}
	le := binary.LittleEndian
	type entry struct{ tag, typ, count, value uint32 }
	const ifdAt = 8
	entries := []entry{
		{256, 4, 1, uint32(w)}, {257, 4, 1, uint32(h)}, {258, 3, 3, 0 /* offset, set below */},
		{259, 3, 1, 1}, {262, 3, 1, 2}, {273, 4, 1, 0 /* strip offset */}, {274, 3, 1, uint32(o)},
		{277, 3, 1, 3}, {278, 4, 1, uint32(h)}, {279, 4, 1, uint32(len(pix))},
	}
	ifdLen := 2 + 12*len(entries) + 4
	bpsAt := ifdAt + ifdLen
	stripAt := bpsAt + 6
	entries[2].value = uint32(bpsAt)
	entries[5].value = uint32(stripAt)
	out := make([]byte, stripAt+len(pix))
	copy(out, "II*\x00")
	le.PutUint32(out[4:], ifdAt)
	le.PutUint16(out[ifdAt:], uint16(len(entries)))
	for i, e := range entries {
		q := out[ifdAt+2+12*i:]
		le.PutUint16(q, uint16(e.tag))
		le.PutUint16(q[2:], uint16(e.typ))
		le.PutUint32(q[4:], e.count)
		if e.typ == 3 && e.count == 1 {
			le.PutUint16(q[8:], uint16(e.value))
		} else {
			le.PutUint32(q[8:], e.value)
		}
	}
	for i := range 3 {
		le.PutUint16(out[bpsAt+2*i:], 8)
	}
	copy(out[stripAt:], pix)
	return out
}

// orientedRGB applies EXIF orientation o to m the way the EXIF
// specification defines it (independently of this package's orient).
func orientedRGB(m *image.RGBA, o int) *image.RGBA {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	ow, oh := w, h
	if o >= 5 {
		ow, oh = h, w
	}
	out := image.NewRGBA(image.Rect(0, 0, ow, oh))
	for y := range oh {
		for x := range ow {
			var sx, sy int
			switch o {
			case 1:
				sx, sy = x, y
			case 2: // mirrored horizontally
				sx, sy = w-1-x, y
			case 3: // rotated 180
				sx, sy = w-1-x, h-1-y
			case 4: // mirrored vertically
				sx, sy = x, h-1-y
			case 5: // transposed
				sx, sy = y, x
			case 6: // display = stored rotated 90 degrees clockwise
				sx, sy = y, h-1-x
			case 7: // transversed
				sx, sy = w-1-y, h-1-x
			case 8: // display = stored rotated 90 degrees counter-clockwise
				sx, sy = w-1-y, x
			}
			out.SetRGBA(x, y, m.RGBAAt(sx, sy))
		}
	}
	return out
}

// craftedGIF is a 4x3 GIF89a whose only frame, 2x1 at (1, 1), has pixels 1
// and 2 of a 4-color global table, optionally a local table and a
// transparency index (the cases checked against Pillow 9.4 when this test
// was written).
func craftedGIF(transparent int, local bool) []byte {
	b := []byte("GIF89a")
	b = append(b, 4, 0, 3, 0, 0x81, 0, 0)
	b = append(b, 10, 20, 30, 200, 100, 50, 1, 2, 3, 90, 80, 70)
	if transparent >= 0 {
		b = append(b, 0x21, 0xF9, 4, 1, 0, 0, byte(transparent), 0)
	}
	b = append(b, 0x2C, 1, 0, 1, 0, 2, 0, 1, 0)
	if local {
		b = append(b, 0x81, 11, 12, 13, 21, 22, 23, 31, 32, 33, 41, 42, 43)
	} else {
		b = append(b, 0)
	}
	// LZW minimum code size 2; codes clear, 1, 2, end (3 bits each).
	b = append(b, 2, 2, 0x8C, 0x0A, 0, ';')
	return b
}

// pillowGIF is what Pillow 9.4's convert('RGB') gives for craftedGIF: the
// frame on the logical screen, filled with the transparency index (else 0);
// the frame's palette; the transparent entry keeps its RGB.
func pillowGIF(transparent int, local bool) *image.RGBA {
	table := [][3]uint8{{10, 20, 30}, {200, 100, 50}, {1, 2, 3}, {90, 80, 70}}
	if local {
		table = [][3]uint8{{11, 12, 13}, {21, 22, 23}, {31, 32, 33}, {41, 42, 43}}
	}
	fill := 0
	if transparent >= 0 {
		fill = transparent
	}
	out := image.NewRGBA(image.Rect(0, 0, 4, 3))
	for y := range 3 {
		for x := range 4 {
			i := fill
			if y == 1 && (x == 1 || x == 2) {
				i = x // pixels 1 and 2
			}
			c := table[i]
			out.SetRGBA(x, y, color.RGBA{c[0], c[1], c[2], 255})
		}
	}
	return out
}

// otherCases are the generated GIF, BMP and TIFF files with the RGB or gray
// image Pillow's convert('RGB') makes of them.
func otherCases(tb testing.TB, w, h int) []struct {
	name string
	data []byte
	want image.Image
} {
	rgb := smoothRGB(w, h)
	pal := palettedOf(w, h)
	gray := image.NewGray(rgb.Rect)
	gray16 := image.NewGray16(rgb.Rect)
	nrgba := image.NewNRGBA(rgb.Rect)
	rgba64 := image.NewRGBA64(rgb.Rect)
	for y := range h {
		for x := range w {
			c := rgb.RGBAAt(x, y)
			gray.SetGray(x, y, color.Gray{c.G})
			gray16.SetGray16(x, y, color.Gray16{uint16(c.G)<<8 | uint16(c.R)})
			nrgba.SetNRGBA(x, y, color.NRGBA{c.R, c.G, c.B, uint8(x ^ y)})
			rgba64.SetRGBA64(x, y, color.RGBA64{uint16(c.R)<<8 | 0x55, uint16(c.G)<<8 | 0xAA, uint16(c.B) << 8, 0xFFFF})
		}
	}
	type tc = struct {
		name string
		data []byte
		want image.Image
	}
	cases := []tc{
		{"gif palette", encodeGIF(tb, pal), rgbOf(pal)},
		{"bmp 24-bit", encodeBMP(tb, rgb), rgb},
		{"bmp 32-bit alpha", encodeBMP(tb, nrgba), nil},
		{"bmp 8-bit palette", encodeBMP(tb, pal), rgbOf(pal)},
		{"bmp 8-bit gray", encodeBMP(tb, gray), gray},
		{"tiff rgb", encodeTIFF(tb, rgb, tiff.Uncompressed), rgb},
		{"tiff rgb deflate", encodeTIFF(tb, rgb, tiff.Deflate), rgb},
		{"tiff rgba unassociated", encodeTIFF(tb, nrgba, tiff.Deflate), nil},
		{"tiff gray", encodeTIFF(tb, gray, tiff.Uncompressed), gray},
		{"tiff gray16", encodeTIFF(tb, gray16, tiff.Deflate), gray},
		{"tiff rgb16", encodeTIFF(tb, rgba64, tiff.Uncompressed), rgb},
		{"tiff palette", encodeTIFF(tb, pal, tiff.Deflate), rgbOf(pal)},
	}
	// RGBA with alpha: the RGB of every pixel, alpha dropped.
	drop := image.NewRGBA(rgb.Rect)
	for y := range h {
		for x := range w {
			c := nrgba.NRGBAAt(x, y)
			drop.SetRGBA(x, y, color.RGBA{c.R, c.G, c.B, 255})
		}
	}
	cases[2].want = drop
	cases[7].want = drop
	// RGBA with associated (premultiplied) alpha: Pillow divides it out (v*255/a, clipped,
	// black where a is 0) before alpha is dropped.
	pre, unpre := image.NewRGBA(rgb.Rect), image.NewRGBA(rgb.Rect)
	for y := range h {
		for x := range w {
			c, a := rgb.RGBAAt(x, y), (x*7+y*3)%256
			p := color.RGBA{uint8(int(c.R) * a / 255), uint8(int(c.G) * a / 255), uint8(int(c.B) * a / 255), uint8(a)}
			pre.SetRGBA(x, y, p)
			u := color.RGBA{A: 255}
			if a > 0 {
				u.R, u.G, u.B = uint8(min(int(p.R)*255/a, 255)), uint8(min(int(p.G)*255/a, 255)), uint8(min(int(p.B)*255/a, 255))
			}
			unpre.SetRGBA(x, y, u)
		}
	}
	cases = append(cases, tc{"tiff rgba associated", encodeTIFF(tb, pre, tiff.Deflate), unpre})
	for o := 1; o <= 8; o++ {
		cases = append(cases, tc{"tiff orientation " + string(rune('0'+o)), tiffWithOrientation(rgb, o), orientedRGB(rgb, o)})
	}
	for _, tr := range []int{-1, 3, 1} {
		for _, local := range []bool{false, true} {
			name := "gif crafted, transparency " + string(rune('0'+tr+1)) + map[bool]string{false: "", true: ", local table"}[local]
			cases = append(cases, tc{name, craftedGIF(tr, local), pillowGIF(tr, local)})
		}
	}
	return cases
}

func TestOtherFormatsMatchPillow(t *testing.T) {
	opts := []Options{{Layout: NHWC}, {Width: 40, Height: 30, Resize: 50, Layout: NHWC}, {Width: 8, Height: 6, Mode: ModeStretch, Layout: NHWC}}
	k := 0
	for _, size := range [][2]int{{301, 203}, {77, 120}} {
		for _, c := range otherCases(t, size[0], size[1]) {
			ref := encodePNG(t, c.want)
			for _, o := range opts {
				for _, fresh := range []bool{false, true} {
					if k++; raceSkips(k - 1) {
						continue
					}
					p := mustNew(t, o)
					p.fresh = fresh
					want := make([]byte, p.SlotLen())
					mustProcessU8(t, p, ref, want)
					got := make([]byte, p.SlotLen())
					if err := p.ProcessUint8(c.data, got); err != nil {
						t.Fatalf("%dx%d %s: %v", size[0], size[1], c.name, err)
					}
					if !bytes.Equal(got, want) {
						m, x := diff(got, want)
						t.Errorf("%dx%d %s %dx%d/%d %s fresh=%v: differs from Pillow's reading: mean %.5f max %.4f",
							size[0], size[1], c.name, o.Width, o.Height, o.Resize, o.Mode, fresh, m, x)
					}
				}
			}
		}
	}
}

func TestOtherFormatsErrors(t *testing.T) {
	p := mustNew(t, Options{})
	small := mustNew(t, Options{MaxPixels: 1000})
	dst := make([]byte, p.SlotLen())
	rgb := smoothRGB(60, 40)
	bmp24 := encodeBMP(t, rgb)
	rle := bytes.Clone(encodeBMP(t, palettedOf(60, 40)))
	rle[30] = 1 // BI_RLE8: x/image/bmp does not decode it
	cases := []struct {
		name string
		p    *Preprocessor
		data []byte
		want error
	}{
		{"gif over max_pixels", small, encodeGIF(t, palettedOf(60, 40)), ErrTooLarge},
		{"bmp over max_pixels", small, bmp24, ErrTooLarge},
		{"tiff over max_pixels", small, encodeTIFF(t, rgb, tiff.Deflate), ErrTooLarge},
		{"bmp rle8", p, rle, ErrUnsupportedFormat},
		{"gif frame outside the screen", p, func() []byte { b := craftedGIF(-1, false); b[6] = 2; return b }(), ErrBadImage},
		{"gif no color table", p, func() []byte {
			b := craftedGIF(-1, false)
			b[10] = 0
			return append(b[:13], b[25:]...)
		}(), ErrBadImage},
		{"tiff magic only", p, []byte("II*\x00"), ErrBadImage},
		{"tiff planar", p, handTIFF(8, 4, [][3]uint32{{258, 3, 8}, {259, 3, 1}, {262, 3, 2}, {277, 3, 3}, {284, 3, 2}}, make([]byte, 3*8*4)), ErrUnsupportedFormat},
		{"bmp header only", p, bmp24[:54], ErrBadImage},
	}
	for _, c := range cases {
		err := c.p.ProcessUint8(c.data, dst)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		_, perr := c.p.Probe(c.data)
		if pc, pcl := errClass(perr), errClass(err); !probeAgrees(pc, pcl) {
			t.Errorf("%s: Probe %v, Process %v", c.name, perr, err)
		}
	}
}

// handTIFF is a little-endian TIFF of one strip holding data, with width, height, the strip
// tags and the given tags (tag, type, value; count 1, in ascending order, all below 273 or
// between 274 and 278, or above 279).
func handTIFF(w, h int, tags [][3]uint32, data []byte) []byte {
	all := append([][3]uint32{{256, 4, uint32(w)}, {257, 4, uint32(h)}}, tags...)
	all = append(all, [3]uint32{273, 4, 0}, [3]uint32{278, 4, uint32(h)}, [3]uint32{279, 4, uint32(len(data))})
	slices.SortFunc(all, func(a, b [3]uint32) int { return int(a[0]) - int(b[0]) })
	le := binary.LittleEndian
	b := le.AppendUint32([]byte("II*\x00"), 8)
	b = le.AppendUint16(b, uint16(len(all)))
	dataAt := uint32(8 + 2 + 12*len(all) + 4)
	for _, e := range all {
		if e[0] == 273 {
			e[2] = dataAt
		}
		b = le.AppendUint16(b, uint16(e[0]))
		b = le.AppendUint16(b, uint16(e[1]))
		b = le.AppendUint32(b, 1)
		if e[1] == 3 {
			b = le.AppendUint16(b, uint16(e[2]))
			b = le.AppendUint16(b, 0)
		} else {
			b = le.AppendUint32(b, e[2])
		}
	}
	b = le.AppendUint32(b, 0)
	return append(b, data...)
}

// TestCCITTAsLibtiff: CCITT (fax) data codes white and black runs; libtiff, and so Pillow,
// writes a white run as 0 bits and then reads the bits by the photometric tag, so that with
// BlackIsZero (what Pillow writes its group3/group4 files with) white runs are black.
// x/image/tiff made them white: every Pillow-written fax file came out as a negative. Each
// row of the Group 4 data here is one V0 code (a 1 bit): a row the same as the one above,
// which for the first row is all white runs.
func TestCCITTAsLibtiff(t *testing.T) {
	p := mustNew(t, Options{Width: 16, Height: 8, Mode: ModeStretch, Layout: NHWC})
	got := make([]byte, p.SlotLen())
	for _, c := range []struct {
		photometric uint32
		want        byte
	}{{0, 255}, {1, 0}} {
		tif := handTIFF(16, 8, [][3]uint32{{258, 3, 1}, {259, 3, 4}, {262, 3, c.photometric}, {277, 3, 1}}, []byte{0xff})
		if err := p.ProcessUint8(tif, got); err != nil {
			t.Fatalf("photometric %d: %v", c.photometric, err)
		}
		for i, v := range got {
			if v != c.want {
				t.Fatalf("photometric %d: value %d is %d, want %d (Pillow's reading)", c.photometric, i, v, c.want)
			}
		}
	}
}

// TestPlanarGrayTIFFDecodes: with one sample a pixel, PlanarConfiguration 2 is the chunky
// layout; such a file decodes (only multi-sample planar files are refused).
func TestPlanarGrayTIFFDecodes(t *testing.T) {
	p := mustNew(t, Options{Width: 8, Height: 4, Mode: ModeStretch, Layout: NHWC})
	tif := handTIFF(8, 4, [][3]uint32{{258, 3, 8}, {259, 3, 1}, {262, 3, 1}, {277, 3, 1}, {284, 3, 2}}, bytes.Repeat([]byte{77}, 32))
	got := make([]byte, p.SlotLen())
	if err := p.ProcessUint8(tif, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 77 {
			t.Fatalf("value %d is %d, want 77", i, v)
		}
	}
}
