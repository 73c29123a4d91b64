package preprocess

import "fmt"

// Info is what an image's header declares, and what decoding it under a
// Preprocessor's options will cost. Probe fills it without decoding pixels.
type Info struct {
	// Format is "jpeg", "png", "webp", "gif", "bmp" or "tiff".
	Format string
	// Width and Height as the header declares them (before EXIF orientation).
	Width, Height int
	// Channels and BytesPerSample of the pixels the file stores: 3 and 1 for
	// an 8-bit RGB JPEG, 4 and 2 for a 16-bit RGBA PNG, 1 and 1 for a palette
	// PNG (its indices) or a PNG of 1, 2 or 4 bits per sample.
	Channels, BytesPerSample int
	// DecodedBytes is Width*Height*Channels*BytesPerSample: the size of the
	// raw pixels the header declares, whatever this package does with them.
	DecodedBytes int64
	// WorkBytes measures the decode's CPU work, in bytes of the rows it
	// produces: every image becomes 8-bit (or 16-bit) RGB or gray rows that
	// the resampler reads, so it is Width*Height*max(Channels,3)*
	// BytesPerSample (a palette, 1-bit or gray image, and a GIF's whole
	// screen, cost as much to expand and resample as RGB), plus a TIFF's
	// per-strip or per-tile overhead. Decodes that cost more than a
	// 16-megapixel RGB photo (48 MiB) are heavy to the gateway.
	WorkBytes int64
	// PeakBytes is the memory a Process call on these bytes holds at its
	// peak under this Preprocessor's options (DCT scale, resize and crop), in
	// both heaps: the Go heap (pixel buffers, resampler scratch, what a Go
	// codec allocates) and the C heap (libjpeg-turbo's buffers: a
	// progressive or multi-scan JPEG keeps every DCT coefficient of the
	// image, 2 bytes each, whatever the scale; libspng's context, zlib
	// state and two scanlines). A non-interlaced PNG streams: its cost grows
	// with its width, not its height; an interlaced one keeps the region the
	// crop reads, 8-bit. Pooled buffers count at their size class (the power
	// of two above the request, up to 16 MiB). Not counted: data itself, the
	// destination slot, and memory shared by all calls (the weight cache,
	// goroutine stacks). It is an upper bound that Process keeps
	// (TestPeakBytesBoundsAllocations measures it); docs/preprocessing.md
	// says how close it is per format.
	PeakBytes int64
}

// Probe reads data's header (no pixel is decoded, no pixel memory is
// allocated: microseconds) and returns what it declares and what Process
// would cost. Its errors are the ones Process returns for the same header:
// ErrUnsupportedFormat, ErrTooLarge (max_pixels) or ErrBadImage. A nil
// error does not mean Process succeeds: the rest of the data may be bad, or
// use a feature the codec lacks that only the decode reaches (a TIFF's tag
// types); Process never answers ErrTooLarge after a nil Probe.
// Safe for concurrent use; data is neither modified nor retained.
func (p *Preprocessor) Probe(data []byte) (Info, error) {
	info, _, err := p.probe(data)
	return info, err
}

// probe is Probe, with the memory model's parts.
func (p *Preprocessor) probe(data []byte) (Info, memUse, error) {
	if len(data) == 0 {
		return Info{}, memUse{}, fmt.Errorf("empty body: %w", ErrBadImage)
	}
	var (
		info Info
		mem  memUse
		err  error
	)
	switch detectFormat(data) {
	case formatJPEG:
		info, mem, err = p.probeJPEG(data)
	case formatPNG:
		info, mem, err = p.probePNG(data)
	case formatWebP:
		info, mem, err = p.probeWebP(data)
	case formatGIF, formatBMP, formatTIFF:
		info, mem, err = p.probeOther(detectFormat(data), data)
	default:
		return Info{}, memUse{}, unsupported(data)
	}
	if err != nil {
		return Info{}, memUse{}, err
	}
	info.DecodedBytes = int64(info.Width) * int64(info.Height) * int64(info.Channels) * int64(info.BytesPerSample)
	info.WorkBytes += int64(info.Width) * int64(info.Height) * int64(max(info.Channels, 3)) * int64(info.BytesPerSample)
	info.PeakBytes = mem.peak()
	return info, mem, nil
}

func unsupported(data []byte) error {
	return fmt.Errorf("cannot decode image: not JPEG, PNG, WebP, GIF, BMP or TIFF (first bytes % x): %w", data[:min(len(data), 8)], ErrUnsupportedFormat)
}

// memUse is a decode's memory by heap and phase. All Go memory a call
// allocates stays held until the call returns; C memory is freed when the
// codec is done, possibly before the Go memory of the late phase exists.
type memUse struct {
	goEarly int64 // Go heap allocated while the C codec runs
	c       int64 // C heap held by the codec at its peak
	goLate  int64 // Go heap allocated after the C codec's memory is freed
}

func (m memUse) goBytes() int64 { return m.goEarly + m.goLate }
func (m memUse) peak() int64    { return m.goEarly + max(m.c, m.goLate) }

// bufBytes is the memory held by scratch.buf(n): getBuf's size class, or n
// above the largest class (or when nothing is pooled).
func (p *Preprocessor) bufBytes(n int) int64 {
	if c := classOf(n); c < len(bufPools) && !p.fresh {
		return 1 << (c + minClassBits)
	}
	return goAlloc(int64(n))
}

// goAlloc is what Go's allocator takes for an n-byte object: its size class
// up to 32 KiB (at most an eighth more), whole 8 KiB pages above.
func goAlloc(n int64) int64 {
	if n <= 32<<10 {
		return n + n/8 + 16
	}
	return (n + 8191) &^ 8191
}

// goDecoderSlack covers the Go side of a decoder handle and small
// bookkeeping (pinner, error values) per call.
const goDecoderSlack = 4 << 10

func (p *Preprocessor) probeJPEG(data []byte) (Info, memUse, error) {
	d := jpegDecoders.Get().(*jpegDecoder)
	defer jpegDecoders.Put(d)
	if err := d.open(data); err != nil {
		return Info{}, memUse{}, err
	}
	defer d.close()
	pl, err := p.jpegHeader(d, data)
	if err != nil {
		return Info{}, memUse{}, err
	}
	info := Info{Format: "jpeg", Width: pl.w, Height: pl.h, Channels: pl.comps, BytesPerSample: 1}
	return info, p.jpegMemory(&pl), nil
}

// jpegMemory models decodeJPEG for a planned JPEG: the decoded window, its
// oriented copy, the resampler's scratch; libjpeg's memory plus the row it
// decodes and drops.
func (p *Preprocessor) jpegMemory(pl *jpegPlan) memUse {
	win := p.jpegWindow(pl)
	n := win.cw * (win.y1 - win.y0)
	m := memUse{goEarly: p.bufBytes(n*pl.bpp) + goDecoderSlack, c: jpegCMemory(pl) + int64(win.cw*pl.comps)}
	if pl.orient != 1 {
		m.goLate += p.bufBytes(n * pl.ch)
	}
	m.goLate += p.resampleBytes(&win.full)
	return m
}

// jpegCMemory bounds what libjpeg-turbo allocates to decode a planned JPEG
// (jdcoefct.c, jdmainct.c, jdsample.c, jdcolor.c, jdhuff.c):
//   - a progressive or multi-scan image: every coefficient of every
//     component (64 of 2 bytes per 8x8 block, the component's blocks padded
//     to its sampling factors), whatever the output scale, and row pointers;
//   - per component, the IDCT output rows: a row group per IDCT block row
//     plus two context groups (M+2 of M, M the smallest IDCT block size);
//   - the upsampler's rows (max_v_samp_factor rows per component);
//   - tables and the decompressor itself (jpegCFixed, measured).
func jpegCMemory(pl *jpegPlan) int64 {
	var n int64
	m := 8
	for i := range min(pl.comps, 4) {
		m = min(m, max(pl.dct[i], 1))
	}
	for i := range min(pl.comps, 4) {
		bw := roundUp(pl.wib[i], pl.hs[i])
		if pl.multiscan {
			bh := roundUp(pl.hib[i], pl.vs[i])
			n += int64(bw)*int64(bh)*128 + int64(bh)*8
		}
		dct := max(pl.dct[i], 1)
		rows := (pl.vs[i]*dct*(m+2) + m - 1) / m
		n += int64(bw*dct) * int64(rows)
	}
	n += int64(pl.comps) * int64(pl.maxV) * int64(roundUp(pl.sw, 8*pl.maxH)+64)
	return n + jpegCFixed
}

// jpegCFixed is libjpeg-turbo's memory for the smallest image (about 21 KiB
// measured): the decompressor, its pools' first blocks, Huffman, quantization
// and color tables.
const jpegCFixed = 32 << 10

func roundUp(a, b int) int {
	if b <= 1 {
		return a
	}
	return (a + b - 1) / b * b
}
