// Package gateway is the inference server: a Server serves image classifiers over HTTP/1
// (fasthttp) and gRPC, the article's API and the Open Inference Protocol, through one request
// pipeline: admission, the request body read within a memory budget, the front end's parse,
// decodes on dedicated threads behind a deadline-aware gate, each model's batcher, the answer.
// Errors are classified in one place (errors.go) and every stage is counted (metrics.go).
//
// Where things are: server.go (Server, New, the model table), lifecycle.go (the server's
// phases, starting to stopped, and their transitions), drain.go (Serve, Shutdown's drain),
// admission.go (the door every entry asks before a body is read, and every refusal's message
// and counting), reload.go (the model repository and reloads), model.go (one served model version),
// routes.go (routing), pipeline.go (an inference request's stages, the same for every
// transport), transport.go and http.go (what a transport provides; HTTP/1's), grpc.go (gRPC's
// transport and front end) and grpc_service.go (the gRPC server: its other RPCs, health, its
// door in the tap, the drain), predict.go and v2.go (the front ends), expect.go (Expect:
// 100-continue), admin.go (the admin API), console.go (the console in the browser, /ui/),
// observe.go (request IDs, stage times, Server-Timing), trace.go (OpenTelemetry spans),
// access.go (the access log), watchdog.go (liveness), stats.go (Triton's statistics
// extension), security.go (TLS on the listeners, API keys and their limits, checked at every
// entry before its door). Below it: internal/admit (admission: the memory budget, the decode
// gate, the queue-target policy, the door's decision), internal/sched (decode and model threads), internal/netx
// (connections, below HTTP), internal/wire (codecs), internal/stats (the statistics'
// counters), internal/grpcio (the gRPC server's codec and buffer pool), internal/grpcapi
// (the gRPC API's protocol side: options, codes, health, streams, statistics),
// internal/modeldesc (a model's metadata and configuration, JSON and protobuf),
// internal/watchdog (the liveness watchdog's run tracking and hang checks), internal/metricset
// (the metric families' help texts, buckets and request series), internal/console (the
// console's page and the live view's snapshot), internal/tlsx (a listener's TLS from files,
// reloaded), internal/auth (the key file, keys' limits). docs/architecture.md draws the map.
//
// It imports preprocess and batcher; it does not import ONNX Runtime: the model runners (one
// per instance) are injected through the Runner interface, so cmd/gateway wires ORT sessions
// in. fasthttp reuses a RequestCtx and its body after the handler returns, so nothing from a
// request escapes into a batch: the image is decoded into the request's own pooled slot
// before it is submitted, and Submit returns only once the batcher holds no reference to it.
// Everything a Server uses (threads, connections, pools, metrics) is its own and ends with
// Shutdown: nothing is shared between servers in one process.
package gateway
