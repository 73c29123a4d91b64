package gateway

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// Routing: which path and method a request takes, and the answers that need no pipeline
// (health, metrics, not found, method not allowed, an unknown model).

// handle routes a request.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	var start time.Time
	if s.access != nil {
		start = time.Now()
	}
	defer func() {
		if s.draining() {
			ctx.SetConnectionClose() // a drain that began while the request was handled
		}
		s.finishHTTP(ctx, start)
	}()
	path := string(ctx.Path())
	if proto := ctx.Request.Header.Protocol(); string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0" {
		// fasthttp reads any HTTP/x.y request line and answers it as HTTP/1.1.
		lingerOnClose(ctx)
		writeError(ctx, fasthttp.StatusHTTPVersionNotSupported, "only HTTP/1.1 and HTTP/1.0 are served, not "+wire.Truncate(string(proto), 20))
		return
	}
	if raw := ctx.Request.URI().PathOriginal(); bytes.Contains(raw, []byte("%2F")) || bytes.Contains(raw, []byte("%2f")) {
		// fasthttp decodes %2F into a separator: /v2/models/m%2Finfer would run inference where a
		// proxy routing on the raw path saw one segment. No name here holds a slash.
		s.drainBody(ctx)
		writeError(ctx, fasthttp.StatusBadRequest, "an encoded slash (%2F) in the path is not allowed")
		return
	}
	if !isInferencePath(path) {
		// A body that the answer did not need (a POST to /metrics, a health check, an unknown
		// path) is read and dropped, so that the next request on the connection is read from
		// where it starts (fasthttp drops 256 KiB at most, then closes). Inference paths read
		// or drain their bodies themselves.
		defer func() {
			switch {
			case ctx.Response.ConnectionClose():
			case s.draining():
				lingerOnClose(ctx) // the connection closes after this answer: no wait for the body
			default:
				s.drainBody(ctx)
			}
		}()
	}
	if overflowConn(ctx) && !isHealthPath(path) {
		// Over server.max_connections with no idle connection to close: only health and
		// metrics are served on this connection.
		s.met.refusals[refuseConnections].Inc()
		s.drainBody(ctx)
		lingerOnClose(ctx)
		ctx.Response.Header.Set("Retry-After", s.retryAfter)
		writeError(ctx, fasthttp.StatusServiceUnavailable, overflowMessage(s.opts.MaxConnections))
		return
	}
	// The key, before anything of the body is read and before the door (security.go).
	key, held, ok := s.authorizeHTTP(ctx, path)
	if !ok {
		return
	}
	if held {
		defer keyDone(ctx, key)
	}
	if rt, ok := inferenceRoute(path); ok {
		s.handleInference(ctx, rt)
		return
	}
	switch {
	case strings.HasPrefix(path, "/models/"):
		name, tail, _ := strings.Cut(path[len("/models/"):], "/")
		m, err := s.lookup(name, "")
		if err != nil {
			s.lookupFailed(ctx, err, false)
			return
		}
		defer m.done()
		switch tail {
		case "":
			if !ctx.IsGet() && !ctx.IsHead() {
				s.methodNotAllowed(ctx, "GET")
				return
			}
			s.modelMetadata(ctx, m, false)
		default:
			s.notFound(ctx, path)
		}
	case strings.HasPrefix(path, "/v2"):
		s.handleV2(ctx, path)
	case path == "/":
		if !ctx.IsGet() && !ctx.IsHead() {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		if s.draining() {
			writeJSONRaw(ctx, fasthttp.StatusServiceUnavailable, `{"status":"draining","message":"The gateway is shutting down."}`)
			return
		}
		writeJSONRaw(ctx, 200, `{"status":"healthy","message":"The gateway is running."}`)
	case path == "/openapi.json":
		s.serveOpenAPI(ctx)
	case isConsolePath(path) && s.consoleOn(false):
		s.serveConsole(ctx, path, false)
	case path == "/metrics":
		var buf bytes.Buffer
		s.WriteMetrics(&buf)
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		ctx.SetBody(buf.Bytes())
	default:
		s.notFound(ctx, path)
	}
}

// finishHTTP gives an answer that the pipeline did not make (it annotates and logs its own)
// its X-Request-ID, the client's or a new one, and logs it.
func (s *Server) finishHTTP(ctx *fasthttp.RequestCtx, start time.Time) {
	if ctx.Hijacked() || ctx.Response.Header.Peek(headerRequestID) != nil {
		return // the pipeline's
	}
	id := s.answerID(ctx)
	if s.access != nil {
		if start.IsZero() {
			start = time.Now()
		}
		s.logHTTP(ctx, start, id)
	}
}

// answerID returns the ID of an answer made outside the pipeline, setting its X-Request-ID
// header when it has none yet: the client's, or a new one.
func (s *Server) answerID(ctx *fasthttp.RequestCtx) []byte {
	if id := ctx.Response.Header.Peek(headerRequestID); id != nil {
		return id
	}
	var buf [64]byte
	id := ctx.Request.Header.Peek(headerRequestID)
	if !validRequestID(id) {
		id = s.ids.next(buf[:0])
	}
	ctx.Response.Header.SetBytesV(headerRequestID, id)
	return ctx.Response.Header.Peek(headerRequestID)
}

// overflowMessage is the refusal over server.max_connections.
func overflowMessage(max int) string {
	return fmt.Sprintf("the server has %d connections open (server.max_connections); try again", max)
}

// inferRoute is where an inference path leads: a model (its name and version; none for
// /predict/, its default model's) through a front end.
type inferRoute struct {
	name, version string
	def           bool // /predict/: the default model
	fe            frontEnd
}

// inferenceRoute routes an inference path (/predict/, /models/{m}/predict,
// /v2/models/{m}[.tensor][/versions/{v}]/infer), whatever its method; ok is false for any other
// path. It is the one routing of inference requests: handle's, and expectContinue's before a
// body is sent.
func inferenceRoute(path string) (rt inferRoute, ok bool) {
	switch {
	case path == "/predict/" || path == "/predict":
		return inferRoute{def: true, fe: predictAPI{}}, true
	case strings.HasPrefix(path, "/models/"):
		name, tail, _ := strings.Cut(path[len("/models/"):], "/")
		return inferRoute{name: name, fe: predictAPI{}}, tail == "predict" || tail == "predict/"
	case strings.HasPrefix(path, "/v2/models/"):
		name, version, tail, tensorOnly, ok := v2ModelPath(path[len("/v2/models/"):])
		return inferRoute{name: name, version: version, fe: v2API{tensorOnly: tensorOnly}}, ok && tail == "infer"
	}
	return inferRoute{}, false
}

// lookupRoute finds an inference route's model, counted as in use (release it with done).
func (s *Server) lookupRoute(rt inferRoute) (*model, error) {
	if rt.def {
		return s.lookup(s.models.Load().first, "")
	}
	return s.lookup(rt.name, rt.version)
}

// handleInference serves an inference request: its model, then the pipeline (POST only).
func (s *Server) handleInference(ctx *fasthttp.RequestCtx, rt inferRoute) {
	m, err := s.lookupRoute(rt)
	switch {
	case err != nil && rt.def:
		s.drainBody(ctx)
		s.noModel(ctx)
		return
	case err != nil:
		s.lookupFailed(ctx, err, true) // inference requests are counted, on model _unknown
		return
	}
	defer m.done()
	if !ctx.IsPost() {
		m.met.req.Observe(fasthttp.StatusMethodNotAllowed, reasonNotFound, 0)
		s.methodNotAllowed(ctx, "POST")
		return
	}
	s.serveInference(ctx, m, rt.fe)
}

// isInferencePath: the paths whose requests go through the pipeline (which reads or drains
// their bodies).
func isInferencePath(p string) bool {
	_, ok := inferenceRoute(p)
	return ok
}

// isHealthPath: the paths served even over the connection limit.
func isHealthPath(p string) bool {
	return p == "/" || p == "/metrics" || strings.HasPrefix(p, "/v2/health/") || strings.HasSuffix(p, "/ready")
}

// noModel answers /predict/ when its default model (the repository's first) is not served.
func (s *Server) noModel(ctx *fasthttp.RequestCtx) int {
	// Counted on model _unknown (the default's own series go with it when it is unloaded), so
	// that an outage of the default model shows in the error rate.
	reason := reasonUnavailable
	if s.draining() {
		reason = reasonDraining
	}
	s.met.unknown.Observe(fasthttp.StatusServiceUnavailable, reason, 0)
	ctx.Response.Header.Set("Retry-After", s.retryAfter)
	msg := "no model is being served (the server is starting or draining)"
	if name := s.models.Load().first; name != "" && !s.draining() {
		msg = fmt.Sprintf("the default model %q is not loaded (unloaded through the repository API, or it failed to load); other models are served at /models/{name}/predict", wire.Truncate(name, 100))
	}
	writeError(ctx, fasthttp.StatusServiceUnavailable, msg)
	return fasthttp.StatusServiceUnavailable
}

// lookupFailed answers a request for a model that is not served: 404, or 503 with
// Retry-After while the server drains. Inference requests are counted (on model "_unknown").
func (s *Server) lookupFailed(ctx *fasthttp.RequestCtx, err error, inference bool) {
	s.drainBody(ctx)
	s.lookupAnswer(ctx, err, inference)
}

// lookupAnswer writes lookupFailed's answer (the body is the caller's) and returns its status.
func (s *Server) lookupAnswer(ctx *fasthttp.RequestCtx, err error, inference bool) int {
	status, reason := s.classify(err)
	if inference {
		s.met.unknown.Observe(status, reason, 0)
	}
	if retryable(reason) {
		ctx.Response.Header.Set("Retry-After", s.retryAfter)
	}
	writeError(ctx, status, err.Error())
	return status
}

func (s *Server) notFound(ctx *fasthttp.RequestCtx, path string) {
	s.drainBody(ctx)
	writeError(ctx, fasthttp.StatusNotFound, "not found: "+wire.Truncate(path, 100))
}

func (s *Server) methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	s.drainBody(ctx)
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed; use "+allow)
}
