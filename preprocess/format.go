package preprocess

import "bytes"

type format int

const (
	formatUnknown format = iota
	formatJPEG
	formatPNG
	formatWebP
	formatGIF
	formatBMP
	formatTIFF
)

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// bmpInfoLen returns the size of a BMP's info header when it is one of the
// known ones (BITMAPCOREHEADER and BITMAPINFOHEADER to BITMAPV5HEADER), else
// 0: "BM" alone is too weak a signature.
func bmpInfoLen(b []byte) uint32 {
	n := uint32(b[14]) | uint32(b[15])<<8 | uint32(b[16])<<16 | uint32(b[17])<<24
	switch n {
	case 12, 40, 52, 56, 64, 108, 124:
		return n
	}
	return 0
}

// detectFormat looks at magic bytes only.
func detectFormat(b []byte) format {
	switch {
	case len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return formatJPEG
	case bytes.HasPrefix(b, pngMagic):
		return formatPNG
	case len(b) >= 12 && string(b[0:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return formatWebP
	case len(b) >= 6 && (string(b[:6]) == "GIF87a" || string(b[:6]) == "GIF89a"):
		return formatGIF
	case len(b) >= 18 && string(b[:2]) == "BM" && bmpInfoLen(b) != 0:
		return formatBMP
	case len(b) >= 4 && (string(b[:4]) == "II*\x00" || string(b[:4]) == "MM\x00*"):
		return formatTIFF
	}
	return formatUnknown
}

// jpegOrientation returns the EXIF orientation (1..8) of a JPEG, or 1 when
// there is none or it is invalid. Like Pillow, it reads the first APP1
// "Exif\0\0" segment before the first scan. Never panics on any input.
func jpegOrientation(b []byte) int {
	if len(b) < 4 || b[0] != 0xFF || b[1] != 0xD8 {
		return 1
	}
	i := 2
	for i+4 <= len(b) {
		if b[i] != 0xFF {
			return 1
		}
		m := b[i+1]
		if m == 0xFF { // fill byte
			i++
			continue
		}
		i += 2
		if m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7) { // no length
			continue
		}
		if m == 0xDA || m == 0xD9 { // start of scan / end of image
			return 1
		}
		if i+2 > len(b) {
			return 1
		}
		n := int(b[i])<<8 | int(b[i+1])
		if n < 2 || i+n > len(b) {
			return 1
		}
		seg := b[i+2 : i+n]
		if m == 0xE1 && len(seg) >= 6 && string(seg[:6]) == "Exif\x00\x00" {
			return exifOrientation(seg[6:])
		}
		i += n
	}
	return 1
}

// exifOrientation reads tag 0x0112 of IFD0 of a TIFF structure (both byte
// orders). Returns 1 when absent or invalid.
func exifOrientation(t []byte) int {
	if v, ok := tiffTag(t, 0x0112); ok && v >= 1 && v <= 8 {
		return int(v)
	}
	return 1
}

// tiffTag reads the SHORT or LONG value of tag in IFD0 of a TIFF structure
// (both byte orders). Never panics on any input.
func tiffTag(t []byte, tag uint32) (uint32, bool) {
	if len(t) < 8 {
		return 0, false
	}
	var u16 func([]byte) uint32
	var u32 func([]byte) uint32
	switch string(t[:2]) {
	case "II":
		u16 = func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 }
		u32 = func(b []byte) uint32 { return u16(b) | u16(b[2:])<<16 }
	case "MM":
		u16 = func(b []byte) uint32 { return uint32(b[1]) | uint32(b[0])<<8 }
		u32 = func(b []byte) uint32 { return u16(b)<<16 | u16(b[2:]) }
	default:
		return 0, false
	}
	if u16(t[2:]) != 42 {
		return 0, false
	}
	off := u32(t[4:])
	if off < 8 || uint64(off)+2 > uint64(len(t)) {
		return 0, false
	}
	cnt := int(u16(t[off:]))
	p := int(off) + 2
	for range cnt {
		if p+12 > len(t) {
			return 0, false
		}
		e := t[p : p+12]
		if u16(e) == tag {
			// The first value: BYTE, SHORT or LONG, in the entry or, when the
			// values need more than 4 bytes, at the offset it holds (as
			// x/image/tiff reads them).
			typ, n := u16(e[2:]), u32(e[4:])
			size := map[uint32]uint32{1: 1, 3: 2, 4: 4}[typ]
			if size == 0 || n == 0 {
				return 0, false
			}
			v := e[8:12]
			if uint64(n)*uint64(size) > 4 {
				o := u32(e[8:])
				if uint64(o)+uint64(size) > uint64(len(t)) {
					return 0, false
				}
				v = t[o : o+size]
			}
			switch typ {
			case 1:
				return uint32(v[0]), true
			case 3:
				return u16(v), true
			}
			return u32(v), true
		}
		p += 12
	}
	return 0, false
}

// tiffTagCount returns how many values tag has in a TIFF's first IFD (a
// strip's or tile's offsets: one per strip or tile).
func tiffTagCount(t []byte, tag uint32) (uint32, bool) {
	if len(t) < 8 || (string(t[:2]) != "II" && string(t[:2]) != "MM") {
		return 0, false
	}
	u16 := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 }
	u32 := func(b []byte) uint32 { return u16(b) | u16(b[2:])<<16 }
	if t[0] == 'M' {
		u16 = func(b []byte) uint32 { return uint32(b[1]) | uint32(b[0])<<8 }
		u32 = func(b []byte) uint32 { return u16(b)<<16 | u16(b[2:]) }
	}
	off := u32(t[4:])
	if off < 8 || uint64(off)+2 > uint64(len(t)) {
		return 0, false
	}
	p := int(off) + 2
	for range int(u16(t[off:])) {
		if p+12 > len(t) {
			return 0, false
		}
		if u16(t[p:]) == tag {
			return u32(t[p+4:]), true
		}
		p += 12
	}
	return 0, false
}

// orientMap describes output pixel (x, y) = input pixel (sx, sy) with
// sx = x or y, possibly reversed, and likewise sy.
type orientMap struct {
	swap  bool // output x runs along input y
	flipX bool // output x runs backwards along its input axis
	flipY bool // output y runs backwards along its input axis
}

// Pillow's ImageOps.exif_transpose: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180,
// 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90.
var orientMaps = [9]orientMap{
	1: {},
	2: {flipX: true},
	3: {flipX: true, flipY: true},
	4: {flipY: true},
	5: {swap: true},
	6: {swap: true, flipY: true},
	7: {swap: true, flipX: true, flipY: true},
	8: {swap: true, flipX: true},
}

// orient applies EXIF orientation o to src (tightly packed, bpp == ch)
// into dst (len src.w*src.h*bpp) and returns the transformed source.
func orient(src *source, o int, dst []uint8) source {
	m := orientMaps[o]
	bpp := src.bpp
	ow, oh := src.w, src.h
	if m.swap {
		ow, oh = oh, ow
	}
	// Offset of input pixel for output (x, y): base + x*dx + y*dy.
	var dx, dy, base int
	stepX, stepY := bpp, src.stride // input steps along input x and y
	if !m.swap {
		dx, dy = stepX, stepY
		if m.flipX {
			base += (src.w - 1) * stepX
			dx = -dx
		}
		if m.flipY {
			base += (src.h - 1) * stepY
			dy = -dy
		}
	} else {
		// output x runs along input y, output y along input x
		dx, dy = stepY, stepX
		if m.flipY { // 6, 7: output x runs up input y (sy = h-1-x)
			base += (src.h - 1) * stepY
			dx = -dx
		}
		if m.flipX { // 7, 8: output y runs left along input x (sx = w-1-y)
			base += (src.w - 1) * stepX
			dy = -dy
		}
	}
	pix := src.pix
	for y := range oh {
		off := base + y*dy
		d := dst[y*ow*bpp : (y+1)*ow*bpp]
		if bpp == 3 {
			for x := 0; x < len(d); x += 3 {
				q := pix[off : off+3]
				d[x], d[x+1], d[x+2] = q[0], q[1], q[2]
				off += dx
			}
		} else {
			for x := range d {
				d[x] = pix[off]
				off += dx
			}
		}
	}
	out := orientedGeometry(src, o)
	out.pix, out.stride, out.bpp = dst, ow*bpp, bpp
	return out
}

// orientedGeometry is src's geometry after EXIF orientation o: size, span of
// the image within the buffer, displayed size (pix is left unset).
func orientedGeometry(src *source, o int) source {
	m := orientMaps[o]
	ow, oh := src.w, src.h
	if m.swap {
		ow, oh = oh, ow
	}
	out := source{ch: src.ch, w: ow, h: oh, dispW: src.dispW, dispH: src.dispH, orient: o}
	// Spans of the image within the (possibly DCT-scaled) buffer.
	xs0, xs1, xw := src.x0, src.x1, float64(src.w)
	ys0, ys1, yh := src.y0, src.y1, float64(src.h)
	if m.swap {
		xs0, xs1, xw, ys0, ys1, yh = ys0, ys1, yh, xs0, xs1, xw
	}
	rx, ry := m.flipX, m.flipY
	if m.swap {
		rx, ry = m.flipY, m.flipX
	}
	if rx {
		xs0, xs1 = xw-xs1, xw-xs0
	}
	if ry {
		ys0, ys1 = yh-ys1, yh-ys0
	}
	out.x0, out.x1, out.y0, out.y1 = xs0, xs1, ys0, ys1
	return out
}

// Sniff returns the media type of an encoded image recognised by its magic bytes
// ("image/jpeg", "image/png", "image/webp", "image/gif", "image/bmp", "image/tiff"), or ""
// when the bytes are none of the formats the decoders take.
func Sniff(b []byte) string {
	return [...]string{"", "image/jpeg", "image/png", "image/webp", "image/gif", "image/bmp", "image/tiff"}[detectFormat(b)]
}
