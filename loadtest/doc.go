// Package loadtest is the gateway's load generator: it sends HTTP requests
// to one URL, or gRPC inference calls to one server, in a closed loop (N
// workers, each sending its next request when the previous one finishes,
// like ab or hey) or an open loop (requests
// scheduled at a fixed or Poisson rate whatever the server does, with a
// bounded worker pool), and measures latency from each request's intended
// send time so a stalled server cannot hide its stall (no coordinated
// omission). It owns the pacer, the fasthttp client set-up, a log-linear
// HDR-style Histogram (≤1 % relative error), the Result with its per-second
// timeline and its text, JSON and standalone-HTML (inline SVG) renderings,
// concurrency/rate sweeps, a small Prometheus text parser used to read
// the server's batch counters around each sweep step, and the preparation of
// Open Inference Protocol runs (PrepareV2: images turned once into v2
// inference requests, JSON or binary, with the client in loadtest/oip;
// PrepareGRPC: the same images as marshalled gRPC ModelInferRequests, sent by
// Config.Protocol grpc runs over shared HTTP/2 connections with the client in
// loadtest/oipgrpc and counted by gRPC status code). Per-body headers
// (Body.Headers) are set on the reusable request without allocating, as the
// rest of a worker's hot path. It must not import any server package of this
// repository (gateway, batcher, preprocess, runtime, configs): it talks to the
// server over HTTP or gRPC only, like any client (api/inference, which it
// uses, is generated protocol code, not a server).
package loadtest
