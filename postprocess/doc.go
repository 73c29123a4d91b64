// Package postprocess turns a model's raw output tensors into answers: object detections
// (box decoding for SSD-style boxes + scores, the YOLO layouts with and without objectness,
// and models with NMS built in; score threshold, per-class non-maximum suppression, a maximum
// count), the mapping of boxes from model-input pixels back to the original image (undoing
// letterbox, stretch or shorter-side crop scaling, clipping, and optionally the EXIF
// orientation), and embedding helpers (L2 normalization).
//
// It is pure computation on float slices: no HTTP, no ONNX Runtime, no image decoding, and it
// imports no other package of this repository (the gateway copies preprocess's geometry into a
// Frame). Decoders and Params are plain values, safe for concurrent use once built; a Scratch
// belongs to one goroutine at a time. The Append* functions append to a caller's slice and
// allocate nothing once the caller's slices and scratch have grown to their steady size.
// Hostile tensors (NaN, infinities, counts past the tensor) never panic: values that are not
// finite are skipped, shapes that do not add up are errors wrapping ErrShape.
package postprocess
