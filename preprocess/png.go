package preprocess

/*
#cgo LDFLAGS: -lspng
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <spng.h>

// Every libspng allocation (zlib's included: libspng routes them through the
// context's allocator) carries its size in a 16-byte header, so the C heap
// held by PNG decoding is known exactly: ig_spng_live now, ig_spng_peak the
// most since the last reset (tests read both; nothing else depends on them).
static _Atomic long long ig_spng_live, ig_spng_peak;

static void ig_spng_note(long long d) {
	long long v = atomic_fetch_add(&ig_spng_live, d) + d;
	long long p = atomic_load(&ig_spng_peak);
	while (v > p && !atomic_compare_exchange_weak(&ig_spng_peak, &p, v)) {}
}

static void *ig_spng_malloc(size_t n) {
	if (n > SIZE_MAX - 16) return NULL;
	unsigned char *b = malloc(n + 16);
	if (b == NULL) return NULL;
	memcpy(b, &n, sizeof n);
	ig_spng_note((long long)n);
	return b + 16;
}

static void ig_spng_free(void *p) {
	if (p == NULL) return;
	unsigned char *b = (unsigned char *)p - 16;
	size_t n;
	memcpy(&n, b, sizeof n);
	ig_spng_note(-(long long)n);
	free(b);
}

static void *ig_spng_realloc(void *p, size_t n) {
	if (p == NULL) return ig_spng_malloc(n);
	if (n > SIZE_MAX - 16) return NULL;
	unsigned char *b = (unsigned char *)p - 16;
	size_t old;
	memcpy(&old, b, sizeof old);
	unsigned char *nb = realloc(b, n + 16);
	if (nb == NULL) return NULL;
	memcpy(nb, &n, sizeof n);
	ig_spng_note((long long)n - (long long)old);
	return nb + 16;
}

static void *ig_spng_calloc(size_t count, size_t size) {
	if (size != 0 && count > (SIZE_MAX - 16) / size) return NULL;
	void *p = ig_spng_malloc(count * size);
	if (p != NULL) memset(p, 0, count * size);
	return p;
}

static long long ig_spng_live_bytes(void) { return atomic_load(&ig_spng_live); }
static long long ig_spng_peak_reset(void) {
	long long v = atomic_load(&ig_spng_live);
	atomic_store(&ig_spng_peak, v);
	return v;
}
static long long ig_spng_peak_bytes(void) { return atomic_load(&ig_spng_peak); }

// ig_png_open creates a decoder for the PNG in buf (which must stay valid and
// unmoved until ig_png_free): CRC errors in any chunk refuse the image, as
// image/png and Pillow do; compressed text and ICC profiles are limited to
// chunk_limit bytes each once inflated, ancillary data kept to cache_limit.
static spng_ctx *ig_png_open(const void *buf, size_t len, size_t chunk_limit, size_t cache_limit, int *err) {
	struct spng_alloc a = {ig_spng_malloc, ig_spng_realloc, ig_spng_calloc, ig_spng_free};
	spng_ctx *ctx = spng_ctx_new2(&a, 0);
	if (ctx == NULL) {
		*err = SPNG_EMEM;
		return NULL;
	}
	if ((*err = spng_set_png_buffer(ctx, buf, len)) != 0 ||
		(*err = spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_ERROR)) != 0 ||
		(*err = spng_set_chunk_limits(ctx, chunk_limit, cache_limit)) != 0) {
		spng_ctx_free(ctx);
		return NULL;
	}
	return ctx;
}

// ig_png_start reads the chunks up to the image data and prepares a
// progressive decode of raw (big-endian, packed) scanlines; plte receives the
// palette of an indexed image (n entries).
static int ig_png_start(spng_ctx *ctx, int indexed, unsigned char *plte, int *n) {
	int rc = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RAW, SPNG_DECODE_PROGRESSIVE);
	if (rc != 0) return rc;
	*n = 0;
	if (indexed) {
		struct spng_plte p;
		if ((rc = spng_get_plte(ctx, &p)) != 0) return rc;
		for (uint32_t i = 0; i < p.n_entries && i < 256; i++) {
			plte[3 * i] = p.entries[i].red;
			plte[3 * i + 1] = p.entries[i].green;
			plte[3 * i + 2] = p.entries[i].blue;
		}
		*n = (int)p.n_entries;
	}
	return 0;
}

// ig_png_rows decodes up to n scanlines of a non-interlaced image into out
// (pitch bytes apart, rowbytes each). It returns the number decoded, or a
// negative libspng error; *eoi is set after the last scanline.
static int ig_png_rows(spng_ctx *ctx, unsigned char *out, size_t pitch, size_t rowbytes, int n, int *eoi) {
	*eoi = 0;
	for (int i = 0; i < n; i++) {
		int rc = spng_decode_scanline(ctx, out + (size_t)i * pitch, rowbytes);
		if (rc == SPNG_EOI) {
			*eoi = 1;
			return i + 1;
		}
		if (rc != 0) return -rc;
	}
	return n;
}

// ig_png_pass_row decodes the next scanline of an interlaced image into out
// and says which pass and image row it belongs to. 0, SPNG_EOI after the
// last one, or a libspng error.
static int ig_png_pass_row(spng_ctx *ctx, unsigned char *out, size_t len, int *pass, int *row) {
	struct spng_row_info ri;
	int rc = spng_get_row_info(ctx, &ri);
	if (rc != 0) return rc;
	*pass = ri.pass;
	*row = (int)ri.row_num;
	return spng_decode_scanline(ctx, out, len);
}
*/
import "C"

import (
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"unsafe"
)

// PNG decoding through libspng (Debian libspng0), row by row straight into
// the resampler.
//
// libspng rather than libpng: it reports errors by return code (libpng, like
// libjpeg, longjmps out of its callbacks: every entry point needs setjmp), it
// takes an allocator, so its memory and zlib's are counted exactly (the memory
// test reads that count), it decodes from the request's buffer without a
// copy, returns raw big-endian scanlines (this package converts them with
// Pillow's rules, below, instead of trusting a library's 16-to-8-bit or
// palette conversion), and it is the faster of the two. Pillow uses neither
// (its own filter code on zlib), so neither is "Pillow's" decoder.
//
// Before decoding, every chunk is checked whole with a correct CRC up to an
// IEND (image/png and Pillow refuse a broken file too), and the ancillary
// chunks libspng would keep in memory (text, ICC profile, EXIF: none changes
// a pixel of convert('RGB')) are stripped from a copy, so what the decoder
// holds follows from the header and the chunk sizes alone.
//
// Memory does not grow with the image's height: a non-interlaced PNG is
// decoded one scanline at a time; rows above the crop are decoded (the
// filters need them) and dropped, rows feeding the crop go through the
// horizontal pass as they arrive, and decoding stops after the last row the
// crop needs. The rest is not inflated: a file cut short is refused (by the
// chunk check) as before; only a deliberately corrupt zlib stream below the
// crop, with valid CRCs, goes unnoticed. An interlaced (Adam7) PNG cannot stream
// this way (its last pass holds every other row of the whole image): it is
// decoded completely, keeping only the rows and columns the resampler reads,
// 8-bit, which PeakBytes counts.
//
// Conversion, as Pillow's convert('RGB') (and this package's image/png path
// before it): alpha is dropped, not composited; tRNS ignored; palettes
// expanded, indices past the palette's end gray (i, i, i); 16-bit samples keep their
// high byte; gray (with or without alpha) stays one channel; 1, 2 and 4-bit
// gray are scaled to 0..255 (x255, x85, x17).

const (
	pngChunkLimit = 1 << 20 // inflated zTXt, iTXt or iCCP (Pillow's MAX_TEXT_CHUNK)
	pngCacheLimit = 8 << 20 // all ancillary chunk data libspng keeps
)

type pngDecoder struct {
	ctx  *C.spng_ctx
	pin  runtime.Pinner
	err  C.int
	n    C.int // palette entries; rows decoded
	eoi  C.int
	pass C.int
	row  C.int
	plte [768]C.uchar
}

var pngDecoders = sync.Pool{New: func() any { return new(pngDecoder) }}

func (d *pngDecoder) open(data []byte) error {
	d.pin.Pin(unsafe.SliceData(data))
	d.ctx = C.ig_png_open(unsafe.Pointer(unsafe.SliceData(data)), C.size_t(len(data)), pngChunkLimit, pngCacheLimit, &d.err)
	if d.ctx == nil {
		d.pin.Unpin()
		return fmt.Errorf("cannot decode PNG: %s: %w", spngError(d.err), ErrBadImage)
	}
	return nil
}

func (d *pngDecoder) close() {
	if d.ctx != nil {
		C.spng_ctx_free(d.ctx)
		d.ctx = nil
		d.pin.Unpin()
	}
}

func spngError(rc C.int) string {
	if rc < 0 {
		rc = -rc
	}
	return C.GoString(C.spng_strerror(rc))
}

// pngPlan is how a PNG will be decoded under p's options.
type pngPlan struct {
	pngHeader
	rowBytes      int // bytes of one raw scanline (without the filter byte)
	ch            int // channels after conversion: 1 (gray) or 3
	batch         int // scanlines decoded per cgo call
	xFirst, xLast int // columns the resampler reads
	yFirst, yLast int // rows the resampler reads
}

func (p *Preprocessor) planPNG(data []byte) (pngPlan, error) {
	h, err := parsePNGHeader(data)
	if err != nil {
		return pngPlan{}, err
	}
	if err := p.checkPixels("PNG", h.w, h.h); err != nil {
		return pngPlan{}, err
	}
	pl := pngPlan{pngHeader: h, ch: 3}
	if h.colorType == 0 || h.colorType == 4 {
		pl.ch = 1
	}
	pl.rowBytes = int((int64(h.w)*int64(h.channels()*h.depth) + 7) / 8)
	pl.batch = max(1, min(16, (64<<10)/pl.rowBytes))
	g := pl.geometry()
	pl.xFirst, pl.xLast, pl.yFirst, pl.yLast = p.span(&g)
	return pl, nil
}

func (pl *pngPlan) geometry() source {
	return source{w: pl.w, h: pl.h, ch: pl.ch, x1: float64(pl.w), y1: float64(pl.h), dispW: pl.w, dispH: pl.h}
}

// decodePNG streams data's rows into the resampler and writes the slot.
func (p *Preprocessor) decodePNG(data []byte, s *scratch, out sink) error {
	pl, err := p.planPNG(data)
	if err != nil {
		return err
	}
	// Every chunk whole and intact, IEND at the end, before decoding: the rows
	// below the crop are never decoded, the file must still be sound.
	stripped, err := pngScan(data, true)
	if err != nil {
		return err
	}
	if stripped > 0 {
		s.in = s.buf(stripped)
		data = pngStrip(*s.in, data)
	}
	var d *pngDecoder
	if s.fresh {
		d = new(pngDecoder)
	} else {
		d = pngDecoders.Get().(*pngDecoder)
		defer pngDecoders.Put(d)
	}
	if err := d.open(data); err != nil {
		return err
	}
	defer d.close()
	if rc := C.ig_png_start(d.ctx, cbool(pl.colorType == 3), &d.plte[0], &d.n); rc != 0 {
		return fmt.Errorf("cannot decode PNG: %s: %w", spngError(rc), ErrBadImage)
	}
	var cv pngConverter
	cv.init(&pl, d)
	g := pl.geometry()
	j := p.newJob(s, &g)
	if pl.interlace {
		err = p.pngInterlaced(d, &pl, &cv, &j, s)
	} else {
		err = p.pngRows(d, &pl, &cv, &j, s)
	}
	if err != nil {
		return err
	}
	p.finishJob(&j, s, out)
	return nil
}

// pngRows decodes a non-interlaced PNG down to the last row the crop needs.
func (p *Preprocessor) pngRows(d *pngDecoder, pl *pngPlan, cv *pngConverter, j *resampleJob, s *scratch) error {
	s.dec = s.buf(pl.batch * pl.rowBytes)
	raw := *s.dec
	n8 := (j.xLast - j.xFirst) * pl.ch
	if !cv.direct {
		s.rot = s.buf(n8)
	}
	for y := 0; y < j.yLast; {
		n := min(pl.batch, j.yLast-y)
		if y < j.yFirst {
			n = min(n, j.yFirst-y)
		}
		if s.stopped() {
			return errStopped
		}
		got := C.ig_png_rows(d.ctx, (*C.uchar)(unsafe.Pointer(unsafe.SliceData(raw))), C.size_t(pl.rowBytes), C.size_t(pl.rowBytes), C.int(n), &d.eoi)
		if got < 0 {
			return fmt.Errorf("cannot decode PNG: row %d: %s: %w", y, spngError(got), ErrBadImage)
		}
		if int(got) != n || (d.eoi != 0) != (y+n == pl.h) {
			return fmt.Errorf("cannot decode PNG: %d of %d rows from row %d: %w", int(got), n, y, ErrBadImage)
		}
		for i := range n {
			if y+i < j.yFirst {
				continue
			}
			r := raw[i*pl.rowBytes : (i+1)*pl.rowBytes]
			if cv.direct {
				j.row(y+i, r, cv.bpp, 0)
			} else {
				row8 := (*s.rot)[:n8]
				cv.convert(row8, r, j.xFirst, j.xLast-j.xFirst)
				j.row(y+i, row8, pl.ch, j.xFirst)
			}
		}
		y += n
	}
	if j.yLast == pl.h {
		// Decoded to the end: libspng reads the chunks after the image data to IEND.
		if rc := C.spng_decode_chunks(d.ctx); rc != 0 {
			return fmt.Errorf("cannot decode PNG: after the image data: %s: %w", spngError(rc), ErrBadImage)
		}
	}
	return nil
}

// pngInterlaced decodes an Adam7 PNG completely, keeping the rows and
// columns the resampler reads (8-bit), then runs the horizontal pass.
func (p *Preprocessor) pngInterlaced(d *pngDecoder, pl *pngPlan, cv *pngConverter, j *resampleJob, s *scratch) error {
	rw := j.xLast - j.xFirst
	s.rot = s.buf((j.yLast - j.yFirst) * rw * pl.ch) // the kept region
	region := *s.rot
	s.dec = s.buf(pl.rowBytes + pl.w*pl.ch) // one pass scanline, raw and converted
	raw, conv := (*s.dec)[:pl.rowBytes], (*s.dec)[pl.rowBytes:]
	for i := 0; ; i++ {
		if i%64 == 0 && s.stopped() {
			return errStopped
		}
		rc := C.ig_png_pass_row(d.ctx, (*C.uchar)(unsafe.Pointer(unsafe.SliceData(raw))), C.size_t(pl.rowBytes), &d.pass, &d.row)
		if rc != 0 && rc != C.SPNG_EOI {
			return fmt.Errorf("cannot decode PNG: interlaced row: %s: %w", spngError(rc), ErrBadImage)
		}
		pass, y := int(d.pass), int(d.row)
		if pass < 0 || pass > 6 || y < 0 || y >= pl.h {
			return fmt.Errorf("cannot decode PNG: pass %d row %d: %w", pass, y, ErrBadImage)
		}
		if y >= j.yFirst && y < j.yLast {
			x0, dx := adam7X[pass][0], adam7X[pass][1]
			// Pixels of this pass in [xFirst, xLast): i from i0 to i1.
			i0 := max(0, (j.xFirst-x0+dx-1)/dx)
			i1 := (j.xLast - x0 + dx - 1) / dx
			if i1 > i0 {
				cv.convert(conv, raw, i0, i1-i0)
				dst := region[(y-j.yFirst)*rw*pl.ch:]
				for i := i0; i < i1; i++ {
					x := x0 + i*dx - j.xFirst
					copy(dst[x*pl.ch:(x+1)*pl.ch], conv[(i-i0)*pl.ch:])
				}
			}
		}
		if rc == C.SPNG_EOI {
			break
		}
	}
	if rc := C.spng_decode_chunks(d.ctx); rc != 0 {
		return fmt.Errorf("cannot decode PNG: after the image data: %s: %w", spngError(rc), ErrBadImage)
	}
	for y := j.yFirst; y < j.yLast; y++ {
		j.row(y, region[(y-j.yFirst)*rw*pl.ch:], pl.ch, j.xFirst)
	}
	return nil
}

// adam7X: first column and column step of each pass.
var adam7X = [7][2]int{{0, 8}, {4, 8}, {0, 4}, {2, 4}, {0, 2}, {1, 2}, {0, 1}}

// pngConverter turns raw scanlines into 8-bit RGB or gray.
type pngConverter struct {
	pl     *pngPlan
	direct bool // raw rows are usable as they are (8-bit gray, RGB, RGBA)
	bpp    int  // bytes per pixel of a direct row
	pal    [256][3]uint8
}

// pngDirect tells whether raw scanlines are usable as they are: 8-bit gray,
// RGB or RGBA.
func pngDirect(h *pngHeader) bool {
	return h.depth == 8 && (h.colorType == 0 || h.colorType == 2 || h.colorType == 6)
}

func (c *pngConverter) init(pl *pngPlan, d *pngDecoder) {
	c.pl = pl
	if pngDirect(&pl.pngHeader) {
		c.direct, c.bpp = true, pl.channels()
	}
	if pl.colorType == 3 {
		// An index past the palette's end (an invalid file that decoders
		// accept) reads as Pillow reads it: from its default palette, the
		// gray ramp, (i, i, i).
		n := min(int(d.n), 256)
		for i := range n {
			c.pal[i] = [3]uint8{uint8(d.plte[3*i]), uint8(d.plte[3*i+1]), uint8(d.plte[3*i+2])}
		}
		for i := n; i < 256; i++ {
			c.pal[i] = [3]uint8{uint8(i), uint8(i), uint8(i)}
		}
	}
}

// convert writes pixels first..first+n-1 of raw scanline r into dst, 8-bit,
// pl.ch bytes each.
func (c *pngConverter) convert(dst, r []byte, first, n int) {
	pl := c.pl
	switch {
	case pl.colorType == 3:
		d := dst[:3*n]
		if pl.depth == 8 {
			for i, v := range r[first : first+n] {
				q := &c.pal[v]
				d[3*i], d[3*i+1], d[3*i+2] = q[0], q[1], q[2]
			}
			return
		}
		for i := range n {
			q := &c.pal[subSample(r, first+i, pl.depth)]
			d[3*i], d[3*i+1], d[3*i+2] = q[0], q[1], q[2]
		}
	case pl.colorType == 0 && pl.depth < 8:
		scale := uint8(255 / (1<<pl.depth - 1))
		d := dst[:n]
		for i := range d {
			d[i] = subSample(r, first+i, pl.depth) * scale
		}
	default:
		// Byte samples, or the high byte of 16-bit ones: step bytes between
		// pixels, the gray or R, G, B samples at offsets 0 or 0, s, 2s.
		ss := pl.depth / 8
		step := pl.channels() * ss
		src := r[first*step:]
		if pl.ch == 1 {
			d := dst[:n]
			for i := range d {
				d[i] = src[i*step]
			}
			return
		}
		d := dst[:3*n]
		src = src[:(n-1)*step+2*ss+1]
		for i := range n {
			q := src[i*step:]
			d[3*i], d[3*i+1], d[3*i+2] = q[0], q[ss], q[2*ss]
		}
	}
}

// subSample returns sample i of a packed row of depth-bit samples.
func subSample(r []byte, i, depth int) uint8 {
	bit := i * depth
	return (r[bit>>3] >> (8 - depth - bit&7)) & (1<<depth - 1)
}

// pngScan walks a PNG's chunks after the signature: every chunk must be
// whole (and, with crc, have a correct CRC) and an IEND must end them. It
// returns the size of the PNG without the ancillary chunks libspng would
// keep in memory (0 when there are none): text, ICC profile, EXIF,
// suggested palettes. None of them changes a pixel of convert('RGB').
func pngScan(b []byte, crc bool) (stripped int, err error) {
	n, drop := 8, false
	for i := 8; ; {
		if i+12 > len(b) {
			return 0, fmt.Errorf("cannot decode PNG: data ends before IEND (%d bytes): %w", len(b), ErrBadImage)
		}
		l := int64(be32(b[i:]))
		if l > int64(len(b)-i-12) {
			return 0, fmt.Errorf("cannot decode PNG: chunk at %d declares %d bytes past the data's end: %w", i, l, ErrBadImage)
		}
		end := i + 8 + int(l)
		if crc && crc32.ChecksumIEEE(b[i+4:end]) != be32(b[end:]) {
			return 0, fmt.Errorf("cannot decode PNG: %q chunk at %d: CRC mismatch: %w", b[i+4:i+8], i, ErrBadImage)
		}
		typ := string(b[i+4 : i+8])
		if pngKeptChunk(typ) {
			drop = true
		} else {
			n += 12 + int(l)
		}
		if typ == "IEND" {
			if !drop {
				return 0, nil
			}
			return n, nil
		}
		i = end + 4
	}
}

// pngKeptChunk names the ancillary chunks libspng parses into memory.
func pngKeptChunk(typ string) bool {
	switch typ {
	case "tEXt", "zTXt", "iTXt", "iCCP", "eXIf", "sPLT":
		return true
	}
	return false
}

// pngStrip copies b without the chunks pngKeptChunk names into dst (of
// pngScan's size) and returns it.
func pngStrip(dst, b []byte) []byte {
	dst = append(dst[:0], b[:8]...)
	for i := 8; i+12 <= len(b); {
		l := int(be32(b[i:]))
		typ := string(b[i+4 : i+8])
		if !pngKeptChunk(typ) {
			dst = append(dst, b[i:i+12+l]...)
		}
		if typ == "IEND" {
			break
		}
		i += 12 + l
	}
	return dst
}

// spngLiveBytes and spngPeakReset expose the allocator's counts (tests).
func spngLiveBytes() int64 { return int64(C.ig_spng_live_bytes()) }

// spngPeakReset sets the peak to the live count and returns it; spngPeak
// returns the most held since.
func spngPeakReset() int64 { return int64(C.ig_spng_peak_reset()) }
func spngPeak() int64      { return int64(C.ig_spng_peak_bytes()) }

func (p *Preprocessor) probePNG(data []byte) (Info, memUse, error) {
	pl, err := p.planPNG(data)
	if err != nil {
		return Info{}, memUse{}, err
	}
	stripped, err := pngScan(data, false)
	if err != nil {
		return Info{}, memUse{}, err
	}
	info := Info{Format: "png", Width: pl.w, Height: pl.h, Channels: pl.channels(), BytesPerSample: max(pl.depth/8, 1)}
	return info, p.pngMemory(&pl, stripped), nil
}

// pngMemory models decodePNG. libspng holds its memory for the whole decode
// (C heap, counted by its allocator): the context, zlib's inflate state and
// 32 KiB window, two scanlines of the widest pass, for an interlaced image
// one more. Go heap: the copy without ancillary chunks when there are some
// (stripped bytes), the raw scanlines of one batch and an 8-bit row (or,
// interlaced, the kept region and a pass scanline), and the resampler's
// scratch.
func (p *Preprocessor) pngMemory(pl *pngPlan, stripped int) memUse {
	c := int64(pngCFixed) + 2*int64(pl.rowBytes+1+32)
	var g int64
	if stripped > 0 {
		g += p.bufBytes(stripped)
	}
	rw := pl.xLast - pl.xFirst
	if pl.interlace {
		c += int64(pl.rowBytes)
		g += p.bufBytes((pl.yLast-pl.yFirst)*rw*pl.ch) + p.bufBytes(pl.rowBytes+pl.w*pl.ch)
	} else {
		g += p.bufBytes(pl.batch * pl.rowBytes)
		if !pngDirect(&pl.pngHeader) {
			g += p.bufBytes(rw * pl.ch)
		}
	}
	geom := pl.geometry()
	g += p.resampleBytes(&geom) + goDecoderSlack
	return memUse{goEarly: g, c: c}
}

// pngCFixed: libspng's context and zlib's inflate state and window.
const pngCFixed = 48 << 10
