package preprocess

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	long long (*heap_probe)(void); // tests: reports the C heap in use, called at the decode's peak
	long long heap_at_peak;        // what heap_probe reported
	int scan;       // the input scan last counted
	long long scan_blocks, max_scan_blocks; // blocks the scans so far cover, and the most allowed
	volatile int *stop; // during ig_jpeg_decode: non-zero when the caller's context ended
	int stopped;        // the decode stopped for it
} igjpeg;

// A multi-scan JPEG's scans each cost a pass over the blocks of the components they hold,
// whatever the DCT scale, and a scan can be a few bytes (one end-of-band run in a progressive
// file, a few arithmetic-coded bits in a sequential one): a small file can take seconds of CPU
// (docs/internals.md, "JPEG scans are budgeted"). So:
//   - a sequential file scans each component once (the standard's rule): its scans may cover
//     the image's blocks once in all;
//   - a progressive file's scans may pass over the image's blocks IG_MAX_PASSES times in all
//     (libjpeg's own progression makes about 7 passes by the count below; encoders that
//     optimize their scans, some 10), or cover IG_FREE_SCAN_BLOCKS blocks (a 4-megapixel image
//     64 times) if that is more. An AC refinement scan visits every coefficient of its band in
//     every block even in an end-of-band run (4 times the cost of a first scan over the full
//     band): it counts ceil(band/16) passes;
//   - and there are never more than IG_MAX_SCANS scans.
#define IG_MAX_SCANS 500
#define IG_MAX_PASSES 64
#define IG_FREE_SCAN_BLOCKS (1LL << 22)

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

// ig_progress is called before each step of reading the input: it counts each new scan's
// blocks before the scan is decoded.
static void ig_progress(j_common_ptr c) {
	igjpeg *g = (igjpeg *)c->client_data;
	if (!c->is_decompressor) return;
	if (g->stop != NULL && *g->stop) { // once per scanline read, and per iMCU row of input consumed
		g->stopped = 1;
		snprintf(g->msg, sizeof g->msg, "stopped: the caller's context ended");
		longjmp(g->jb, 1);
	}
	j_decompress_ptr d = (j_decompress_ptr)c;
	if (d->input_scan_number > IG_MAX_SCANS) {
		snprintf(g->msg, sizeof g->msg, "progressive JPEG with more than %d scans", IG_MAX_SCANS);
		longjmp(g->jb, 1);
	}
	if (d->input_scan_number == g->scan) return;
	g->scan = d->input_scan_number;
	long long weight = 1;
	if (d->progressive_mode && d->Ss > 0 && d->Ah != 0) weight = (d->Se - d->Ss + 1 + 15) / 16;
	for (int i = 0; i < d->comps_in_scan; i++) {
		jpeg_component_info *ci = d->cur_comp_info[i];
		g->scan_blocks += weight * ci->width_in_blocks * ci->height_in_blocks;
	}
	if (g->scan_blocks > g->max_scan_blocks) {
		if (d->progressive_mode)
			snprintf(g->msg, sizeof g->msg, "progressive JPEG whose %d scans pass over its blocks more than %d times",
				d->input_scan_number, IG_MAX_PASSES);
		else
			snprintf(g->msg, sizeof g->msg, "sequential JPEG that scans a component more than once");
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

// ighdr is what the headers up to the first scan declare.
typedef struct {
	int w, h, comps, cs, progressive, multiscan, max_h, max_v;
	int hs[4], vs[4], wib[4], hib[4]; // per component: sampling factors, size in 8x8 blocks
} ighdr;

// ig_jpeg_header reads the headers up to the first scan into o. 0 on success,
// -1 on error (msg). buf must stay valid and unmoved until ig_jpeg_free.
static int ig_jpeg_header(igjpeg *g, const unsigned char *buf, unsigned long size, long max_mem, ighdr *o) {
	if (setjmp(g->jb)) return -1;
	g->d.mem->max_memory_to_use = max_mem;
	jpeg_mem_src(&g->d, buf, size);
	jpeg_read_header(&g->d, TRUE); // a stream without an image is an error (JERR_NO_IMAGE)
	o->w = (int)g->d.image_width;
	o->h = (int)g->d.image_height;
	o->comps = g->d.num_components;
	o->cs = (int)g->d.jpeg_color_space;
	o->progressive = g->d.progressive_mode;
	o->multiscan = jpeg_has_multiple_scans(&g->d);
	o->max_h = g->d.max_h_samp_factor;
	o->max_v = g->d.max_v_samp_factor;
	long long blocks = 0;
	for (int i = 0; i < g->d.num_components; i++) {
		jpeg_component_info *c = &g->d.comp_info[i];
		blocks += (long long)c->width_in_blocks * c->height_in_blocks;
		if (i >= 4) continue;
		o->hs[i] = c->h_samp_factor;
		o->vs[i] = c->v_samp_factor;
		o->wib[i] = (int)c->width_in_blocks;
		o->hib[i] = (int)c->height_in_blocks;
	}
	g->scan = 0;
	g->scan_blocks = 0;
	if (g->d.progressive_mode) {
		g->max_scan_blocks = blocks * IG_MAX_PASSES;
		if (g->max_scan_blocks < IG_FREE_SCAN_BLOCKS) g->max_scan_blocks = IG_FREE_SCAN_BLOCKS;
	} else {
		g->max_scan_blocks = blocks;
	}
	return 0;
}

// ig_jpeg_calc computes the output size at scale num/8 in the chosen color
// space without decoding: out[0], out[1] the output size, out[2..5] each
// component's IDCT output block size (libjpeg-turbo scales chroma up in the
// IDCT instead of upsampling where it can). Allocates nothing.
static int ig_jpeg_calc(igjpeg *g, int num, int gray, int cmyk, int *out) {
	if (setjmp(g->jb)) return -1;
	g->d.scale_num = num;
	g->d.scale_denom = 8;
	g->d.out_color_space = gray ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
	jpeg_calc_output_dimensions(&g->d);
	out[0] = (int)g->d.output_width;
	out[1] = (int)g->d.output_height;
	for (int i = 0; i < g->d.num_components && i < 4; i++) out[2 + i] = g->d.comp_info[i].DCT_scaled_size;
	return 0;
}

static int ig_jpeg_has_eoi(igjpeg *g);

// ig_jpeg_decode decodes at scale num/8, as RGB, grayscale or CMYK (gray,
// cmyk), only the window the resampler reads: columns from *x0 for *cw pixels
// (libjpeg rounds *x0 down to an iMCU column; both return what it kept), rows
// [y0, y1) into dst (rows of pitch bytes). Rows above the window are skipped
// (entropy-decoded, not transformed) up to one iMCU row before it, which is
// decoded and dropped so that the context rows fancy upsampling reads are the
// real ones. Rows below it are not decoded at all: a single-scan file's
// entropy-coded data is read only as far as the window's last iMCU row, and
// data cut short is noticed by the end-of-image marker the rest of the data
// must hold (ig_jpeg_has_eoi; g->truncated when it does not); a multi-scan
// file was read whole by jpeg_start_decompress. -1 on error; *rows counts the
// window's rows written, *ow and *oh are the full output size.
static int ig_jpeg_decode_stop(igjpeg *g, int num, int gray, int cmyk, unsigned char *dst, long pitch,
		int *x0, int *cw, int y0, int y1, int *rows, int *ow, int *oh);

// ig_jpeg_decode decodes as ig_jpeg_decode_stop does, watching *stop (when not NULL) for the
// duration of the call only: the pointer is not kept after it returns.
static int ig_jpeg_decode(igjpeg *g, int num, int gray, int cmyk, unsigned char *dst, long pitch,
		int *x0, int *cw, int y0, int y1, int *rows, int *ow, int *oh, int *stop) {
	g->stop = stop;
	int rc = ig_jpeg_decode_stop(g, num, gray, cmyk, dst, pitch, x0, cw, y0, y1, rows, ow, oh);
	g->stop = NULL;
	return rc;
}

static int ig_jpeg_decode_stop(igjpeg *g, int num, int gray, int cmyk, unsigned char *dst, long pitch,
		int *x0, int *cw, int y0, int y1, int *rows, int *ow, int *oh) {
	*rows = 0;
	if (setjmp(g->jb)) return -1;
	g->d.scale_num = num;
	g->d.scale_denom = 8;
	g->d.out_color_space = gray ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
	jpeg_calc_output_dimensions(&g->d);
	*ow = (int)g->d.output_width;
	*oh = (int)g->d.output_height;
	if (y0 < 0 || y1 > *oh || y0 >= y1 || *x0 < 0 || *cw <= 0 || *x0 + *cw > *ow) {
		snprintf(g->msg, sizeof g->msg, "window %d+%d x [%d, %d) outside the %dx%d output", *x0, *cw, y0, y1, *ow, *oh);
		return -1;
	}
	jpeg_start_decompress(&g->d);
	JDIMENSION xo = (JDIMENSION)*x0, w = (JDIMENSION)*cw;
	if (w < g->d.output_width) jpeg_crop_scanline(&g->d, &xo, &w);
	*x0 = (int)xo;
	*cw = (int)w;
	if ((long)w * g->d.output_components > pitch) {
		snprintf(g->msg, sizeof g->msg, "cropped row of %u pixels does not fit the buffer", w);
		return -1;
	}
	JSAMPARRAY drop = (*g->d.mem->alloc_sarray)((j_common_ptr)&g->d, JPOOL_IMAGE,
		w * (JDIMENSION)g->d.output_components, 1);
	int lpi = g->d.min_DCT_scaled_size * g->d.max_v_samp_factor; // rows per iMCU row
	int skip = (y0 / lpi - 1) * lpi;
	if (skip > 0) jpeg_skip_scanlines(&g->d, (JDIMENSION)skip);
	while ((int)g->d.output_scanline < y0)
		if (jpeg_read_scanlines(&g->d, drop, 1) == 0) return 0;
	JSAMPROW ptr[16];
	while ((int)g->d.output_scanline < y1) {
		int n = y1 - (int)g->d.output_scanline;
		if (n > 16) n = 16;
		for (int i = 0; i < n; i++) ptr[i] = dst + (long)((int)g->d.output_scanline - y0 + i) * pitch;
		if (jpeg_read_scanlines(&g->d, ptr, (JDIMENSION)n) == 0) return 0;
		*rows = (int)g->d.output_scanline - y0;
	}
	if (g->heap_probe != NULL) // before jpeg_finish_decompress or jpeg_abort_decompress frees the image's memory
		g->heap_at_peak = g->heap_probe();
	if (g->d.output_scanline < g->d.output_height) {
		// The rows below the window are not decoded: nothing of them is used, and
		// their entropy decoding is work for nothing. The data must still hold an
		// end-of-image marker (a file cut short does not).
		if (!ig_jpeg_has_eoi(g)) {
			if (g->warnings++ == 0)
				snprintf(g->msg, sizeof g->msg, "the data ends without an end-of-image marker");
			g->truncated = 1;
		}
		jpeg_abort_decompress(&g->d);
		return 0;
	}
	jpeg_finish_decompress(&g->d); // reads to EOI
	return 0;
}

// ig_jpeg_has_eoi tells whether the data not yet decoded holds the end-of-image
// marker: libjpeg read the whole file (a multi-scan one), or its entropy decoder
// stopped at the marker (unread_marker), or the bytes it has not read contain
// FF D9. Entropy-coded data cannot hold FF D9 (an FF there is followed by 00 or
// a restart marker), so the marker is the file's own, or one past its end.
static int ig_jpeg_has_eoi(igjpeg *g) {
	if (jpeg_input_complete(&g->d) || g->d.unread_marker == 0xD9) return 1;
	const unsigned char *p = g->d.src->next_input_byte;
	size_t n = g->d.src->bytes_in_buffer;
	while (n >= 2) {
		const unsigned char *ff = memchr(p, 0xFF, n - 1);
		if (ff == NULL) return 0;
		if (ff[1] == 0xD9) return 1;
		n -= (size_t)(ff + 1 - p);
		p = ff + 1;
	}
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
// Every image gets a decompressor of its own, destroyed after it (a microsecond,
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

// jpegScales are the numerators of the DCT scales n/8 a JPEG is decoded at:
// those libjpeg-turbo has SIMD code for (1/8 is the DC coefficient alone;
// 2/8, 4/8 and 8/8 have SSE2/AVX2 IDCTs, and at 2/8 and 4/8 the chroma of a
// 4:2:0 image is scaled up in the IDCT instead of being upsampled). Its
// 3/8, 5/8, 6/8 and 7/8 IDCTs are plain C: 3/8 costs twice the IDCT of 4/8
// on the article's photo (callgrind), 6/8 four times that of 8/8, so the
// next SIMD scale up is both cheaper and closer to the full decode.
var jpegScales = [...]int{1, 2, 4, 8}

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
	g    *C.igjpeg
	hdr  C.ighdr
	dim  [6]C.int // output width, height, and each component's IDCT block size
	out  [3]C.int // rows written, output width, output height
	crop [2]C.int // first column and width of the decoded window
	pin  runtime.Pinner
}

func (d *jpegDecoder) message() string { return C.GoString(&d.g.msg[0]) }

// jpegDecoders pools the Go side of jpegDecoder (its C decompressor is never
// reused); every call writes hdr, dim and out before they are read.
var jpegDecoders = sync.Pool{New: func() any { return new(jpegDecoder) }}

// open creates the decompressor and pins data for it: libjpeg reads data
// between calls. close must follow, whatever happens.
func (d *jpegDecoder) open(data []byte) error {
	d.g = C.ig_jpeg_new()
	if d.g == nil {
		return fmt.Errorf("cannot decode JPEG: cannot create a decompressor: %w", ErrBadImage)
	}
	d.pin.Pin(unsafe.SliceData(data))
	return nil
}

// close frees the decompressor (all of libjpeg's memory) and unpins the data.
// It may be called more than once.
func (d *jpegDecoder) close() {
	if d.g != nil {
		C.ig_jpeg_free(d.g)
		d.g = nil
	}
	d.pin.Unpin()
}

// jpegPlan is how a JPEG will be decoded under p's options: what its
// header declares and the DCT scale chosen for it.
type jpegPlan struct {
	w, h, comps  int // as stored
	gray, cmyk   bool
	progressive  bool // progressive mode (a scan count limit applies)
	multiscan    bool // several scans: libjpeg keeps every coefficient of the image
	maxH, maxV   int  // largest sampling factors
	hs, vs       [4]int
	wib, hib     [4]int // component size in 8x8 blocks
	orient       int    // EXIF orientation 1..8
	dispW, dispH int    // displayed size (after orientation)
	num          int    // DCT scale num/8
	sw, sh       int    // decoded (scaled) size
	dct          [4]int // per component IDCT output block size at that scale
	bpp, ch      int    // bytes per decoded pixel (4 for CMYK), channels after conversion
}

// jpegHeader reads data's headers with d (opened on data) and plans the
// decode: errors are those Process returns for the same headers.
func (p *Preprocessor) jpegHeader(d *jpegDecoder, data []byte) (jpegPlan, error) {
	in := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	if C.ig_jpeg_header(d.g, in, C.ulong(len(data)), C.long(p.jpegMaxMemory()), &d.hdr) != 0 {
		return jpegPlan{}, fmt.Errorf("cannot decode JPEG header: %s: %w", d.message(), ErrBadImage)
	}
	h := &d.hdr
	pl := jpegPlan{w: int(h.w), h: int(h.h), comps: int(h.comps), progressive: h.progressive != 0,
		multiscan: h.multiscan != 0, maxH: int(h.max_h), maxV: int(h.max_v)}
	for i := range min(pl.comps, 4) {
		pl.hs[i], pl.vs[i], pl.wib[i], pl.hib[i] = int(h.hs[i]), int(h.vs[i]), int(h.wib[i]), int(h.hib[i])
	}
	if err := p.checkPixels("JPEG", pl.w, pl.h); err != nil {
		return jpegPlan{}, err
	}
	cs := h.cs
	switch {
	case cs == jcsGray && pl.comps == 1:
		pl.gray = true
	case (cs == jcsYCbCr || cs == jcsRGB) && pl.comps == 3:
	case (cs == jcsCMYK || cs == jcsYCCK) && pl.comps == 4:
		pl.cmyk = true
	default:
		return jpegPlan{}, fmt.Errorf("cannot decode JPEG: %d components in colorspace %d are not supported: %w", pl.comps, int(cs), ErrUnsupportedFormat)
	}
	pl.orient = jpegOrientation(data)
	pl.dispW, pl.dispH = pl.w, pl.h
	if pl.orient >= 5 {
		pl.dispW, pl.dispH = pl.h, pl.w
	}
	// Target size of the resize, in stored orientation.
	tw, th := p.opts.Width, p.opts.Height
	if p.opts.Mode != ModeStretch {
		tw, th, _, _ = p.geometry(pl.dispW, pl.dispH)
	}
	if pl.orient >= 5 {
		tw, th = th, tw
	}
	pl.num = p.pickScale(pl.w, pl.h, tw, th)
	if C.ig_jpeg_calc(d.g, C.int(pl.num), cbool(pl.gray), cbool(pl.cmyk), &d.dim[0]) != 0 {
		return jpegPlan{}, fmt.Errorf("cannot decode JPEG header: %s: %w", d.message(), ErrBadImage)
	}
	pl.sw = (pl.w*pl.num + 7) / 8 // libjpeg's jdiv_round_up
	pl.sh = (pl.h*pl.num + 7) / 8
	if int(d.dim[0]) != pl.sw || int(d.dim[1]) != pl.sh {
		return jpegPlan{}, fmt.Errorf("cannot decode JPEG: scaled size %dx%d, expected %dx%d: %w", int(d.dim[0]), int(d.dim[1]), pl.sw, pl.sh, ErrBadImage)
	}
	for i := range min(pl.comps, 4) {
		pl.dct[i] = int(d.dim[2+i])
	}
	pl.bpp, pl.ch = 3, 3
	switch {
	case pl.gray:
		pl.bpp, pl.ch = 1, 1
	case pl.cmyk:
		pl.bpp = 4
	}
	return pl, nil
}

// jpegWindow is the part of a planned JPEG that is decoded: the stored
// (DCT-scaled) columns [x0, x0+cw) and rows [y0, y1) that hold every pixel
// the resampler reads, and where they land once oriented.
type jpegWindow struct {
	x0, cw, y0, y1 int // stored, scaled; x0 on an iMCU column as libjpeg crops
	dx0, dy0       int // top-left of the oriented window in the displayed image
	full           source
}

// jpegColumnMargin: columns decoded on each side of the ones the resampler
// reads. libjpeg's fancy upsampling treats a crop's edges as image edges, so
// the first and last column of a crop differ from the whole decode: 1 is
// enough (TestJPEGWindowMatchesWholeDecode fails with 0), 2 keeps one to spare.
const jpegColumnMargin = 2

// window plans the decode of only what the crop needs (everything when
// p.noWindow is set, for tests).
func (p *Preprocessor) jpegWindow(pl *jpegPlan) jpegWindow {
	stored := source{w: pl.sw, h: pl.sh, ch: pl.ch, x1: float64(pl.w*pl.num) / 8, y1: float64(pl.h*pl.num) / 8,
		dispW: pl.dispW, dispH: pl.dispH}
	w := jpegWindow{full: orientedGeometry(&stored, pl.orient)}
	if p.noWindow || pl.maxH > 2 || pl.maxV > 2 {
		// Sampling factors above 2 (4x2, 2x4 and such; no camera writes them) decode
		// whole: libjpeg-turbo 2.x crops their chroma rows too short when scaling (its
		// issue #669, fixed in 3.0: the colour conversion then reads stale heap bytes),
		// skipping rows of a progressive 2x4 file can loop forever, and skipping to the
		// last row of a baseline one warns of a premature end (TestUnusualSamplingJPEG).
		w.cw, w.y1 = pl.sw, pl.sh
		return w
	}
	xF, xL, yF, yL := p.span(&w.full)
	sx0, sy0, sx1, sy1 := storedRect(pl.orient, pl.sw, pl.sh, xF, yF, xL, yL)
	sx0 = max(0, sx0-jpegColumnMargin)
	sx1 = min(pl.sw, sx1+jpegColumnMargin)
	if sx0 > 0 || sx1 < pl.sw {
		align := pl.num
		if pl.comps > 1 {
			align *= pl.maxH
		}
		sx0 = sx0 / align * align
	}
	w.x0, w.cw, w.y0, w.y1 = sx0, sx1-sx0, sy0, sy1
	w.dx0, w.dy0, _, _ = displayedRect(pl.orient, pl.sw, pl.sh, w.x0, w.y0, w.x0+w.cw, w.y1)
	return w
}

// decodeJPEG decodes the window of data the crop needs at the chosen DCT
// scale, orients it, and resamples it into out.
func (p *Preprocessor) decodeJPEG(data []byte, s *scratch, out sink) error {
	var d *jpegDecoder
	if s.fresh {
		d = new(jpegDecoder)
	} else {
		d = jpegDecoders.Get().(*jpegDecoder)
		defer jpegDecoders.Put(d)
	}
	if err := d.open(data); err != nil {
		return err
	}
	defer d.close()
	pl, err := p.jpegHeader(d, data)
	if err != nil {
		return err
	}
	win := p.jpegWindow(&pl)
	region, err := p.decodeJPEGWindow(d, &pl, &win, s)
	if err != nil {
		return err
	}
	j := p.newJob(s, &win.full)
	for y := j.yFirst; y < j.yLast; y++ {
		j.row(y, region.pix[(y-win.dy0)*region.stride:], region.bpp, win.dx0)
	}
	p.finishJob(&j, s, out)
	return nil
}

// decodeJPEGWindow decodes win of a planned JPEG into s.dec, converts CMYK,
// orients it (into s.rot), and frees the decompressor.
func (p *Preprocessor) decodeJPEGWindow(d *jpegDecoder, pl *jpegPlan, win *jpegWindow, s *scratch) (source, error) {
	cw, rh, bpp := win.cw, win.y1-win.y0, pl.bpp
	if p.cHeapProbe != nil {
		d.g.heap_probe = (*[0]byte)(p.cHeapProbe)
	}
	s.dec = s.buf(cw * rh * bpp)
	buf := *s.dec
	d.out = [3]C.int{}
	d.crop = [2]C.int{C.int(win.x0), C.int(cw)}
	rc := C.ig_jpeg_decode(d.g, C.int(pl.num), cbool(pl.gray), cbool(pl.cmyk), (*C.uchar)(unsafe.Pointer(unsafe.SliceData(buf))),
		C.long(cw*bpp), &d.crop[0], &d.crop[1], C.int(win.y0), C.int(win.y1), &d.out[0], &d.out[1], &d.out[2],
		(*C.int)(unsafe.Pointer(s.stop)))
	if rc != 0 && d.g.stopped != 0 {
		return source{}, errStopped
	}
	if rc != 0 {
		return source{}, fmt.Errorf("cannot decode JPEG: %s: %w", d.message(), ErrBadImage)
	}
	if rows, ow, oh := int(d.out[0]), int(d.out[1]), int(d.out[2]); ow != pl.sw || oh != pl.sh || rows != rh {
		return source{}, fmt.Errorf("cannot decode JPEG: %d of its %d rows (at %dx%d) could be decoded: %w", rows, rh, ow, oh, ErrBadImage)
	}
	if x0, w := int(d.crop[0]), int(d.crop[1]); x0 != win.x0 || w != cw {
		return source{}, fmt.Errorf("cannot decode JPEG: libjpeg cropped columns %d+%d, expected %d+%d: %w", x0, w, win.x0, cw, ErrBadImage)
	}
	// Like Pillow, refuse data that ends before the image does ("image file is truncated":
	// libjpeg pads the missing rows); tolerate other warnings (extraneous bytes...).
	if d.g.truncated != 0 {
		return source{}, fmt.Errorf("cannot decode JPEG: data is truncated (%s): %w", d.message(), ErrBadImage)
	}
	if p.cHeapProbe != nil {
		p.onCHeapPeak(int64(d.g.heap_at_peak))
	}
	d.close() // libjpeg's memory goes back before the pixels are oriented and resampled
	if pl.cmyk {
		cmykToRGB(buf[:cw*rh*4], cw*rh)
		bpp = 3
		buf = buf[:cw*rh*3]
	}
	region := source{pix: buf, stride: cw * bpp, bpp: bpp, ch: pl.ch, w: cw, h: rh}
	if pl.orient != 1 {
		s.rot = s.buf(cw * rh * bpp)
		region = orient(&region, pl.orient, *s.rot)
	}
	return region, nil
}

// storedRect returns the stored pixels [sx0, sx1) x [sy0, sy1) that
// orientation o shows as the displayed rectangle [x0, x1) x [y0, y1) of a
// stored w x h image.
func storedRect(o, w, h, x0, y0, x1, y1 int) (sx0, sy0, sx1, sy1 int) {
	ax, ay := orientToStored(o, w, h, x0, y0)
	bx, by := orientToStored(o, w, h, x1-1, y1-1)
	return min(ax, bx), min(ay, by), max(ax, bx) + 1, max(ay, by) + 1
}

// displayedRect is the inverse of storedRect.
func displayedRect(o, w, h, sx0, sy0, sx1, sy1 int) (x0, y0, x1, y1 int) {
	var xs, ys [2]int
	for i, c := range [2][2]int{{sx0, sy0}, {sx1 - 1, sy1 - 1}} {
		xs[i], ys[i] = storedToOrient(o, w, h, c[0], c[1])
	}
	return min(xs[0], xs[1]), min(ys[0], ys[1]), max(xs[0], xs[1]) + 1, max(ys[0], ys[1]) + 1
}

// orientToStored returns the stored pixel that orientation o displays at
// (x, y), for a stored image of w x h pixels (as orient reads them).
func orientToStored(o, w, h, x, y int) (sx, sy int) {
	m := orientMaps[o]
	return orientPoint(m.swap, m.flipX, m.flipY, w, h, x, y)
}

// storedToOrient returns where orientation o displays stored pixel (sx, sy):
// orientToStored's inverse. A flip undoes itself; a transposition's inverse
// is the transposition with its flips exchanged, over the displayed size.
func storedToOrient(o, w, h, sx, sy int) (x, y int) {
	m := orientMaps[o]
	if m.swap {
		return orientPoint(true, m.flipY, m.flipX, h, w, sx, sy)
	}
	return orientPoint(false, m.flipX, m.flipY, w, h, sx, sy)
}

// orientPoint maps (x, y) by a transposition (swap), then flips across a
// w x h image.
func orientPoint(swap, flipX, flipY bool, w, h, x, y int) (int, int) {
	if swap {
		x, y = y, x
	}
	if flipX {
		x = w - 1 - x
	}
	if flipY {
		y = h - 1 - y
	}
	return x, y
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
