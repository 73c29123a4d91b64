package preprocess

/*
#cgo LDFLAGS: -lturbojpeg
#include <turbojpeg.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// JPEG decoding through libjpeg-turbo's TurboJPEG API. Decompressor handles
// are pooled; a handle dropped by the pool is destroyed by a cleanup.

type tjDecoder struct {
	h       C.tjhandle
	cleanup runtime.Cleanup
	hdr     [4]C.int // header outputs; here so that they do not escape per call
}

var tjPool = sync.Pool{New: func() any {
	h := C.tjInitDecompress()
	if h == nil {
		return nil
	}
	d := &tjDecoder{h: h}
	d.cleanup = runtime.AddCleanup(d, func(h C.tjhandle) { C.tjDestroy(h) }, h)
	return d
}}

// destroy frees a handle after a failed call: libjpeg-turbo 2.1 can leave
// a decompressor in a state that breaks the next image, so it is never
// reused.
func (d *tjDecoder) destroy() {
	d.cleanup.Stop()
	C.tjDestroy(d.h)
	d.h = nil
}

type scaleFactor struct{ num, denom int }

// tjScales are the scaling factors <= 1 offered by the library, smallest first.
var tjScales = func() []scaleFactor {
	var n C.int
	f := C.tjGetScalingFactors(&n)
	var out []scaleFactor
	if f != nil && n > 0 {
		for _, s := range unsafe.Slice(f, int(n)) {
			if s.num > 0 && s.denom > 0 && s.num <= s.denom {
				out = append(out, scaleFactor{int(s.num), int(s.denom)})
			}
		}
	}
	if len(out) == 0 {
		out = []scaleFactor{{1, 1}}
	}
	slices.SortFunc(out, func(a, b scaleFactor) int { return a.num*b.denom - b.num*a.denom })
	return out
}()

// pickScale returns the smallest factor whose scaled span of a w x h image
// is at least tw x th (stored orientation), times p.oversample.
func (p *Preprocessor) pickScale(w, h, tw, th int) scaleFactor {
	for _, s := range tjScales {
		fw := float64(w*s.num) / float64(s.denom)
		fh := float64(h*s.num) / float64(s.denom)
		if fw >= float64(tw)*p.oversample && fh >= float64(th)*p.oversample {
			return s
		}
	}
	return scaleFactor{1, 1}
}

func tjError(d *tjDecoder) string {
	return C.GoString(C.tjGetErrorStr2(d.h))
}

// decodeJPEG decodes data into s.dec at the chosen DCT scale and applies
// the EXIF orientation.
func (p *Preprocessor) decodeJPEG(data []byte, s *scratch) (source, error) {
	d, _ := tjPool.Get().(*tjDecoder)
	if d == nil {
		return source{}, fmt.Errorf("cannot decode JPEG: tjInitDecompress failed: %w", ErrBadImage)
	}
	failed := false
	defer func() {
		if failed {
			d.destroy()
		} else {
			tjPool.Put(d)
		}
	}()
	in := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	size := C.ulong(len(data))
	if C.tjDecompressHeader3(d.h, in, size, &d.hdr[0], &d.hdr[1], &d.hdr[2], &d.hdr[3]) != 0 {
		failed = true
		return source{}, fmt.Errorf("cannot decode JPEG header: %s: %w", tjError(d), ErrBadImage)
	}
	w, h, cs := d.hdr[0], d.hdr[1], d.hdr[3]
	W, H := int(w), int(h)
	if err := p.checkPixels("JPEG", W, H); err != nil {
		return source{}, err
	}
	o := jpegOrientation(data)
	dispW, dispH := W, H
	if o >= 5 {
		dispW, dispH = H, W
	}
	// Target size of the resize, in stored orientation.
	tw, th := p.opts.Width, p.opts.Height
	if p.opts.Mode == ModeShorterSide {
		tw, th, _, _ = p.geometry(dispW, dispH)
	}
	if o >= 5 {
		tw, th = th, tw
	}
	sf := p.pickScale(W, H, tw, th)
	sw := (W*sf.num + sf.denom - 1) / sf.denom // TJSCALED
	sh := (H*sf.num + sf.denom - 1) / sf.denom

	pf, bpp, ch := C.int(C.TJPF_RGB), 3, 3
	switch cs {
	case C.TJCS_GRAY:
		pf, bpp, ch = C.TJPF_GRAY, 1, 1
	case C.TJCS_CMYK, C.TJCS_YCCK:
		pf, bpp = C.TJPF_CMYK, 4
	}
	s.dec = getBuf(sw * sh * bpp)
	buf := *s.dec
	rc := C.tjDecompress2(d.h, in, size, (*C.uchar)(unsafe.Pointer(unsafe.SliceData(buf))),
		C.int(sw), C.int(sw*bpp), C.int(sh), pf, C.TJFLAG_LIMITSCANS)
	if rc != 0 {
		failed = true
		msg := tjError(d)
		if C.tjGetErrorCode(d.h) != C.TJERR_WARNING {
			return source{}, fmt.Errorf("cannot decode JPEG: %s: %w", msg, ErrBadImage)
		}
		// Like Pillow, refuse data that ends before the image does ("image
		// file is truncated"); tolerate other warnings (extraneous bytes...).
		if l := strings.ToLower(msg); strings.Contains(l, "premature end") {
			return source{}, fmt.Errorf("cannot decode JPEG: data is truncated (%s): %w", msg, ErrBadImage)
		}
	}
	if bpp == 4 {
		cmykToRGB(buf[:sw*sh*4], sw*sh)
		bpp = 3
		buf = buf[:sw*sh*3]
	}
	src := source{
		pix: buf, stride: sw * bpp, bpp: bpp, ch: ch, w: sw, h: sh,
		x0: 0, x1: float64(W*sf.num) / float64(sf.denom),
		y0: 0, y1: float64(H*sf.num) / float64(sf.denom),
		dispW: dispW, dispH: dispH,
	}
	if o != 1 {
		s.rot = getBuf(sw * sh * bpp)
		src = orient(&src, o, *s.rot)
	}
	return src, nil
}

// cmykToRGB converts n Adobe (inverted) CMYK pixels to RGB in place, as
// Pillow does: it unpacks JPEG CMYK as "CMYK;I" (inverting every channel)
// and converts with r = (255-k) - (c*(255-k))/255 using its rounding
// division by 255.
func cmykToRGB(b []uint8, n int) {
	b = b[:4*n]
	for i := range n {
		q := b[4*i : 4*i+4]
		nk := int(q[3]) // 255 - k, with k = 255 - stored
		c, m, y := 255-int(q[0]), 255-int(q[1]), 255-int(q[2])
		d := b[3*i : 3*i+3]
		d[0] = uint8(nk - muldiv255(c, nk))
		d[1] = uint8(nk - muldiv255(m, nk))
		d[2] = uint8(nk - muldiv255(y, nk))
	}
}

func muldiv255(a, b int) int {
	t := a*b + 128
	return ((t >> 8) + t) >> 8
}
