package gateway

import (
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// expectContinue decides a request that sent "Expect: 100-continue", before its body comes
// (fasthttp's ExpectHandler: the header has been read, nothing of the body). A request that
// handle would refuse on its header alone gets that answer now, so that its client does not
// upload the body: over server.max_connections, an unknown model, a body declared over
// server.max_body_bytes, a full queue, a deadline it cannot meet, the shutdown. The answer,
// its metrics and its reason are the ones handle would give; fasthttp closes the connection
// after it (a client may have started the body without waiting). A request that is not an
// inference POST or a POST to the repository API has no use for a body (a health check,
// /metrics, an unknown path, a wrong method): handle answers it now. Every other request
// gets "100 Continue" and goes through handle, which checks it again once the body is read.
func (s *Server) expectContinue(fc *fasthttp.RequestCtx) int {
	st := s.expectDecide(fc)
	if st != fasthttp.StatusContinue {
		lingerOnClose(fc) // a client that did not wait for "100 Continue" may be sending its body
		s.finishHTTP(fc, time.Time{})
	}
	return st
}

func (s *Server) expectDecide(fc *fasthttp.RequestCtx) int {
	path := string(fc.Path())
	if overflowConn(fc) && !isHealthPath(path) {
		s.met.refusals[refuseConnections].Inc()
		fc.Response.Header.Set("Retry-After", s.retryAfter)
		writeError(fc, fasthttp.StatusServiceUnavailable, overflowMessage(s.opts.MaxConnections))
		return fasthttp.StatusServiceUnavailable
	}
	if !fc.IsPost() {
		return s.answerNow(fc)
	}
	if st, refused := s.expectAuthorize(fc, path); refused { // the key (security.go)
		return st
	}
	var name, version string
	var fe frontEnd
	predictDefault := path == "/predict/" || path == "/predict"
	switch {
	case predictDefault:
		name, fe = s.models.Load().first, predictAPI{}
	case strings.HasPrefix(path, "/models/"):
		n, tail, _ := strings.Cut(path[len("/models/"):], "/")
		if tail != "predict" && tail != "predict/" {
			return s.answerNow(fc)
		}
		name, fe = n, predictAPI{}
	case strings.HasPrefix(path, "/v2/repository"):
		return fasthttp.StatusContinue // the repository's handlers read their bodies
	case strings.HasPrefix(path, "/v2/models/"):
		n, v, tail, tensorOnly, ok := v2ModelPath(path[len("/v2/models/"):])
		if !ok || tail != "infer" {
			return s.answerNow(fc)
		}
		name, version, fe = n, v, v2API{tensorOnly: tensorOnly}
	default:
		return s.answerNow(fc)
	}
	m, err := s.lookup(name, version)
	switch {
	case err != nil && predictDefault:
		return s.noModel(fc)
	case err != nil:
		return s.lookupAnswer(fc, err, true)
	}
	defer m.done()
	r := s.newRequest(m, fe)
	defer s.putRequest(r)
	r.http.fc = fc
	r.t = &r.http
	r.takeRequestID(fc.Request.Header.Peek(headerRequestID))
	r.takeTraceContext(fc.Request.Header.Peek("traceparent"), fc.Request.Header.Peek("tracestate"))
	r.meta.key = keyName(fc)
	r.meta.stage = stageAdmit
	err = s.admit(r)
	if err == nil {
		return fasthttp.StatusContinue // handle runs it (and traces and logs it)
	}
	s.startSpan(r)
	status, reason := s.fail(r, err)
	r.meta.stages.total = time.Since(r.start)
	r.t.annotate(r)
	m.met.req.Observe(status, reason, r.meta.stages.total)
	countKey(fc, status)
	s.endSpan(r, status, reason)
	s.logRequest(r, status, reason)
	return status
}

// answerNow answers, without its body, a request that has no use for one.
func (s *Server) answerNow(fc *fasthttp.RequestCtx) int {
	s.handle(fc)
	return fc.Response.StatusCode()
}
