package preprocess

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"

	"golang.org/x/image/webp"
)

// WebP goes through a Go decoder. The header is always read first
// (DecodeConfig) and checked against MaxPixels, because the decoder
// allocates the whole canvas before reading any pixel data.

func (p *Preprocessor) decodeWebP(data []byte, s *scratch, out sink) error {
	cfg, err := webp.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("cannot decode WebP header: %v: %w", err, ErrBadImage)
	}
	if err := p.checkPixels("WebP", cfg.Width, cfg.Height); err != nil {
		return err
	}
	if webpAnimated(data) {
		return errWebPAnimated
	}
	img, err := webp.Decode(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("cannot decode WebP: %v: %w", err, ErrBadImage)
	}
	// Lossy images come back as 4:2:0 Y'CbCr: converted to RGB one row at a
	// time, only the rows and columns the resampler reads, straight into its
	// horizontal pass (no RGB copy of the canvas).
	var yc *image.YCbCr
	switch m := img.(type) {
	case *image.YCbCr:
		yc = m
	case *image.NYCbCrA:
		yc = &m.YCbCr
	}
	if yc == nil || yc.SubsampleRatio != image.YCbCrSubsampleRatio420 {
		src := toSource(img, s)
		return p.resample(&src, s, out)
	}
	b := yc.Bounds()
	w, h := b.Dx(), b.Dy()
	g := source{w: w, h: h, ch: 3, x1: float64(w), y1: float64(h), dispW: w, dispH: h}
	j := p.newJob(s, &g)
	s.dec = s.buf((j.xLast - j.xFirst) * 3)
	row := *s.dec
	for y := j.yFirst; y < j.yLast; y++ {
		webpYUVRow(row, yc.Y, yc.Cb, yc.Cr, yc.YStride, yc.CStride, w, h, y, j.xFirst, j.xLast)
		j.row(y, row, 3, j.xFirst)
	}
	p.finishJob(&j, s, out)
	return nil
}

// toSource exposes a decoded image to the resampler, as Pillow's
// convert('RGB') sees it: alpha is dropped (not composited), palettes are
// expanded, gray stays one channel. 16-bit samples keep their high byte
// (Pillow keeps the high byte of 16-bit RGB; 16-bit gray, which Pillow
// clips to 255 in mode "I", is scaled the same way here on purpose).
func toSource(img image.Image, s *scratch) source {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	src := source{w: w, h: h, dispW: w, dispH: h, x1: float64(w), y1: float64(h)}
	switch m := img.(type) {
	case *image.Gray:
		src.pix, src.stride, src.bpp, src.ch = m.Pix, m.Stride, 1, 1
		return src
	case *image.NRGBA:
		src.pix, src.stride, src.bpp, src.ch = m.Pix, m.Stride, 4, 3
		return src
	case *image.RGBA:
		// The PNG decoder returns RGBA only for opaque images.
		src.pix, src.stride, src.bpp, src.ch = m.Pix, m.Stride, 4, 3
		return src
	case *image.Gray16:
		s.dec = s.buf(w * h)
		d := *s.dec
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+2*w]
			for x := range w {
				d[y*w+x] = row[2*x]
			}
		}
		src.pix, src.stride, src.bpp, src.ch = d, w, 1, 1
		return src
	}
	s.dec = s.buf(w * h * 3)
	d := *s.dec
	src.pix, src.stride, src.bpp, src.ch = d, 3*w, 3, 3
	switch m := img.(type) {
	case *image.Paletted:
		var pal [256][3]uint8
		for i, c := range m.Palette {
			if i >= 256 {
				break
			}
			n := nrgbOf(c)
			pal[i] = n
		}
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			o := d[y*3*w : (y+1)*3*w]
			for x, v := range row {
				q := pal[v]
				o[3*x], o[3*x+1], o[3*x+2] = q[0], q[1], q[2]
			}
		}
	case *image.NRGBA64:
		hiBytes(d, m.Pix, m.Stride, w, h)
	case *image.RGBA64:
		// Opaque 16-bit PNGs only.
		hiBytes(d, m.Pix, m.Stride, w, h)
	case *image.YCbCr:
		webpYUVToRGB(d, m.Y, m.Cb, m.Cr, m.YStride, m.CStride, w, h, m.SubsampleRatio == image.YCbCrSubsampleRatio420)
	case *image.NYCbCrA:
		webpYUVToRGB(d, m.Y, m.Cb, m.Cr, m.YStride, m.CStride, w, h, m.SubsampleRatio == image.YCbCrSubsampleRatio420)
	default:
		for y := range h {
			for x := range w {
				q := nrgbOf(img.At(b.Min.X+x, b.Min.Y+y))
				copy(d[(y*w+x)*3:], q[:])
			}
		}
	}
	return src
}

func nrgbOf(c color.Color) [3]uint8 {
	switch c := c.(type) {
	case color.NRGBA:
		return [3]uint8{c.R, c.G, c.B}
	case color.RGBA:
		if c.A == 255 {
			return [3]uint8{c.R, c.G, c.B}
		}
	}
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	return [3]uint8{n.R, n.G, n.B}
}

// hiBytes keeps the high byte of R, G, B of 8-byte RGBA64 pixels.
func hiBytes(d, pix []uint8, stride, w, h int) {
	for y := range h {
		row := pix[y*stride : y*stride+8*w]
		o := d[y*3*w : (y+1)*3*w]
		for x := range w {
			q := row[8*x : 8*x+6]
			o[3*x], o[3*x+1], o[3*x+2] = q[0], q[2], q[4]
		}
	}
}

// webpYUVToRGB converts VP8's limited-range BT.601 Y'CbCr to RGB the way
// libwebp does (which Pillow uses): 4:2:0 chroma upsampled with the
// 9-3-3-1 "fancy" bilinear kernel, then 14-bit fixed-point conversion.
// (Go's image.YCbCr.At would treat the samples as full-range JFIF.)
func webpYUVToRGB(d, Y, Cb, Cr []uint8, ys, cs, w, h int, is420 bool) {
	for y := range h {
		o := d[y*3*w : (y+1)*3*w]
		if is420 {
			webpYUVRow(o, Y, Cb, Cr, ys, cs, w, h, y, 0, w)
			continue
		}
		yr := Y[y*ys : y*ys+w]
		for x := range w {
			yuvToRGB(o[3*x:3*x+3], int(yr[x]), int(Cb[y*cs+x]), int(Cr[y*cs+x]))
		}
	}
}

// webpYUVRow converts columns [x0, x1) of row y of a 4:2:0 image into d
// (3 bytes per pixel, from d[0]).
func webpYUVRow(d, Y, Cb, Cr []uint8, ys, cs, w, h, y, x0, x1 int) {
	cw, ch := (w+1)/2, (h+1)/2
	cy := y >> 1
	ny := max(cy-1, 0) // vertical neighbour chroma row
	if y&1 == 1 {
		ny = min(cy+1, ch-1)
	}
	yr := Y[y*ys : y*ys+w]
	d = d[:3*(x1-x0)]
	for x := x0; x < x1; x++ {
		cx := x >> 1
		nx := max(cx-1, 0)
		if x&1 == 1 {
			nx = min(cx+1, cw-1)
		}
		u := (9*int(Cb[cy*cs+cx]) + 3*int(Cb[cy*cs+nx]) + 3*int(Cb[ny*cs+cx]) + int(Cb[ny*cs+nx]) + 8) >> 4
		v := (9*int(Cr[cy*cs+cx]) + 3*int(Cr[cy*cs+nx]) + 3*int(Cr[ny*cs+cx]) + int(Cr[ny*cs+nx]) + 8) >> 4
		i := 3 * (x - x0)
		yuvToRGB(d[i:i+3], int(yr[x]), u, v)
	}
}

func yuvToRGB(o []uint8, yy, u, v int) {
	o[0] = clipYUV(mulHi(yy, 19077) + mulHi(v, 26149) - 14234)
	o[1] = clipYUV(mulHi(yy, 19077) - mulHi(u, 6419) - mulHi(v, 13320) + 8708)
	o[2] = clipYUV(mulHi(yy, 19077) + mulHi(u, 33050) - 17685)
}

func mulHi(v, c int) int { return (v * c) >> 8 }

// clipYUV converts a value with 6 fraction bits to uint8, clamping.
func clipYUV(v int) uint8 {
	if v < 0 {
		return 0
	}
	if v >= 256<<6 {
		return 255
	}
	return uint8(v >> 6)
}

// pngHeader is what a PNG's IHDR (and the chunks before the first IDAT)
// declares.
type pngHeader struct {
	w, h      int
	depth     int // bits per sample: 1, 2, 4, 8, 16
	colorType int // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
	interlace bool
	trns      bool // a tRNS chunk precedes the image data
}

// channels is the number of samples per pixel the file stores.
func (h *pngHeader) channels() int {
	switch h.colorType {
	case 2:
		return 3
	case 4:
		return 2
	case 6:
		return 4
	}
	return 1
}

// parsePNGHeader reads the IHDR chunk and looks for tRNS before the first
// IDAT. It checks what the PNG specification requires of IHDR; CRCs are left
// to the decoder.
func parsePNGHeader(b []byte) (pngHeader, error) {
	var h pngHeader
	if len(b) < 33 || string(b[12:16]) != "IHDR" || be32(b[8:]) != 13 {
		return h, fmt.Errorf("cannot decode PNG header: no IHDR chunk: %w", ErrBadImage)
	}
	if crc32.ChecksumIEEE(b[12:29]) != be32(b[29:]) {
		return h, fmt.Errorf("cannot decode PNG header: IHDR CRC mismatch: %w", ErrBadImage)
	}
	ihdr := b[16:29]
	w, ht := be32(ihdr), be32(ihdr[4:])
	h.depth, h.colorType = int(ihdr[8]), int(ihdr[9])
	if w == 0 || ht == 0 || w > 1<<31-1 || ht > 1<<31-1 {
		return h, fmt.Errorf("cannot decode PNG header: IHDR declares %dx%d pixels: %w", w, ht, ErrBadImage)
	}
	h.w, h.h = int(w), int(ht)
	ok := false
	switch h.colorType {
	case 0:
		ok = h.depth == 1 || h.depth == 2 || h.depth == 4 || h.depth == 8 || h.depth == 16
	case 3:
		ok = h.depth == 1 || h.depth == 2 || h.depth == 4 || h.depth == 8
	case 2, 4, 6:
		ok = h.depth == 8 || h.depth == 16
	}
	if !ok {
		return h, fmt.Errorf("cannot decode PNG header: color type %d with bit depth %d: %w", h.colorType, h.depth, ErrBadImage)
	}
	if ihdr[10] != 0 || ihdr[11] != 0 || ihdr[12] > 1 {
		return h, fmt.Errorf("cannot decode PNG header: compression %d, filter %d, interlace %d: %w", ihdr[10], ihdr[11], ihdr[12], ErrBadImage)
	}
	h.interlace = ihdr[12] == 1
	for i := 33; i+8 <= len(b); {
		n, typ := int64(be32(b[i:])), string(b[i+4:i+8])
		if typ == "IDAT" || typ == "IEND" {
			break
		}
		if typ == "tRNS" {
			h.trns = true
		}
		if n > int64(len(b)) {
			break
		}
		i += 12 + int(n)
	}
	return h, nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// webpHeader is what a WebP's RIFF chunks declare.
type webpHeader struct {
	lossless bool
	alpha    int // 0 none, 1 raw alpha plane, 2 VP8L-compressed alpha plane
}

// webpAnimated reports whether a WebP declares an animation (the VP8X
// chunk's A flag): golang.org/x/image/webp decodes none, and said only
// "invalid format".
func webpAnimated(b []byte) bool {
	return len(b) >= 21 && string(b[12:16]) == "VP8X" && b[20]&0x02 != 0
}

var errWebPAnimated = fmt.Errorf("cannot decode WebP: animated WebP is not supported (send one frame as a still image): %w", ErrUnsupportedFormat)

// parseWebPHeader classifies a WebP from its first chunks; the dimensions
// come from webp.DecodeConfig.
func parseWebPHeader(b []byte) webpHeader {
	var h webpHeader
	if len(b) < 16 {
		return h
	}
	switch string(b[12:16]) {
	case "VP8L":
		h.lossless = true
		return h
	case "VP8 ":
		return h
	}
	// VP8X: look for ALPH and VP8L chunks.
	for i := 12; i+8 <= len(b); {
		n := int64(b[i+4]) | int64(b[i+5])<<8 | int64(b[i+6])<<16 | int64(b[i+7])<<24
		switch string(b[i : i+4]) {
		case "VP8L":
			h.lossless = true
		case "ALPH":
			h.alpha = 1
			if i+8 < len(b) && b[i+8]&3 == 1 {
				h.alpha = 2
			}
		}
		if n > int64(len(b)) {
			break
		}
		i += 8 + int(n+n&1)
	}
	return h
}

func (p *Preprocessor) probeWebP(data []byte) (Info, memUse, error) {
	cfg, err := webp.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return Info{}, memUse{}, fmt.Errorf("cannot decode WebP header: %v: %w", err, ErrBadImage)
	}
	if err := p.checkPixels("WebP", cfg.Width, cfg.Height); err != nil {
		return Info{}, memUse{}, err
	}
	if webpAnimated(data) {
		return Info{}, memUse{}, errWebPAnimated
	}
	h := parseWebPHeader(data)
	info := Info{Format: "webp", Width: cfg.Width, Height: cfg.Height, Channels: 3, BytesPerSample: 1}
	if h.lossless || h.alpha != 0 {
		info.Channels = 4
	}
	return info, memUse{goEarly: p.webpGoMemory(&h, cfg.Width, cfg.Height, len(data))}, nil
}

// webpGoMemory models golang.org/x/image/webp's Decode and toSource:
//   - lossy: a copy of the compressed partitions, the 4:2:0 Y'CbCr canvas
//     rounded up to 16x16 macroblocks, per-macroblock state, one RGB row;
//     an alpha plane, decoded through a VP8L RGBA image when compressed;
//   - lossless: the RGBA canvas, a second one when a color-indexing
//     transform expands packed pixels, and the transforms' and entropy
//     codes' subsampled images (at most a quarter canvas each), bounded
//     together by 9 bytes per pixel.
func (p *Preprocessor) webpGoMemory(h *webpHeader, w, ht, dataLen int) int64 {
	wh := int64(w) * int64(ht)
	var n int64
	if h.lossless {
		n = 9 * wh
	} else {
		mbs := int64((w+15)/16) * int64((ht+15)/16)
		n = int64(dataLen) + 384*mbs + 8*mbs + p.bufBytes(3*w) // canvas, one RGB row
		switch h.alpha {
		case 1:
			n += wh
		case 2:
			n += 6 * wh
		}
	}
	src := source{w: w, h: ht, ch: 3, x1: float64(w), y1: float64(ht), dispW: w, dispH: ht}
	return n + webpGoFixed + p.resampleBytes(&src) + goDecoderSlack
}

// webpGoFixed: the WebP decoders' small tables (Huffman codes, color cache,
// probability tables).
const webpGoFixed = 128 << 10
