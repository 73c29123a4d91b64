// Package answer writes the answers of the tasks other than classification: a detector's
// detections and an embedding model's vectors, as the article's API answers them (JSON
// {"detections": [...]}, {"embedding": [...]}), and the output tensors of an Open Inference
// Protocol answer (Tensor: a model's raw outputs stacked along the batch axis, or the five
// tensors of the post-processed detections), written as JSON data, as binary tensor data or
// as gRPC's raw output contents.
//
// It is formatting only: the gateway decodes and selects the detections (postprocess) and
// hands them in with their labels; nothing here knows HTTP, gRPC or a model. Values that
// JSON cannot hold (NaN, infinities) are written as null, as wire's appenders do. Detections
// is reusable memory for one request at a time; the Append functions append to the caller's
// buffers.
package answer
