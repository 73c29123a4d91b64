package preprocess

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

// One decompressor per image, created and destroyed by the Go side around
// it: nothing (tables, header fields, warnings) survives from one image to
// the next. Every entry point sets its own setjmp target, so a libjpeg error
// never unwinds through Go frames; messages go to the struct, never stderr.
typedef struct {
	struct jpeg_decompress_struct d;
	struct jpeg_error_mgr jerr;
	struct jpeg_progress_mgr prog;
	jmp_buf jb;
	int warnings;   // warnings emitted
	int truncated;  // a warning said the data ran out (missing rows were padded)
	char msg[JMSG_LENGTH_MAX]; // the error, or the first warning
} igjpeg;

#define IG_MAX_SCANS 500 // progressive scans allowed (each costs a pass over the image)

static void ig_error_exit(j_common_ptr c) {
	igjpeg *g = (igjpeg *)c->client_data;
	(*c->err->format_message)(c, g->msg);
	longjmp(g->jb, 1);
}

static void ig_emit_message(j_common_ptr c, int level) {
	igjpeg *g = (igjpeg *)c->client_data;
	if (level >= 0) return; // trace messages
	if (g->warnings++ == 0) (*c->err->format_message)(c, g->msg);
	if (c->err->msg_code == JWRN_JPEG_EOF || c->err->msg_code == JWRN_HIT_MARKER) g->truncated = 1;
}

static void ig_output_message(j_common_ptr c) { (void)c; }

static void ig_progress(j_common_ptr c) {
	igjpeg *g = (igjpeg *)c->client_data;
	if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > IG_MAX_SCANS) {
		snprintf(g->msg, sizeof g->msg, "progressive JPEG with more than %d scans", IG_MAX_SCANS);
		longjmp(g->jb, 1);
	}
}

static igjpeg *ig_jpeg_new(void) {
	igjpeg *g = calloc(1, sizeof *g);
	if (g == NULL) return NULL;
	g->d.err = jpeg_std_error(&g->jerr);
	g->jerr.error_exit = ig_error_exit;
	g->jerr.emit_message = ig_emit_message;
	g->jerr.output_message = ig_output_message;
	g->d.client_data = g;
	if (setjmp(g->jb)) {
		free(g);
		return NULL;
	}
	jpeg_create_decompress(&g->d);
	g->prog.progress_monitor = ig_progress;
	g->d.progress = &g->prog;
	return g;
}

static void ig_jpeg_free(igjpeg *g) {
	jpeg_destroy_decompress(&g->d);
	free(g);
}

// ig_jpeg_header reads the headers up to the first scan. out: width, height,
// components, JPEG colorspace, progressive. 0 on success, -1 on error (msg).
// buf must stay valid and unmoved until ig_jpeg_free.
static int ig_jpeg_header(igjpeg *g, const unsigned char *buf, unsigned long size, long max_mem, int *out) {
	if (setjmp(g->jb)) return -1;
	g->d.mem->max_memory_to_use = max_mem;
	jpeg_mem_src(&g->d, buf, size);
	jpeg_read_header(&g->d, TRUE); // a stream without an image is an error (JERR_NO_IMAGE)
	out[0] = (int)g->d.image_width;
	out[1] = (int)g->d.image_height;
	out[2] = g->d.num_components;
	out[3] = (int)g->d.jpeg_color_space;
	out[4] = g->d.progressive_mode;
	return 0;
}

// ig_jpeg_decode decodes at scale num/8 into dst (rows of pitch bytes, at most
// maxRows of them) as RGB, grayscale or CMYK (gray, cmyk). It returns -1 on
// error; *rows is the number of rows written, *ow and *oh the output size.
static int ig_jpeg_decode(igjpeg *g, int num, int gray, int cmyk, unsigned char *dst, long pitch, int maxRows,
		int *rows, int *ow, int *oh) {
	*rows = 0;
	if (setjmp(g->jb)) return -1;
	g->d.scale_num = num;
	g->d.scale_denom = 8;
	g->d.out_color_space = gray ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
	jpeg_calc_output_dimensions(&g->d);
	*ow = (int)g->d.output_width;
	*oh = (int)g->d.output_height;
	if ((long)g->d.output_width * g->d.output_components > pitch || (int)g->d.output_height > maxRows) {
		snprintf(g->msg, sizeof g->msg, "output %ux%ux%d does not fit the buffer", g->d.output_width,
			g->d.output_height, g->d.output_components);
		return -1;
	}
	jpeg_start_decompress(&g->d);
	JSAMPROW ptr[16];
	while (g->d.output_scanline < g->d.output_height) {
		int n = (int)(g->d.output_height - g->d.output_scanline);
		if (n > 16) n = 16;
		for (int i = 0; i < n; i++) ptr[i] = dst + (long)(g->d.output_scanline + i) * pitch;
		if (jpeg_read_scanlines(&g->d, ptr, (JDIMENSION)n) == 0) break;
		*rows = (int)g->d.output_scanline;
	}
	if (*rows == (int)g->d.output_height) jpeg_finish_decompress(&g->d); // reads to EOI
	return 0;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// JPEG decoding through libjpeg-turbo's libjpeg API.
//
// Every image gets a decompressor of its own, destroyed after it (about 1 µs,
// BenchmarkJPEGDecompressorNew, against milliseconds for the decode). A
// libjpeg decompressor keeps state from one image to the next by design: the
// quantization and Huffman tables of an earlier stream serve a later
// "abbreviated" stream that omits them. A pooled decompressor (this package
// pooled TurboJPEG handles once) decodes one client's bogus bytes with another
// client's tables; TurboJPEG 2.1's header call also reports success without
// writing its outputs for a stream with no frame header. The libjpeg API tells
// how many rows a decode really wrote, which TurboJPEG does not: a stream can
// "succeed" without writing a single row, leaving a pooled pixel buffer as the
// previous image left it. Such an image is refused.

// jpegMaxMemory caps libjpeg's own allocations per image (a progressive JPEG's
// coefficient buffer grows with its full size, whatever the DCT scale): it
// covers max_pixels at 3 components of 2-byte coefficients, plus slack.
func (p *Preprocessor) jpegMaxMemory() int64 { return 6*p.opts.MaxPixels + 16<<20 }

// jpegScales are the numerators of the DCT scales n/8 libjpeg-turbo offers.
var jpegScales = [...]int{1, 2, 3, 4, 5, 6, 7, 8}

// pickScale returns the smallest numerator n of a scale n/8 whose scaled span
// of a w x h image is at least tw x th (stored orientation), times
// p.oversample.
func (p *Preprocessor) pickScale(w, h, tw, th int) int {
	for _, n := range jpegScales {
		fw := float64(w*n) / 8
		fh := float64(h*n) / 8
		if fw >= float64(tw)*p.oversample && fh >= float64(th)*p.oversample {
			return n
		}
	}
	return 8
}

// JPEG colorspaces (J_COLOR_SPACE) of the headers this package decodes.
const (
	jcsGray  = C.JCS_GRAYSCALE
	jcsRGB   = C.JCS_RGB
	jcsYCbCr = C.JCS_YCbCr
	jcsCMYK  = C.JCS_CMYK
	jcsYCCK  = C.JCS_YCCK
)

// jpegDecoder is one image's decompressor (C memory) and the outputs of its
// calls (pinned Go memory handed to C).
type jpegDecoder struct {
	g   *C.igjpeg
	hdr [5]C.int
	out [3]C.int // rows written, output width, output height
	pin runtime.Pinner
}

func (d *jpegDecoder) message() string { return C.GoString(&d.g.msg[0]) }

// jpegDecoders pools the Go side of jpegDecoder (its C decompressor is never
// reused); every call writes hdr and out before they are read.
var jpegDecoders = sync.Pool{New: func() any { return new(jpegDecoder) }}

// decodeJPEG decodes data into s.dec at the chosen DCT scale and applies
// the EXIF orientation.
func (p *Preprocessor) decodeJPEG(data []byte, s *scratch) (source, error) {
	var d *jpegDecoder
	if s.fresh {
		d = new(jpegDecoder)
	} else {
		d = jpegDecoders.Get().(*jpegDecoder)
		defer jpegDecoders.Put(d)
	}
	d.g = C.ig_jpeg_new()
	if d.g == nil {
		return source{}, fmt.Errorf("cannot decode JPEG: cannot create a decompressor: %w", ErrBadImage)
	}
	defer func() {
		C.ig_jpeg_free(d.g)
		d.g = nil
	}()
	// libjpeg reads data between calls: it stays pinned until the decompressor is freed.
	d.pin.Pin(unsafe.SliceData(data))
	defer d.pin.Unpin()
	in := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	if C.ig_jpeg_header(d.g, in, C.ulong(len(data)), C.long(p.jpegMaxMemory()), &d.hdr[0]) != 0 {
		return source{}, fmt.Errorf("cannot decode JPEG header: %s: %w", d.message(), ErrBadImage)
	}
	W, H, comps, cs := int(d.hdr[0]), int(d.hdr[1]), int(d.hdr[2]), d.hdr[3]
	if err := p.checkPixels("JPEG", W, H); err != nil {
		return source{}, err
	}
	gray, cmyk := false, false
	switch {
	case cs == jcsGray && comps == 1:
		gray = true
	case (cs == jcsYCbCr || cs == jcsRGB) && comps == 3:
	case (cs == jcsCMYK || cs == jcsYCCK) && comps == 4:
		cmyk = true
	default:
		return source{}, fmt.Errorf("cannot decode JPEG: %d components in colorspace %d are not supported: %w", comps, int(cs), ErrUnsupportedFormat)
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
	num := p.pickScale(W, H, tw, th)
	sw := (W*num + 7) / 8 // libjpeg's jdiv_round_up
	sh := (H*num + 7) / 8
	bpp, ch := 3, 3
	switch {
	case gray:
		bpp, ch = 1, 1
	case cmyk:
		bpp = 4
	}
	s.dec = s.buf(sw * sh * bpp)
	buf := *s.dec
	rc := C.ig_jpeg_decode(d.g, C.int(num), cbool(gray), cbool(cmyk), (*C.uchar)(unsafe.Pointer(unsafe.SliceData(buf))),
		C.long(sw*bpp), C.int(sh), &d.out[0], &d.out[1], &d.out[2])
	if rc != 0 {
		return source{}, fmt.Errorf("cannot decode JPEG: %s: %w", d.message(), ErrBadImage)
	}
	if rows, ow, oh := int(d.out[0]), int(d.out[1]), int(d.out[2]); ow != sw || oh != sh || rows != sh {
		return source{}, fmt.Errorf("cannot decode JPEG: %d of its %d rows (at %dx%d) could be decoded: %w", rows, sh, ow, oh, ErrBadImage)
	}
	// Like Pillow, refuse data that ends before the image does ("image file is truncated":
	// libjpeg pads the missing rows); tolerate other warnings (extraneous bytes...).
	if d.g.truncated != 0 {
		return source{}, fmt.Errorf("cannot decode JPEG: data is truncated (%s): %w", d.message(), ErrBadImage)
	}
	if cmyk {
		cmykToRGB(buf[:sw*sh*4], sw*sh)
		bpp = 3
		buf = buf[:sw*sh*3]
	}
	src := source{
		pix: buf, stride: sw * bpp, bpp: bpp, ch: ch, w: sw, h: sh,
		x0: 0, x1: float64(W*num) / 8,
		y0: 0, y1: float64(H*num) / 8,
		dispW: dispW, dispH: dispH,
	}
	if o != 1 {
		s.rot = s.buf(sw * sh * bpp)
		src = orient(&src, o, *s.rot)
	}
	return src, nil
}

// newAndFreeDecompressor creates and destroys one decompressor: what every
// image pays for not reusing one (BenchmarkJPEGDecompressorNew).
func newAndFreeDecompressor() {
	if g := C.ig_jpeg_new(); g != nil {
		C.ig_jpeg_free(g)
	}
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
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
