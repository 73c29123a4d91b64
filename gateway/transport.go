package gateway

// transport is what the pipeline needs from the protocol that carried a request: where the
// request's options are, how its body arrives, how the server learns that its client left, how
// a failure is answered. The stages themselves (admission, the memory budget, the decode gate,
// the batcher, deadlines, metrics) are the same for every transport. httpTransport is HTTP/1's
// (http.go); a gRPC transport would find its deadline in the RPC, its body already decoded,
// its cancellation in the stream's context, and answer with a status code.
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
}
