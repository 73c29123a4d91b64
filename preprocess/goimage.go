package preprocess

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"

	"golang.org/x/image/webp"
)

// PNG and WebP go through Go decoders. The header is always read first
// (DecodeConfig) and checked against MaxPixels, because the decoders
// allocate the whole canvas before reading any pixel data.

func (p *Preprocessor) decodePNG(data []byte, s *scratch) (source, error) {
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return source{}, fmt.Errorf("cannot decode PNG header: %v: %w", err, ErrBadImage)
	}
	if err := p.checkPixels("PNG", cfg.Width, cfg.Height); err != nil {
		return source{}, err
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return source{}, fmt.Errorf("cannot decode PNG: %v: %w", err, ErrBadImage)
	}
	return toSource(img, s), nil
}

func (p *Preprocessor) decodeWebP(data []byte, s *scratch) (source, error) {
	cfg, err := webp.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return source{}, fmt.Errorf("cannot decode WebP header: %v: %w", err, ErrBadImage)
	}
	if err := p.checkPixels("WebP", cfg.Width, cfg.Height); err != nil {
		return source{}, err
	}
	img, err := webp.Decode(bytes.NewReader(data))
	if err != nil {
		return source{}, fmt.Errorf("cannot decode WebP: %v: %w", err, ErrBadImage)
	}
	return toSource(img, s), nil
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
	cw, ch := (w+1)/2, (h+1)/2
	for y := range h {
		cy := y >> 1
		ny := cy // vertical neighbour chroma row
		if is420 {
			if y&1 == 1 {
				ny = min(cy+1, ch-1)
			} else {
				ny = max(cy-1, 0)
			}
		} else {
			cy, ny = y, y
		}
		o := d[y*3*w : (y+1)*3*w]
		yr := Y[y*ys : y*ys+w]
		for x := range w {
			var u, v int
			if is420 {
				cx := x >> 1
				nx := max(cx-1, 0)
				if x&1 == 1 {
					nx = min(cx+1, cw-1)
				}
				u = (9*int(Cb[cy*cs+cx]) + 3*int(Cb[cy*cs+nx]) + 3*int(Cb[ny*cs+cx]) + int(Cb[ny*cs+nx]) + 8) >> 4
				v = (9*int(Cr[cy*cs+cx]) + 3*int(Cr[cy*cs+nx]) + 3*int(Cr[ny*cs+cx]) + int(Cr[ny*cs+nx]) + 8) >> 4
			} else {
				u, v = int(Cb[cy*cs+x]), int(Cr[cy*cs+x])
			}
			yy := int(yr[x])
			o[3*x] = clipYUV(mulHi(yy, 19077) + mulHi(v, 26149) - 14234)
			o[3*x+1] = clipYUV(mulHi(yy, 19077) - mulHi(u, 6419) - mulHi(v, 13320) + 8708)
			o[3*x+2] = clipYUV(mulHi(yy, 19077) + mulHi(u, 33050) - 17685)
		}
	}
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
