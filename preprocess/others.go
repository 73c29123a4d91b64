package preprocess

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"io"

	"github.com/disintegration/imaging"
	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
)

// GIF (first frame), BMP and TIFF: formats clients send, decoded through
// github.com/disintegration/imaging (the design card's image library; its
// Decode is image.Decode over the standard library's and x/image's codecs).
// As for the fast formats, the header's dimensions are checked first
// (DecodeConfig) and Probe's PeakBytes counts the decoder's canvas.
//
// imaging's auto-orientation reads EXIF from JPEG data only, so it is not
// asked for: it would do nothing here but run a goroutine and copy the input
// through a pipe. A TIFF's own Orientation tag (274 in its first IFD) is
// applied here, once; Pillow 9.4 applies it twice (libtiff orients the image
// on load, then ImageOps.exif_transpose again), which is not reproduced.
//
// Pillow's convert('RGB'), as for PNG: a GIF's first frame is drawn on the
// logical screen, the area outside the frame filled with the transparency
// index when there is one, else index 0; the frame's palette (local, else
// global) is expanded and the transparent index keeps its RGB (Go's decoder
// replaces it with transparent black: the color is read from the file's
// table instead). BMP and TIFF alpha is dropped, palettes expanded, 16-bit
// samples keep their high byte, gray stays one channel.

// byteReader serves data to image.Decode without copies: Peek keeps
// image.Decode from wrapping it in a bufio.Reader, ReadAt lets the TIFF
// decoder read strips in place instead of buffering the whole file.
type byteReader struct {
	b   []byte
	off int
}

func (r *byteReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *byteReader) ReadByte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	r.off++
	return r.b[r.off-1], nil
}

func (r *byteReader) Peek(n int) ([]byte, error) {
	if rest := len(r.b) - r.off; n > rest {
		return r.b[r.off:], io.EOF
	}
	return r.b[r.off : r.off+n], nil
}

func (r *byteReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(r.b)) {
		return 0, io.EOF
	}
	n := copy(p, r.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// otherPlan is what the header of a GIF, BMP or TIFF declares.
type otherPlan struct {
	format   format
	w, h     int // canvas (a GIF's logical screen)
	channels int // samples per pixel as stored
	depth    int // bits per sample
	ch       int // channels after conversion: 1 or 3
	canvas   int64
	orient   int
	gif      gifFrame
	// compression of a TIFF (tag 259): 1 none
	compression uint32
	// photometric interpretation of a TIFF (tag 262): 0 WhiteIsZero, 1 BlackIsZero, ...
	photometric uint32
	// segments: a TIFF's strips or tiles, each read (and, compressed,
	// inflated by a decompressor of its own) on its own
	segments int64
}

func (f format) name() string {
	switch f {
	case formatGIF:
		return "GIF"
	case formatBMP:
		return "BMP"
	case formatTIFF:
		return "TIFF"
	}
	return "image"
}

func (p *Preprocessor) planOther(f format, data []byte) (otherPlan, error) {
	pl := otherPlan{format: f, orient: 1, ch: 3, channels: 3, depth: 8}
	var (
		cfg image.Config
		err error
	)
	switch f {
	case formatGIF:
		cfg, err = gif.DecodeConfig(bytes.NewReader(data))
	case formatBMP:
		cfg, err = bmp.DecodeConfig(bytes.NewReader(data))
	case formatTIFF:
		if pc, ok := tiffTag(data, 284); ok && pc == 2 && tiffSamples(data) > 1 {
			// x/image/tiff reads chunky (interleaved) samples only, and took
			// the planes for a file cut short.
			return pl, fmt.Errorf("cannot decode TIFF: separate color planes (PlanarConfiguration 2) are not supported: %w", ErrUnsupportedFormat)
		}
		cfg, err = tiff.DecodeConfig(&byteReader{b: data})
	}
	if err != nil {
		return pl, otherError(f, "header", err)
	}
	if err := p.checkPixels(f.name(), cfg.Width, cfg.Height); err != nil {
		return pl, err
	}
	pl.w, pl.h = cfg.Width, cfg.Height
	wh := int64(pl.w) * int64(pl.h)
	switch f {
	case formatGIF:
		pl.channels = 1
		g, ok := parseGIF(data)
		if !ok {
			return pl, fmt.Errorf("cannot decode GIF header: no image descriptor: %w", ErrBadImage)
		}
		pl.gif = g
		pl.canvas = int64(g.frame.Dx()) * int64(g.frame.Dy())
	case formatBMP:
		bpp := int(data[28]) | int(data[29])<<8
		if err := bmpWhole(data, pl.w, pl.h, bpp); err != nil {
			return pl, err
		}
		switch {
		case bpp <= 8:
			pl.channels, pl.depth, pl.canvas = 1, bpp, wh
		case bpp == 24:
			pl.canvas = 4*wh + int64(3*pl.w+3)
		default:
			pl.channels, pl.canvas = 4, 4*wh
		}
	case formatTIFF:
		if !tiffIFD0Whole(data) {
			return pl, fmt.Errorf("cannot decode TIFF header: the first IFD is cut short: %w", ErrBadImage)
		}
		pl.orient = exifOrientation(data)
		pl.compression = 1
		if c, ok := tiffTag(data, 259); ok {
			pl.compression = c
		}
		switch pl.compression {
		case 0, 1, 3, 4, 5, 8, 32773, 32946: // what x/image/tiff decodes
		default:
			return pl, fmt.Errorf("cannot decode TIFF: compression %d is not supported: %w", pl.compression, ErrUnsupportedFormat)
		}
		pl.photometric, _ = tiffTag(data, 262)
		pl.depth = 8
		switch cfg.ColorModel {
		case color.GrayModel:
			pl.channels, pl.ch, pl.canvas = 1, 1, wh
		case color.Gray16Model:
			pl.channels, pl.depth, pl.ch, pl.canvas = 1, 16, 1, 2*wh
		case color.RGBAModel, color.NRGBAModel:
			pl.canvas = 4 * wh
		case color.RGBA64Model, color.NRGBA64Model:
			pl.depth, pl.canvas = 16, 8*wh
		default: // a palette
			pl.channels, pl.canvas = 1, wh
		}
		if spp, ok := tiffTag(data, 277); ok && spp >= 1 && spp <= 4 { // SamplesPerPixel
			pl.channels = int(spp)
		}
		n, ok := tiffTagCount(data, 324) // TileOffsets
		if !ok {
			n, _ = tiffTagCount(data, 273) // StripOffsets
		}
		pl.segments = int64(n)
		if limit := max(tiffMaxSegments, wh/tiffMinSegmentPixels); pl.segments > limit {
			return pl, fmt.Errorf("cannot decode TIFF: %d strips or tiles for %dx%d pixels (at most %d: strips or tiles of %d pixels or more on average): %w",
				pl.segments, pl.w, pl.h, limit, tiffMinSegmentPixels, ErrUnsupportedFormat)
		}
	}
	return pl, nil
}

// bmpWhole refuses an uncompressed BMP (BI_RGB or BI_BITFIELDS) whose pixel
// rows the file does not hold: the codec allocates the whole canvas before
// it reads them, 196 MB for a 54-byte header declaring 7000x7000.
func bmpWhole(data []byte, w, h, bpp int) error {
	if len(data) < 34 {
		return nil // the codec's header check answers
	}
	le := func(b []byte) int64 { return int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16 | int64(b[3])<<24 }
	if c := le(data[30:]); c != 0 && c != 3 {
		return nil // compressed: the codec refuses what it cannot decode
	}
	need := le(data[10:]) + (int64(bpp)*int64(w)+31)/32*4*int64(h)
	if int64(len(data)) < need {
		return fmt.Errorf("cannot decode BMP: its %dx%d pixels need %d bytes, the file has %d: %w", w, h, need, len(data), ErrBadImage)
	}
	return nil
}

// otherError maps a codec's error to this package's classes: features the
// codec lacks (BMP compression, TIFF color models) are unsupported formats.
func otherError(f format, what string, err error) error {
	var tu tiff.UnsupportedError
	if errors.Is(err, bmp.ErrUnsupported) || errors.As(err, &tu) {
		return fmt.Errorf("cannot decode %s %s: %v: %w", f.name(), what, err, ErrUnsupportedFormat)
	}
	return fmt.Errorf("cannot decode %s %s: %v: %w", f.name(), what, err, ErrBadImage)
}

// decodeOther decodes a GIF's first frame, a BMP or a TIFF and resamples it.
func (p *Preprocessor) decodeOther(f format, data []byte, s *scratch, out sink) error {
	pl, err := p.planOther(f, data)
	if err != nil {
		return err
	}
	img, err := imaging.Decode(&byteReader{b: data})
	if err != nil {
		return otherError(f, "image", err)
	}
	if b := img.Bounds(); f != formatGIF && (b.Dx() != pl.w || b.Dy() != pl.h) {
		return fmt.Errorf("cannot decode %s: decoded %dx%d, header %dx%d: %w", f.name(), b.Dx(), b.Dy(), pl.w, pl.h, ErrBadImage)
	}
	if f == formatTIFF {
		tiffAsLibtiff(img, &pl)
	}
	var r imageRows
	if err := r.init(img, pl.w, pl.h); err != nil {
		return fmt.Errorf("cannot decode %s: %v: %w", f.name(), err, ErrBadImage)
	}
	if f == formatGIF {
		if err := r.gifCanvas(&pl.gif); err != nil {
			return fmt.Errorf("cannot decode GIF: %v: %w", err, ErrBadImage)
		}
	}
	return p.resampleRows(&r, pl.orient, s, out)
}

// tiffAsLibtiff makes what x/image/tiff decoded what libtiff, and so
// Pillow, reads from the same file, where the two differ:
//
//   - CCITT (Group 3 and 4) data codes white and black runs; libtiff writes
//     a white run as 0 bits whatever the photometric tag says, so with
//     BlackIsZero (which Pillow writes its fax files with) white runs are
//     black. x/image/tiff always makes them white.
//   - RGBA with associated alpha (ExtraSamples 1) is premultiplied; Pillow
//     (raw mode "RGBa") divides it out before convert('RGB') drops alpha:
//     v*255/a, clipped to 255, and black where alpha is 0. x/image/tiff
//     returns the premultiplied values (as image.RGBA, which its RGB files
//     without alpha also decode to, with alpha 255: left as they are).
func tiffAsLibtiff(img image.Image, pl *otherPlan) {
	switch m := img.(type) {
	case *image.Gray:
		if (pl.compression == 3 || pl.compression == 4) && pl.photometric == 1 {
			for i := range m.Pix {
				m.Pix[i] = 255 - m.Pix[i]
			}
		}
	case *image.RGBA:
		for i := 0; i+3 < len(m.Pix); i += 4 {
			q := m.Pix[i : i+4 : i+4]
			switch a := int(q[3]); a {
			case 255:
			case 0:
				q[0], q[1], q[2] = 0, 0, 0
			default:
				q[0] = uint8(min(int(q[0])*255/a, 255))
				q[1] = uint8(min(int(q[1])*255/a, 255))
				q[2] = uint8(min(int(q[2])*255/a, 255))
			}
		}
	}
}

// imageRows reads 8-bit RGB or gray rows out of a decoded image.Image, as
// Pillow's convert('RGB') sees them, without converting the whole canvas.
type imageRows struct {
	img   image.Image
	w, h  int // canvas
	ch    int // 1 gray, 3 RGB
	rect  image.Rectangle
	pal   [256][3]uint8 // palette (entries past its end black)
	fill  uint8         // palette index outside rect (a GIF's frame)
	cmyk  bool
	which int // kind of img, below
}

const (
	rowsGray = iota
	rowsGray16
	rowsRGBX // RGBA or NRGBA: direct, 4 bytes a pixel
	rowsRGBX64
	rowsPaletted
	rowsCMYK
	rowsYCbCr420 // WebP's Y'CbCr
	rowsGeneric
)

func (r *imageRows) init(img image.Image, w, h int) error {
	r.img, r.w, r.h, r.ch, r.rect = img, w, h, 3, img.Bounds()
	switch m := img.(type) {
	case *image.Gray:
		r.which, r.ch = rowsGray, 1
	case *image.Gray16:
		r.which, r.ch = rowsGray16, 1
	case *image.RGBA, *image.NRGBA:
		r.which = rowsRGBX
	case *image.RGBA64, *image.NRGBA64:
		r.which = rowsRGBX64
	case *image.Paletted:
		r.which = rowsPaletted
		for i, c := range m.Palette {
			if i >= 256 {
				break
			}
			r.pal[i] = nrgbOf(c)
		}
	case *image.CMYK:
		r.which = rowsCMYK
	case *image.YCbCr:
		if m.SubsampleRatio == image.YCbCrSubsampleRatio420 {
			r.which = rowsYCbCr420
		} else {
			r.which = rowsGeneric
		}
	default:
		r.which = rowsGeneric
	}
	if r.which != rowsPaletted && (r.rect.Min != image.Point{} || r.rect.Dx() != w || r.rect.Dy() != h) {
		return fmt.Errorf("image bounds %v for a %dx%d canvas", r.rect, w, h)
	}
	return nil
}

// gifCanvas sets up a GIF's first frame as Pillow draws it: on the logical
// screen, filled with the transparency index (else 0) outside the frame,
// with the frame's palette read from the file (Go's decoder blanks the
// transparent entry).
func (r *imageRows) gifCanvas(g *gifFrame) error {
	m, ok := r.img.(*image.Paletted)
	if !ok || m.Rect != g.frame {
		return fmt.Errorf("first frame %v, expected %v", r.rect, g.frame)
	}
	r.pal = [256][3]uint8{}
	for i := range g.ncolors {
		r.pal[i] = [3]uint8{g.table[3*i], g.table[3*i+1], g.table[3*i+2]}
	}
	if g.transparent >= 0 {
		r.fill = uint8(g.transparent)
	}
	return nil
}

// direct returns row y when its bytes can be resampled as they are.
func (r *imageRows) direct(y int) (row []uint8, bpp int, ok bool) {
	switch m := r.img.(type) {
	case *image.Gray:
		return m.Pix[y*m.Stride : y*m.Stride+r.w], 1, true
	case *image.RGBA:
		return m.Pix[y*m.Stride : y*m.Stride+4*r.w], 4, true
	case *image.NRGBA:
		return m.Pix[y*m.Stride : y*m.Stride+4*r.w], 4, true
	}
	return nil, 0, false
}

// convert writes columns [x0, x1) of canvas row y into d, ch bytes a pixel.
func (r *imageRows) convert(d []uint8, y, x0, x1 int) {
	n := x1 - x0
	d = d[:n*r.ch]
	switch r.which {
	case rowsGray, rowsRGBX:
		row, bpp, _ := r.direct(y)
		if bpp == 1 {
			copy(d, row[x0:x1])
			return
		}
		for i := range n {
			q := row[4*(x0+i):]
			d[3*i], d[3*i+1], d[3*i+2] = q[0], q[1], q[2]
		}
	case rowsGray16:
		m := r.img.(*image.Gray16)
		row := m.Pix[y*m.Stride:]
		for i := range n {
			d[i] = row[2*(x0+i)]
		}
	case rowsRGBX64:
		var pix []uint8
		var stride int
		switch m := r.img.(type) {
		case *image.RGBA64:
			pix, stride = m.Pix, m.Stride
		case *image.NRGBA64:
			pix, stride = m.Pix, m.Stride
		}
		row := pix[y*stride:]
		for i := range n {
			q := row[8*(x0+i):]
			d[3*i], d[3*i+1], d[3*i+2] = q[0], q[2], q[4]
		}
	case rowsPaletted:
		m := r.img.(*image.Paletted)
		for i := range n {
			idx := r.fill
			if p := (image.Point{X: x0 + i, Y: y}); p.In(m.Rect) {
				idx = m.Pix[m.PixOffset(p.X, p.Y)]
			}
			q := &r.pal[idx]
			d[3*i], d[3*i+1], d[3*i+2] = q[0], q[1], q[2]
		}
	case rowsCMYK:
		// Pillow's cmyk2rgb on plain (not inverted) CMYK.
		m := r.img.(*image.CMYK)
		row := m.Pix[y*m.Stride:]
		for i := range n {
			q := row[4*(x0+i):]
			nk := 255 - int(q[3])
			d[3*i] = uint8(nk - muldiv255(int(q[0]), nk))
			d[3*i+1] = uint8(nk - muldiv255(int(q[1]), nk))
			d[3*i+2] = uint8(nk - muldiv255(int(q[2]), nk))
		}
	case rowsYCbCr420:
		m := r.img.(*image.YCbCr)
		webpYUVRow(d, m.Y, m.Cb, m.Cr, m.YStride, m.CStride, r.w, r.h, y, x0, x1)
	default:
		b := r.rect.Min
		for i := range n {
			c := r.img.At(b.X+x0+i, b.Y+y)
			if r.ch == 1 {
				d[i] = color.GrayModel.Convert(c).(color.Gray).Y
				continue
			}
			q := nrgbOf(c)
			d[3*i], d[3*i+1], d[3*i+2] = q[0], q[1], q[2]
		}
	}
}

// resampleRows resamples the canvas of r: row by row into the horizontal
// pass (only the rows and columns it reads are converted), or, for an EXIF
// orientation other than 1, through a converted and reoriented copy.
func (p *Preprocessor) resampleRows(r *imageRows, orientation int, s *scratch, out sink) error {
	g := source{w: r.w, h: r.h, ch: r.ch, x1: float64(r.w), y1: float64(r.h), dispW: r.w, dispH: r.h}
	if orientation != 1 {
		s.dec = s.buf(r.w * r.h * r.ch)
		all := *s.dec
		for y := range r.h {
			r.convert(all[y*r.w*r.ch:], y, 0, r.w)
		}
		g.pix, g.stride, g.bpp = all, r.w*r.ch, r.ch
		if orientation >= 5 {
			g.dispW, g.dispH = r.h, r.w
		}
		s.rot = s.buf(r.w * r.h * r.ch)
		src := orient(&g, orientation, *s.rot)
		return p.resample(&src, s, out)
	}
	j := p.newJob(s, &g)
	s.dec = s.buf((j.xLast - j.xFirst) * r.ch)
	row := *s.dec
	for y := j.yFirst; y < j.yLast; y++ {
		if d, bpp, ok := r.direct(y); ok {
			j.row(y, d, bpp, 0)
			continue
		}
		r.convert(row, y, j.xFirst, j.xLast)
		j.row(y, row, r.ch, j.xFirst)
	}
	p.finishJob(&j, s, out)
	return nil
}

// gifFrame is what a GIF declares up to its first image descriptor.
type gifFrame struct {
	frame       image.Rectangle // first frame within the logical screen
	table       []byte          // the frame's color table (local, else global), 3 bytes an entry
	ncolors     int
	transparent int // transparency index, -1 for none
	end         int // offset just past the first frame's image data
}

// parseGIF reads a GIF's structure up to the end of its first frame. ok is
// false when it is malformed before that (the decoder then reports why).
func parseGIF(b []byte) (g gifFrame, ok bool) {
	g.transparent = -1
	if len(b) < 13 {
		return g, false
	}
	i := 13
	var global []byte
	if b[10]&0x80 != 0 {
		n := 3 << (b[10]&7 + 1)
		if i+n > len(b) {
			return g, false
		}
		global, i = b[i:i+n], i+n
	}
	// skip reads data sub-blocks from i to the terminator.
	skip := func(i int) int {
		for i < len(b) {
			n := int(b[i])
			if n == 0 {
				return i + 1
			}
			i += 1 + n
		}
		return -1
	}
	for i < len(b) {
		switch b[i] {
		case 0x21: // extension
			if i+2 > len(b) {
				return g, false
			}
			if b[i+1] == 0xF9 && i+8 <= len(b) && b[i+2] == 4 {
				g.transparent = -1
				if b[i+3]&1 != 0 {
					g.transparent = int(b[i+6])
				}
			}
			if i = skip(i + 2); i < 0 {
				return g, false
			}
		case 0x2C: // image descriptor
			if i+10 > len(b) {
				return g, false
			}
			x, y := int(b[i+1])|int(b[i+2])<<8, int(b[i+3])|int(b[i+4])<<8
			w, h := int(b[i+5])|int(b[i+6])<<8, int(b[i+7])|int(b[i+8])<<8
			g.frame = image.Rect(x, y, x+w, y+h)
			flags := b[i+9]
			i += 10
			g.table = global
			if flags&0x80 != 0 {
				n := 3 << (flags&7 + 1)
				if i+n > len(b) {
					return g, false
				}
				g.table, i = b[i:i+n], i+n
			}
			if g.table == nil || i+1 > len(b) {
				return g, false
			}
			g.ncolors = len(g.table) / 3
			if g.end = skip(i + 1); g.end < 0 { // LZW minimum code size, then data
				return g, false
			}
			return g, true
		default:
			return g, false
		}
	}
	return g, false
}

func (p *Preprocessor) probeOther(f format, data []byte) (Info, memUse, error) {
	pl, err := p.planOther(f, data)
	if err != nil {
		return Info{}, memUse{}, err
	}
	info := Info{Format: map[format]string{formatGIF: "gif", formatBMP: "bmp", formatTIFF: "tiff"}[f],
		Width: pl.w, Height: pl.h, Channels: pl.channels, BytesPerSample: max(pl.depth/8, 1),
		WorkBytes: pl.segments * tiffSegmentWork(pl.compression)} // probe adds the pixels' work
	return info, memUse{goEarly: p.otherMemory(&pl, len(data))}, nil
}

// otherMemory models decodeOther: the codec's canvas (a GIF's first frame
// at 1 byte a pixel; BMP 1 or 4; TIFF 1, 2, 4 or 8), what the codec reads
// through (a TIFF's strips; a GIF's LZW tables), then one converted row and
// the resampler's scratch, or for a reoriented TIFF two 8-bit copies of the
// canvas. It counts every allocation of the call, garbage included: a
// compressed TIFF's bound is loose (up to 3x what is held at once).
func (p *Preprocessor) otherMemory(pl *otherPlan, dataLen int) int64 {
	n := goAlloc(pl.canvas) + otherGoFixed
	if pl.format == formatTIFF {
		// Strips read in place allocate their bytes (growing past 10 MB a strip);
		// compressed ones are inflated into a bytes.Buffer that doubles (4 times
		// the raw size at most, allocations summed) through compress/flate or
		// LZW, whose tables are allocated again for every deflate block.
		raw := int64(pl.w) * int64(pl.h) * int64(pl.channels*pl.depth/8)
		switch {
		case pl.compression != 1:
			n += 4*raw + 2*int64(dataLen)
		case raw > 10<<20:
			n += 3 * raw
		default:
			n += raw
		}
	}
	g := source{w: pl.w, h: pl.h, ch: pl.ch, x1: float64(pl.w), y1: float64(pl.h), dispW: pl.w, dispH: pl.h}
	if pl.orient != 1 {
		copyBytes := p.bufBytes(pl.w * pl.h * pl.ch)
		n += 2 * copyBytes
		if pl.orient >= 5 {
			g.dispW, g.dispH = pl.h, pl.w
		}
		g = orientedGeometry(&g, pl.orient)
	} else {
		n += p.bufBytes(pl.w * pl.ch)
	}
	return n + p.resampleBytes(&g) + goDecoderSlack
}

// A TIFF may have at most max(tiffMaxSegments, pixels/tiffMinSegmentPixels)
// strips or tiles. Each costs its own read and, compressed, a decompressor of
// its own, so a small file of tiny tiles can take seconds (docs/internals.md,
// "TIFF strips and tiles"). Writers make strips of about 8 KB (libtiff) or
// tiles of 256x256 and more.
const (
	tiffMaxSegments      = 16384
	tiffMinSegmentPixels = 1024
)

// tiffSegmentWork is the decode work of one TIFF strip or tile beyond its
// pixels, in Info.WorkBytes: its reads, and a decompressor's set-up (their
// measured times, at Info.WorkBytes' time per byte: docs/internals.md).
func tiffSegmentWork(compression uint32) int64 {
	if compression == 1 {
		return 1 << 10
	}
	return 8 << 10
}

// otherGoFixed: a codec's tables and readers (GIF's LZW decoder, palettes,
// TIFF's IFD).
const otherGoFixed = 64 << 10

// tiffIFD0Whole tells whether a TIFF's first IFD is whole, up to and
// including the offset of the next one (which the decoder does not read).
func tiffIFD0Whole(b []byte) bool {
	if len(b) < 8 {
		return false
	}
	u16 := func(p []byte) int { return int(p[0]) | int(p[1])<<8 }
	u32 := func(p []byte) int64 { return int64(p[0]) | int64(p[1])<<8 | int64(p[2])<<16 | int64(p[3])<<24 }
	if b[0] == 'M' {
		u16 = func(p []byte) int { return int(p[1]) | int(p[0])<<8 }
		u32 = func(p []byte) int64 { return int64(p[3]) | int64(p[2])<<8 | int64(p[1])<<16 | int64(p[0])<<24 }
	}
	off := u32(b[4:])
	if off < 8 || off+2 > int64(len(b)) {
		return false
	}
	return off+2+12*int64(u16(b[off:]))+4 <= int64(len(b))
}

// tiffSamples is a TIFF's SamplesPerPixel (1 when absent): with one sample a pixel,
// PlanarConfiguration 2 is the same layout as 1.
func tiffSamples(data []byte) uint32 {
	if spp, ok := tiffTag(data, 277); ok {
		return spp
	}
	return 1
}
