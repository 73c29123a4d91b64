// Package preprocess turns encoded image bytes (JPEG, PNG, WebP; GIF, BMP
// and TIFF through github.com/disintegration/imaging) into one
// model-input slot of a batch tensor, reproducing torchvision's PIL pipeline
// (EXIF orientation → convert('RGB') → Resize(bilinear, antialiased) →
// CenterCrop → ToTensor → Normalize) closely enough that a classifier gives
// the same answer. It owns format detection by magic bytes, the pixel-count
// limit checked against the image header before any pixel memory is
// allocated, JPEG decoding through libjpeg-turbo (cgo, libjpeg API, one decompressor per
// image) at the
// smallest DCT scale that still covers the resize target, PNG decoding
// through libspng row by row into the resampler (memory grows with the
// width, not the height), WebP through golang.org/x/image/webp, a tiny EXIF
// orientation parser, a PIL-compatible fixed-point bilinear resampler that
// computes only the pixels surviving the crop, and the float32 (NCHW or
// NHWC) or uint8 output. Hot-path memory (pixel and
// scratch buffers) is pooled; buffers above a size cap are not kept. Probe
// reads a header only and tells what a decode will cost (PeakBytes), so a
// server can budget memory before decoding starts.
//
// It must not import other packages of this repository, HTTP, metrics or
// ONNX Runtime (its tests may use ONNX Runtime). A *Preprocessor is
// immutable after New and safe for concurrent use; Process never retains
// the input bytes or the destination slice. Errors wrap ErrUnsupportedFormat,
// ErrTooLarge or ErrBadImage, which a server maps to 415, 413 and 400.
package preprocess
