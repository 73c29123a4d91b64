package gateway

import (
	"context"
	"errors"
	"fmt"

	"net/http"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/preprocess"
)

// Sentinel errors of the request pipeline. Every stage returns an error wrapping one of them
// (or one of wire's, preprocess's and batcher's); classify maps it to a status and a metric
// reason. A malformed request (400) wraps wire.ErrMalformed.
var (
	// errUnsupportedMedia: a Content-Type or Content-Encoding the gateway does not take (415).
	errUnsupportedMedia = errors.New("gateway: unsupported media type")
	// errBodyTooLarge: the body (as received or decompressed) exceeds server.max_body_bytes (413).
	errBodyTooLarge = errors.New("gateway: request body too large")
	// errTooLarge: one request needs more memory than the whole budget holds (413).
	errTooLarge = errors.New("gateway: request too large for the memory budget")
	// errOverloaded: a stage's bound is reached (memory budget, decode queue); refused at once (503).
	errOverloaded = errors.New("gateway: overloaded")
	// errQueueFull: the model's queue is full (server.queue_full_status: 503 or 429).
	errQueueFull = errors.New("gateway: queue full")
	// errShed: the request cannot be answered before its deadline; refused before any work is
	// spent on it (503).
	errShed = errors.New("gateway: would miss its deadline")
	// errDraining: the server is shutting down (503).
	errDraining = errors.New("gateway: draining")
	// errReadTimeout: the body did not arrive within server.read_timeout (408).
	errReadTimeout = errors.New("gateway: timed out reading the request body")
	// errClientGone: the client closed its connection while its request waited (no response).
	errClientGone = errors.New("gateway: client closed the connection")
	// errNotFound: an unknown model, version or path (404).
	errNotFound = errors.New("gateway: not found")
	// errMemory: the memory budget is held by other requests (503).
	errMemory = fmt.Errorf("%w: the memory budget (server.max_inflight_bytes) is in use by other requests", errOverloaded)
	// errMethod: a method the path does not take (405).
	errMethod = errors.New("gateway: method not allowed")
)

// Failure reasons: a closed set, used as metric labels. One spelling each, everywhere.
const (
	reasonBadInput    = "bad_input"   // 400, 413 (image or body), 415
	reasonNotFound    = "not_found"   // 404, 405
	reasonOverloaded  = "overloaded"  // 503: memory budget, decode queue, connections
	reasonQueueFull   = "queue_full"  // 503/429: the model's queue
	reasonShed        = "shed"        // 503: would miss its deadline
	reasonDraining    = "draining"    // 503 during shutdown
	reasonUnavailable = "unavailable" // 503: /predict/'s default model is not loaded
	reasonTimeout     = "timeout"     // 504 deadline passed; 408 body not received in time
	reasonCanceled    = "canceled"    // the client went away (no response written)
	reasonInternal    = "internal"    // 500
)

var failureReasons = []string{reasonBadInput, reasonNotFound, reasonOverloaded, reasonQueueFull, reasonShed,
	reasonDraining, reasonUnavailable, reasonTimeout, reasonCanceled, reasonInternal}

// statusClientClosed is nginx's 499, "client closed request". It is a metric label only: no
// response is written to a client that went away.
const statusClientClosed = 499

// classify maps a pipeline error to its HTTP status and failure reason. It is the one place
// that does. HTTP statuses are the pipeline's vocabulary for every transport (and the metrics'
// code label): another protocol's transport maps them to its own codes.
func (s *Server) classify(err error) (int, string) {
	switch {
	case errors.Is(err, wire.ErrMalformed), errors.Is(err, preprocess.ErrBadImage):
		return http.StatusBadRequest, reasonBadInput
	case errors.Is(err, errUnsupportedMedia), errors.Is(err, preprocess.ErrUnsupportedFormat):
		return http.StatusUnsupportedMediaType, reasonBadInput
	case errors.Is(err, errBodyTooLarge), errors.Is(err, errTooLarge), errors.Is(err, preprocess.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, reasonBadInput
	case errors.Is(err, errNotFound):
		return http.StatusNotFound, reasonNotFound
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed, reasonNotFound
	case errors.Is(err, errQueueFull), errors.Is(err, batcher.ErrQueueFull):
		return s.opts.QueueFullStatus, reasonQueueFull
	case errors.Is(err, errShed), errors.Is(err, batcher.ErrWouldMissDeadline):
		return http.StatusServiceUnavailable, reasonShed
	case errors.Is(err, errOverloaded):
		return http.StatusServiceUnavailable, reasonOverloaded
	case errors.Is(err, errDraining), errors.Is(err, batcher.ErrClosed):
		return http.StatusServiceUnavailable, reasonDraining
	case errors.Is(err, errReadTimeout):
		return http.StatusRequestTimeout, reasonTimeout
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, reasonTimeout
	case errors.Is(err, errClientGone), errors.Is(err, context.Canceled):
		return statusClientClosed, reasonCanceled
	}
	return http.StatusInternalServerError, reasonInternal
}

// retryable reports whether a failure reason asks the client to come back (Retry-After).
func retryable(reason string) bool {
	switch reason {
	case reasonOverloaded, reasonQueueFull, reasonShed, reasonDraining, reasonUnavailable:
		return true
	}
	return false
}
