// Package gateway is the HTTP front end (fasthttp): it parses requests (the article's JSON
// body, raw image bodies, the Open Inference Protocol), decodes and preprocesses images on a
// pool sized to the CPUs, submits them to each model's batcher, and writes JSON answers and
// Prometheus metrics.
//
// It imports preprocess and batcher; it does not import ONNX Runtime: the model runners (one
// per instance) are injected through the Runner interface, so cmd/gateway wires ORT sessions
// in. fasthttp reuses a RequestCtx and its body after the handler returns, so nothing from a
// request escapes into a batch: the image is decoded into the request's own pooled slot
// before it is submitted, and Submit returns only once the batcher holds no reference to it.
package gateway
