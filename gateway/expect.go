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
	rt, inference := inferenceRoute(path)
	switch {
	case !fc.IsPost():
		return s.answerNow(fc)
	case !inference && strings.HasPrefix(path, "/v2/repository"):
		return fasthttp.StatusContinue // the repository's handlers read their bodies
	case !inference:
		return s.answerNow(fc)
	}
	if st, refused := s.expectAuthorize(fc, path); refused { // the key, before the door (security.go)
		return st
	}
	m, err := s.lookupRoute(rt)
	switch {
	case err != nil && rt.def:
		return countKey(fc, s.noModel(fc))
	case err != nil:
		return countKey(fc, s.lookupAnswer(fc, err, true))
	}
	defer m.done()
	r := s.newRequest(m, rt.fe)
	defer s.putRequest(r)
	r.http.fc = fc
	r.t = &r.http
	r.takeRequestID(fc.Request.Header.Peek(headerRequestID))
	r.takeTraceContext(fc.Request.Header.Peek("traceparent"), fc.Request.Header.Peek("tracestate"))
	r.meta.key = keyName(fc)
	r.meta.stage = stageAdmit
	err = s.door(r)
	if err == nil {
		return fasthttp.StatusContinue // handle runs it (and traces and logs it)
	}
	s.startSpan(r)
	status, reason := s.fail(r, err)
	r.meta.stages.total = time.Since(r.start)
	if r.meta.door {
		s.met.doorLatency.Update(r.meta.stages.total.Seconds())
	}
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
