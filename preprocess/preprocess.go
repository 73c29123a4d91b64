package preprocess

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/imagegate/imagegate/preprocess/internal/resample"
)

// Sentinel errors. Every error returned by Process and ProcessUint8 wraps
// exactly one of them (test with errors.Is).
var (
	// ErrUnsupportedFormat: the bytes are not JPEG, PNG, WebP, GIF, BMP or
	// TIFF, or use a feature this package's codecs lack (HTTP 415).
	ErrUnsupportedFormat = errors.New("preprocess: unsupported image format")
	// ErrTooLarge: the header declares more pixels than max_pixels (HTTP 413).
	ErrTooLarge = errors.New("preprocess: image too large")
	// ErrBadImage: empty, corrupt or truncated data (HTTP 400).
	ErrBadImage = errors.New("preprocess: bad image")
)

// Mode is the geometric transform from the decoded image to the model input.
type Mode string

const (
	// ModeShorterSide is torchvision's classifier default: Resize(Resize)
	// scales the shorter side to Resize (longer side int(Resize*long/short)),
	// then CenterCrop(Height, Width).
	ModeShorterSide Mode = "shorter_side"
	// ModeStretch resizes straight to Width x Height, ignoring the aspect
	// ratio (the article's ModelWithTransforms); Resize is ignored.
	ModeStretch Mode = "stretch"
	// ModeLetterbox scales the image to fit Width x Height keeping its aspect ratio (the
	// scaled size rounded half to even, as ultralytics' LetterBox does), centers it (the odd
	// pixel of padding goes right and below) and fills the rest with Pad: what YOLO's exporters
	// expect. Resize is ignored.
	ModeLetterbox Mode = "letterbox"
)

// Scale selects the values written by Process.
type Scale string

const (
	// ScaleNormalized writes (v/255 - Mean[c]) / Std[c], computed in float32
	// exactly as torchvision's ToTensor + Normalize do.
	ScaleNormalized Scale = "normalized"
	// ScaleRaw writes v as float32 in 0..255, for models that embed their
	// own normalization.
	ScaleRaw Scale = "raw"
)

// Layout is the memory order of one slot.
type Layout string

const (
	// NCHW: three planes R, G, B of Height*Width values each.
	NCHW Layout = "NCHW"
	// NHWC: Height*Width pixels of three interleaved values R, G, B.
	NHWC Layout = "NHWC"
)

// Defaults applied by New to zero-valued fields.
const (
	DefaultSize = 224
	// DefaultMaxPixels is Pillow's Image.MAX_IMAGE_PIXELS: every image
	// torchvision's loader decodes without a DecompressionBombWarning is
	// accepted (a 50-megapixel phone photo, 8160x6144, was refused at the
	// old 50,000,000). Memory does not follow the pixel count (see
	// docs/preprocessing.md, "max_pixels"); the gateway's budget takes each
	// decode's PeakBytes before it starts.
	DefaultMaxPixels = 89_478_485
	maxSide          = 16384 // largest accepted Width, Height or Resize
)

// ImageNet statistics, the default Mean and Std.
var (
	ImageNetMean = [3]float32{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float32{0.229, 0.224, 0.225}
)

// Options configures a Preprocessor. Zero values mean defaults.
type Options struct {
	// Width and Height of the model input (the crop size). Default 224.
	Width, Height int
	// Resize is the shorter-side target of ModeShorterSide; it must be at
	// least max(Width, Height). Default: max(Width, Height)*256/224 (256
	// for 224), torchvision's convention.
	Resize int
	// Mode defaults to ModeShorterSide.
	Mode Mode
	// Scale defaults to ScaleNormalized.
	Scale Scale
	// Mean and Std are used by ScaleNormalized. If both are all zero they
	// default to ImageNetMean and ImageNetStd; Mean 0 / Std 1 gives v/255.
	Mean, Std [3]float32
	// Layout defaults to NCHW.
	Layout Layout
	// FullDecode decodes JPEGs at full size instead of the smallest DCT
	// scale (1/8, 1/4 or 1/2: those libjpeg-turbo has SIMD code for) whose
	// output still covers the resize target. Full size is bit-identical to
	// Pillow/torchvision; the scaled decode differs by a mean |Δ| of about
	// 0.005 (0..1 units) on photos 2-7x larger than the target, and costs
	// about half as much (docs/preprocessing.md).
	FullDecode bool
	// MaxPixels refuses images whose header declares more than this many
	// pixels (width*height) with ErrTooLarge before any pixel memory is
	// allocated. Default DefaultMaxPixels (config name max_pixels).
	MaxPixels int64
	// Pad is the value (0..255, every channel, before normalization) of ModeLetterbox's
	// padding. The zero value is black; YOLO's exporters pad with 114.
	Pad uint8
}

// Preprocessor converts encoded images into model-input slots. It is
// immutable after New and safe for concurrent use by many goroutines.
type Preprocessor struct {
	opts Options
	lut  [3][256]float32 // value written for channel c and uint8 value v
	cc   resample.Cache
	// oversample > 1 makes the JPEG DCT scale choice less aggressive (the
	// scaled image must cover oversample times the resize target); 1 is
	// the smallest covering scale. Unexported: for measurements in tests.
	oversample float64
	// fresh makes every call allocate its memory and decoder handles
	// instead of taking pooled ones (tests: the pooled path must give the
	// same results).
	fresh bool
	// noWindow makes JPEG decoding produce the whole (scaled) image instead
	// of the window the crop reads (tests: both must give the same slot).
	noWindow bool
	// scalar keeps to the portable resampling kernels (tests: the AVX2 ones
	// must give the same bits).
	scalar bool
	// cHeapProbe, when set (tests: internal/testutil.CHeapProbe), is a C
	// function reporting the C heap in use; a JPEG decode calls it when it
	// holds the most C memory (after its last row, before libjpeg frees the
	// image's buffers) and hands the figure to onCHeapPeak.
	cHeapProbe  unsafe.Pointer
	onCHeapPeak func(int64)
}

// New validates opts, fills in defaults and returns a Preprocessor. Errors
// name the offending field.
func New(opts Options) (*Preprocessor, error) {
	if opts.Width == 0 && opts.Height == 0 {
		opts.Width, opts.Height = DefaultSize, DefaultSize
	}
	if opts.Width <= 0 || opts.Width > maxSide {
		return nil, fmt.Errorf("preprocess: invalid options: width must be in 1..%d, got %d", maxSide, opts.Width)
	}
	if opts.Height <= 0 || opts.Height > maxSide {
		return nil, fmt.Errorf("preprocess: invalid options: height must be in 1..%d, got %d", maxSide, opts.Height)
	}
	if opts.Mode == "" {
		opts.Mode = ModeShorterSide
	}
	switch opts.Mode {
	case ModeShorterSide:
		m := max(opts.Width, opts.Height)
		if opts.Resize == 0 {
			opts.Resize = m * 256 / 224
		}
		if opts.Resize < m || opts.Resize > maxSide {
			return nil, fmt.Errorf("preprocess: invalid options: resize must be in %d..%d (at least max(width, height)) for mode %q, got %d",
				m, maxSide, opts.Mode, opts.Resize)
		}
	case ModeStretch, ModeLetterbox:
		if opts.Resize < 0 || opts.Resize > maxSide {
			return nil, fmt.Errorf("preprocess: invalid options: resize must be in 0..%d, got %d", maxSide, opts.Resize)
		}
	default:
		return nil, fmt.Errorf("preprocess: invalid options: mode must be %q, %q or %q, got %q", ModeShorterSide, ModeStretch, ModeLetterbox, opts.Mode)
	}
	if opts.Scale == "" {
		opts.Scale = ScaleNormalized
	}
	if opts.Scale != ScaleNormalized && opts.Scale != ScaleRaw {
		return nil, fmt.Errorf("preprocess: invalid options: scale must be %q or %q, got %q", ScaleNormalized, ScaleRaw, opts.Scale)
	}
	if opts.Layout == "" {
		opts.Layout = NCHW
	}
	if opts.Layout != NCHW && opts.Layout != NHWC {
		return nil, fmt.Errorf("preprocess: invalid options: layout must be %q or %q, got %q", NCHW, NHWC, opts.Layout)
	}
	if opts.MaxPixels == 0 {
		opts.MaxPixels = DefaultMaxPixels
	}
	if opts.MaxPixels < 0 {
		return nil, fmt.Errorf("preprocess: invalid options: max_pixels must be positive, got %d", opts.MaxPixels)
	}
	if opts.Scale == ScaleNormalized {
		if opts.Mean == ([3]float32{}) && opts.Std == ([3]float32{}) {
			opts.Mean, opts.Std = ImageNetMean, ImageNetStd
		}
		for c := range 3 {
			m, s := float64(opts.Mean[c]), float64(opts.Std[c])
			if math.IsNaN(m) || math.IsInf(m, 0) {
				return nil, fmt.Errorf("preprocess: invalid options: mean[%d] must be finite, got %v", c, m)
			}
			if !(s > 0) || math.IsInf(s, 0) {
				return nil, fmt.Errorf("preprocess: invalid options: std[%d] must be positive and finite, got %v", c, s)
			}
		}
	}
	p := &Preprocessor{opts: opts, oversample: 1}
	if opts.FullDecode {
		p.oversample = math.Inf(1)
	}
	for c := range 3 {
		for v := range 256 {
			if opts.Scale == ScaleRaw {
				p.lut[c][v] = float32(v)
			} else {
				// torchvision: img.float().div(255), then sub(mean).div(std), all float32.
				x := float32(v) / float32(255)
				x = float32(x - opts.Mean[c])
				p.lut[c][v] = x / opts.Std[c]
			}
		}
	}
	return p, nil
}

// Options returns the effective options (defaults filled in).
func (p *Preprocessor) Options() Options { return p.opts }

// SlotLen is the number of values of one slot: 3*Width*Height.
func (p *Preprocessor) SlotLen() int { return 3 * p.opts.Width * p.opts.Height }

// Process decodes data and writes exactly one slot (SlotLen values, in the
// configured Layout and Scale) into dst[:SlotLen()]. It is safe for
// concurrent use; it neither modifies nor retains data, and does not retain
// dst. On error the contents of dst are unspecified.
func (p *Preprocessor) Process(data []byte, dst []float32) error {
	if len(dst) < p.SlotLen() {
		return fmt.Errorf("preprocess: destination holds %d values, a slot needs %d", len(dst), p.SlotLen())
	}
	return p.run(data, sink{f32: dst[:p.SlotLen()]}, nil)
}

// ProcessContext is Process that stops when ctx ends: before decoding, and
// during a JPEG or PNG decode (within a few rows; the other codecs run to
// their end). Its error then wraps context.Cause(ctx). A gateway stops the
// decode of a request whose client has left or whose deadline has passed.
func (p *Preprocessor) ProcessContext(ctx context.Context, data []byte, dst []float32) error {
	if len(dst) < p.SlotLen() {
		return fmt.Errorf("preprocess: destination holds %d values, a slot needs %d", len(dst), p.SlotLen())
	}
	return p.runContext(ctx, data, sink{f32: dst[:p.SlotLen()]})
}

// ProcessUint8Context is ProcessUint8 that stops when ctx ends, as
// ProcessContext does.
func (p *Preprocessor) ProcessUint8Context(ctx context.Context, data []byte, dst []uint8) error {
	if len(dst) < p.SlotLen() {
		return fmt.Errorf("preprocess: destination holds %d values, a slot needs %d", len(dst), p.SlotLen())
	}
	return p.runContext(ctx, data, sink{u8: dst[:p.SlotLen()]})
}

// runContext is run, stopped when ctx ends.
func (p *Preprocessor) runContext(ctx context.Context, data []byte, out sink) error {
	if ctx.Done() == nil {
		return p.run(data, out, nil)
	}
	if ctx.Err() != nil {
		return stoppedError(ctx)
	}
	stop := new(int32)
	unwatch := context.AfterFunc(ctx, func() { atomic.StoreInt32(stop, 1) })
	defer unwatch()
	err := p.run(data, out, stop)
	if err != nil && atomic.LoadInt32(stop) != 0 {
		return stoppedError(ctx)
	}
	return err
}

func stoppedError(ctx context.Context) error {
	return fmt.Errorf("preprocess: the decode stopped: %w", context.Cause(ctx))
}

// errStopped is what a decoder returns when its caller's context ended
// (runContext replaces it with the context's cause).
var errStopped = errors.New("preprocess: stopped")

// ProcessUint8 is Process for models with uint8 input: it writes the
// resized, cropped RGB values 0..255 (no normalization) in the configured
// Layout into dst[:SlotLen()]. Same concurrency and ownership rules.
func (p *Preprocessor) ProcessUint8(data []byte, dst []uint8) error {
	if len(dst) < p.SlotLen() {
		return fmt.Errorf("preprocess: destination holds %d values, a slot needs %d", len(dst), p.SlotLen())
	}
	return p.run(data, sink{u8: dst[:p.SlotLen()]}, nil)
}

// Expand writes into dst[:SlotLen()] the values Process writes for the image
// whose ProcessUint8 slot is src[:SlotLen()]: Process computes each value as
// a byte first (the resampler's rounding and clamping) and then maps it
// through the channel's float32 normalization (or writes it as is, for
// ScaleRaw), and Expand applies the same mapping, so the two give the same
// bits. A caller can keep an image as bytes, a quarter of the memory, until
// the model's input tensor is filled. Same layout as both.
func (p *Preprocessor) Expand(dst []float32, src []uint8) error {
	n := p.SlotLen()
	if len(dst) < n || len(src) < n {
		return fmt.Errorf("preprocess: Expand needs slots of %d values, got %d bytes into %d values", n, len(src), len(dst))
	}
	dst, src = dst[:n], src[:n]
	if p.opts.Layout == NHWC {
		l0, l1, l2 := &p.lut[0], &p.lut[1], &p.lut[2]
		for i := 0; i+2 < n; i += 3 {
			dst[i], dst[i+1], dst[i+2] = l0[src[i]], l1[src[i+1]], l2[src[i+2]]
		}
		return nil
	}
	plane := n / 3
	for c := range 3 {
		d, s := dst[c*plane:(c+1)*plane], src[c*plane:(c+1)*plane]
		lut := &p.lut[c]
		i := 0
		if !p.scalar {
			i = resample.ExpandVec(d, s, p.opts.Scale == ScaleRaw, p.opts.Mean[c], p.opts.Std[c])
		}
		for ; i < len(d); i++ {
			d[i] = lut[s[i]]
		}
	}
	return nil
}

// run is the whole pipeline: detect, check limits, decode, orient, resample.
// A non-nil stop turning non-zero stops a JPEG or PNG decode (errStopped).
func (p *Preprocessor) run(data []byte, out sink, stop *int32) error {
	if len(data) == 0 {
		return fmt.Errorf("empty body: %w", ErrBadImage)
	}
	var s *scratch
	if p.fresh {
		s = &scratch{fresh: true}
	} else {
		s = getScratch()
		defer putScratch(s)
	}
	s.stop = stop
	// Every decoder feeds the resampler the rows it reads, as it goes.
	switch f := detectFormat(data); f {
	case formatJPEG:
		return p.decodeJPEG(data, s, out)
	case formatPNG:
		return p.decodePNG(data, s, out)
	case formatWebP:
		return p.decodeWebP(data, s, out)
	case formatGIF, formatBMP, formatTIFF:
		return p.decodeOther(f, data, s, out)
	}
	return unsupported(data)
}

// checkPixels enforces MaxPixels on header dimensions.
func (p *Preprocessor) checkPixels(kind string, w, h int) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("cannot decode %s: header declares %dx%d pixels: %w", kind, w, h, ErrBadImage)
	}
	if n := int64(w) * int64(h); n > p.opts.MaxPixels {
		return fmt.Errorf("cannot decode %s: %dx%d = %d pixels exceeds max_pixels=%d: %w", kind, w, h, n, p.opts.MaxPixels, ErrTooLarge)
	}
	return nil
}

// geometry returns the resized size of an image whose displayed (oriented)
// size is w x h, and the crop window within it.
func (p *Preprocessor) geometry(w, h int) (rw, rh, left, top int) {
	o := &p.opts
	switch o.Mode {
	case ModeStretch:
		return o.Width, o.Height, 0, 0
	case ModeLetterbox:
		rw, rh, _, _ = p.place(w, h)
		return rw, rh, 0, 0
	}
	// torchvision _compute_resized_output_size + CenterCrop.
	if w <= h {
		rw = o.Resize
		rh = int(float64(o.Resize*h) / float64(w))
	} else {
		rh = o.Resize
		rw = int(float64(o.Resize*w) / float64(h))
	}
	left = int(math.RoundToEven(float64(rw-o.Width) / 2.0))
	top = int(math.RoundToEven(float64(rh-o.Height) / 2.0))
	return rw, rh, left, top
}

// place returns the size of the resized image within the slot and where its top-left pixel
// lands: the whole slot, except in ModeLetterbox.
func (p *Preprocessor) place(w, h int) (ow, oh, dx, dy int) {
	o := &p.opts
	if o.Mode != ModeLetterbox {
		return o.Width, o.Height, 0, 0
	}
	r := min(float64(o.Width)/float64(w), float64(o.Height)/float64(h))
	ow = min(max(int(math.RoundToEven(float64(w)*r)), 1), o.Width)
	oh = min(max(int(math.RoundToEven(float64(h)*r)), 1), o.Height)
	return ow, oh, (o.Width - ow) / 2, (o.Height - oh) / 2
}

// Geometry is where an image went in its slot: the original image (as displayed, after its
// EXIF orientation, at full resolution) maps to slot pixels by slot = original*Scale + Offset
// on each axis. A stretch has Offset 0; a shorter-side resize and center crop a negative
// Offset (the crop); a letterbox the padding. Boxes a detector finds in slot pixels map back
// by original = (slot - Offset) / Scale.
type Geometry struct {
	// Width and Height of the original image after EXIF orientation.
	Width, Height int
	// Orientation is the EXIF orientation applied (1..8; 1 for formats without one).
	Orientation      int
	ScaleX, ScaleY   float64
	OffsetX, OffsetY float64
}

// Geometry returns the geometry of an image displayed w x h (after EXIF orientation
// orientation) under p's options, as ProcessGeometry reports it.
func (p *Preprocessor) Geometry(w, h, orientation int) Geometry {
	rw, rh, left, top := p.geometry(w, h)
	_, _, dx, dy := p.place(w, h)
	return Geometry{Width: w, Height: h, Orientation: max(orientation, 1),
		ScaleX: float64(rw) / float64(w), ScaleY: float64(rh) / float64(h),
		OffsetX: float64(dx - left), OffsetY: float64(dy - top)}
}

// ProcessGeometry is ProcessContext that also reports where the image went in the slot (a
// detector's boxes are mapped back with it).
func (p *Preprocessor) ProcessGeometry(ctx context.Context, data []byte, dst []float32) (Geometry, error) {
	if len(dst) < p.SlotLen() {
		return Geometry{}, fmt.Errorf("preprocess: destination holds %d values, a slot needs %d", len(dst), p.SlotLen())
	}
	var g Geometry
	err := p.runContext(ctx, data, sink{f32: dst[:p.SlotLen()], geom: &g})
	return g, err
}

// ProcessUint8Geometry is ProcessUint8Context that also reports where the image went in the
// slot, as ProcessGeometry does.
func (p *Preprocessor) ProcessUint8Geometry(ctx context.Context, data []byte, dst []uint8) (Geometry, error) {
	if len(dst) < p.SlotLen() {
		return Geometry{}, fmt.Errorf("preprocess: destination holds %d values, a slot needs %d", len(dst), p.SlotLen())
	}
	var g Geometry
	err := p.runContext(ctx, data, sink{u8: dst[:p.SlotLen()], geom: &g})
	return g, err
}

// sink is where the final rows go: exactly one of f32 and u8 is set. geom, when set, receives
// the image's geometry.
type sink struct {
	f32  []float32
	u8   []uint8
	geom *Geometry
}
