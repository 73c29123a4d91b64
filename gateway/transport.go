package gateway

import "log/slog"

// transport is what the pipeline needs from the protocol that carried a request: where the
// request's options are, how its body arrives, how the server learns that its client left, how
// a failure is answered, how the request's ID and stage times go out with its answer. The stages themselves (admission, the memory budget, the decode gate,
// the batcher, deadlines, metrics) are the same for every transport. httpTransport is HTTP/1's
// (http.go); a gRPC transport would find its deadline in the RPC, its body already decoded,
// its cancellation in the stream's context, and answer with a status code.
//
// Before the pipeline runs (Server.infer), a transport gives the request what its client sent
// to identify it: r.takeRequestID (X-Request-ID; gRPC metadata x-request-id) and
// r.takeTraceContext (traceparent and tracestate, as headers or metadata).
type transport interface {
	// options sets the request's deadline (from r.start and its model's default), priority
	// and top_k from what the request carries.
	options(r *request) error
	// declaredBytes is the body length the client declared before sending it (negative: it
	// declared none); a declaration over server.max_body_bytes is refused before the body.
	declaredBytes(r *request) int64
	// readBody puts the request's body in r.body, its bytes taken from the memory budget as
	// they arrive (r.readAll), and sets r.bodyDone once it is read to its end.
	readBody(r *request) error
	// watchGone calls gone if the client leaves before release is called.
	watchGone(r *request, gone func()) (release func())
	// fail answers the request with its failure: status and message as classified, and
	// whether the client is asked to retry.
	fail(r *request, status int, msg string, retry bool)
	// abandon drops the request unanswered: its client left.
	abandon(r *request)
	// discard deals with what is left of a failed request's body (cause: its failure) so that
	// the client reads the answer.
	discard(r *request, cause error)
	// annotate puts the request's ID (r.requestID) and stage times (r.appendServerTiming) on
	// its answer, success or failure, before it is sent: HTTP's X-Request-ID and
	// Server-Timing headers; gRPC's response metadata.
	annotate(r *request)
	// logAttrs appends what the access log says about the request on the protocol's side:
	// the client's address, the method and path (gRPC: its full method name).
	logAttrs(r *request, attrs []slog.Attr) []slog.Attr
	// bytes is what the request's client sent (the body as received, before decompression)
	// and what its answer holds.
	bytes(r *request) (in, out int64)
}
