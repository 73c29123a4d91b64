// Package oip is a small client for the Open Inference Protocol (KServe's v2 REST protocol) as
// Triton's and KServe's clients speak it: health and readiness, server and model metadata, and
// inference requests with JSON or binary tensor data (Triton's binary_tensor_data extension:
// the JSON header, then each binary tensor's bytes, its length in the
// Inference-Header-Content-Length header), requested outputs as JSON or binary, and Triton's
// classification extension ("<score>:<index>:<label>" strings).
//
// It owns request encoding (Request.Encode), response decoding (DecodeResponse), the raw
// tensor layout that binary data and the gRPC protocol share (Input.Raw, Tensor.SetRaw; the
// gRPC client loadtest/oipgrpc sends and reads the same Request and Response) and a
// net/http Client; it supports the datatypes an image classifier needs: BYTES (encoded images;
// in JSON each element is written as a base64 string when Input.Base64 is set, which is the
// gateway's convention for images, else as the element's text), FP32 and UINT8. It must not
// import any server package of this repository (gateway, batcher, preprocess, runtime,
// configs): it talks HTTP only, like any client, and the loadtest package and the gateway's
// tests use it as one.
package oip
