package gateway

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/netx"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/postprocess"
)

// httpTransport is HTTP/1.x's transport (fasthttp): a request's options are its headers and
// query, its body is streamed from the connection, its client's leaving is watched on the
// socket, and its failure is our JSON error with the status. It lives in the pooled request
// (request.http), so that taking it allocates nothing.
type httpTransport struct {
	fc       *fasthttp.RequestCtx
	received int64 // body bytes received
}

// serveInference runs an HTTP inference request for model m through the pipeline.
func (s *Server) serveInference(fc *fasthttp.RequestCtx, m *model, fe frontEnd) {
	r := s.newRequest(m, fe)
	r.http.fc = fc
	r.t = &r.http
	h := &fc.Request.Header
	r.takeRequestID(h.Peek(headerRequestID))
	r.takeTraceContext(h.Peek("traceparent"), h.Peek("tracestate"))
	r.meta.key = keyName(fc)
	s.infer(r)
}

// headerRequestID carries a request's ID, both ways.
const headerRequestID = "X-Request-ID"

func (t *httpTransport) annotate(r *request) {
	h := &t.fc.Response.Header
	h.SetBytesV(headerRequestID, r.requestID())
	var buf [160]byte
	h.SetBytesV("Server-Timing", r.appendServerTiming(buf[:0]))
}

func (t *httpTransport) logAttrs(_ *request, attrs []slog.Attr) []slog.Attr {
	return appendHTTPAttrs(t.fc, attrs)
}

func (t *httpTransport) bytes(*request) (in, out int64) {
	return t.received, int64(len(t.fc.Response.Body()))
}

func (t *httpTransport) declaredBytes(*request) int64 {
	return int64(t.fc.Request.Header.ContentLength()) // negative: chunked, or none
}

func (t *httpTransport) watchGone(r *request, gone func()) (release func()) {
	return r.s.gone.Watch(t.fc.Conn(), gone)
}

func (t *httpTransport) fail(r *request, status int, msg string, retry bool) {
	if retry {
		t.fc.Response.Header.Set("Retry-After", r.s.retryAfter)
	}
	if r.meta.refusal != "" {
		t.fc.Response.Header.Set(headerRefusal, r.meta.refusal)
	}
	writeError(t.fc, status, msg)
}

// headerRefusal tells a client how its request was refused under load: the stage that refused it
// at once (queue, queue_time, memory, decode_queue, deadline), or "expired" when it was dropped
// after waiting in line (the access log's refusal value). A load generator tells the two apart
// with it.
const headerRefusal = "X-Refusal"

// abandon closes the connection without a response.
func (t *httpTransport) abandon(*request) {
	t.fc.HijackSetNoResponse(true)
	t.fc.Hijack(func(net.Conn) {})
}

// options reads the request's deadline and priority (headers or query), top_k (a
// classifier's) and a detector's selection (score_threshold, iou_threshold, max_detections).
func (t *httpTransport) options(r *request) error {
	fc, m := t.fc, r.m
	timeout := m.defaultTimeout
	args := fc.QueryArgs()
	if v := args.Peek("top_k"); v != nil {
		k, err := parseCount(v)
		if err != nil || k < 0 {
			return wire.Malformed("top_k must be a non-negative integer, got %q", wire.Truncate(string(v), 20))
		}
		if m.task.task != TaskClassify {
			return wire.Malformed("top_k applies to classification models; model %s's task is %s", m.name, m.task.task)
		}
		r.topK = min(k, len(m.labels))
	}
	for _, key := range [...]string{postprocess.ParamScoreThreshold, postprocess.ParamIOUThreshold, postprocess.ParamMaxDetections} {
		if v := args.Peek(key); v != nil {
			if err := r.selection(key, string(v)); err != nil {
				return err
			}
		}
	}
	tv := fc.Request.Header.Peek("X-Request-Timeout")
	if tv == nil {
		tv = args.Peek("timeout")
	}
	if tv != nil {
		ms, err := parseMillis(tv)
		if err != nil || !(ms > 0) {
			return wire.Malformed("timeout must be a positive number of milliseconds, got %q", wire.Truncate(string(tv), 20))
		}
		// A timeout only shortens the model's default; a longer one (up to +Inf) is the default.
		if ms < float64(timeout)/float64(time.Millisecond) {
			timeout = time.Duration(ms * float64(time.Millisecond))
		}
	}
	r.deadline = r.start.Add(timeout)
	pv := fc.Request.Header.Peek("X-Request-Priority")
	if pv == nil {
		pv = args.Peek("priority")
	}
	if pv != nil {
		p, err := parseCount(pv)
		if err != nil || p < 0 {
			return wire.Malformed("priority must be a non-negative integer, got %q", wire.Truncate(string(pv), 20))
		}
		r.priority = p
	}
	return nil
}

// parseCount parses a count given in a header or a query parameter: decimal digits only (no
// sign, no spaces), at most 18 of them; strconv.Atoi also took "+3".
func parseCount(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 18 {
		return 0, errBadCount
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errBadCount
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

var errBadCount = errors.New("not a decimal count")

// parseMillis parses a timeout in milliseconds: decimal digits with an optional fraction
// ("250", "0.5"), or "inf" (no shorter than the default). strconv.ParseFloat also took "1_000",
// hex floats and "infinity".
func parseMillis(b []byte) (float64, error) {
	if strings.EqualFold(string(b), "inf") {
		return math.Inf(1), nil
	}
	digits, frac := 0, false
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !frac && i > 0 && i < len(b)-1:
			frac = true
		default:
			return 0, errBadCount
		}
	}
	if digits == 0 || len(b) > 24 {
		return 0, errBadCount
	}
	return strconv.ParseFloat(string(b), 64)
}

// readBody reads the request body into r.body, taking its bytes from the memory budget as they
// arrive, and undoes a gzip or deflate Content-Encoding within the same bounds.
func (t *httpTransport) readBody(r *request) error {
	s := r.s
	h := &t.fc.Request.Header
	declared := int64(h.ContentLength()) // -1: chunked, -2: none
	var src io.Reader = t.fc.RequestBodyStream()
	if src == nil {
		src = bytes.NewReader(t.fc.Request.Body())
	}
	if r.bodyBuf == nil {
		r.bodyBuf = s.bodyBufs.get()
	}
	body, err := r.readAll(src, declared, &r.bodyBuf)
	t.received = int64(len(body))
	if err != nil {
		r.bodyBad = !errors.Is(err, errOverloaded) && !errors.Is(err, errTooLarge)
		var ne net.Error
		switch {
		case s.phase() >= phaseAborting:
			return fmt.Errorf("%w: the server stopped reading bodies (server.shutdown_timeout)", errDraining)
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("%w (server.read_timeout %v)", errReadTimeout, s.opts.ReadTimeout)
		case errors.Is(err, errBodyTooLarge), errors.Is(err, errOverloaded), errors.Is(err, errTooLarge):
			return err
		case connEnded(err):
			return fmt.Errorf("%w: the connection ended inside the request body", errClientGone)
		}
		// fasthttp's error text quotes what it could not parse (a trailer line, a chunk
		// size): never sent back, nor logged.
		if declared == -1 {
			return wire.Malformed("cannot read the request body: its chunked encoding is malformed (a chunk size, a CRLF or a trailer line)")
		}
		return wire.Malformed("cannot read the request body")
	}
	r.bodyDone = true
	if declared >= 0 && int64(len(body)) < declared {
		// The stream ends early only when the connection does: the client left (or shut
		// its sending side, which the gateway reads as leaving), and reads no answer.
		return fmt.Errorf("%w: the connection ended after %d of the body's %d bytes", errClientGone, len(body), declared)
	}
	switch enc := h.Peek(fasthttp.HeaderContentEncoding); {
	case len(enc) == 0, bytes.EqualFold(enc, []byte("identity")):
	case bytes.EqualFold(enc, []byte("gzip")), bytes.EqualFold(enc, []byte("x-gzip")):
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return wire.Malformed("cannot decompress the gzip body: %v", err)
		}
		if r.inflated == nil {
			r.inflated = s.bodyBufs.get()
		}
		if body, err = r.readAll(zr, -1, &r.inflated); err != nil {
			if errors.Is(err, errBodyTooLarge) || errors.Is(err, errOverloaded) || errors.Is(err, errTooLarge) {
				return err
			}
			return wire.Malformed("cannot decompress the gzip body: %v", err)
		}
	case bytes.EqualFold(enc, []byte("deflate")):
		// RFC 9110's deflate is zlib-wrapped; some clients send raw deflate: try zlib first.
		if r.inflated == nil {
			r.inflated = s.bodyBufs.get()
		}
		out, err := r.readAll(zlibOrFlate(body), -1, &r.inflated)
		if err != nil {
			if errors.Is(err, errBodyTooLarge) || errors.Is(err, errOverloaded) || errors.Is(err, errTooLarge) {
				return err
			}
			return wire.Malformed("cannot decompress the deflate body: %v", err)
		}
		body = out
	default:
		return fmt.Errorf("%w: Content-Encoding %q is not supported (gzip, deflate or none)", errUnsupportedMedia, wire.Truncate(string(enc), 40))
	}
	r.body = body
	return nil
}

// discard reads and drops what is left of a refused request's body, so that the client,
// still sending it, reads our answer instead of a connection reset (a close with unread
// data resets the connection). A body declared over server.max_body_bytes, one whose reading
// failed, or one that stops arriving, is not waited for: the connection is closed after the
// answer.
func (t *httpTransport) discard(r *request, cause error) {
	if r.bodyBad || errors.Is(cause, errBodyTooLarge) {
		// Too much to read, or a stream that failed (a malformed chunk size, a timeout, a
		// reset): reading on would take what follows for a chunk header and wait for
		// read_timeout. The connection closes by lingering instead.
		lingerOnClose(t.fc)
		return
	}
	r.s.drainBody(t.fc)
}

// drainBody reads and drops the body of a request answered without reading it (a refusal,
// an unknown model or path), within server.max_body_bytes (dropped in the kernel where it
// can be); fasthttp itself would drop only 256 KiB and reset the rest under the client.
func (s *Server) drainBody(fc *fasthttp.RequestCtx) {
	if int64(fc.Request.Header.ContentLength()) > s.opts.MaxBodyBytes {
		lingerOnClose(fc)
		return
	}
	stream := fc.RequestBodyStream()
	if stream == nil {
		return
	}
	if !s.conns.Drain(fc.Conn(), stream, s.opts.MaxBodyBytes) {
		lingerOnClose(fc)
	}
}

// connEnded reports whether a body read failed because the connection ended (closed or reset
// by the client) rather than because of what the client sent.
func connEnded(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// zlibOrFlate reads a zlib stream, or a raw deflate stream when the data has no zlib header.
func zlibOrFlate(b []byte) io.Reader {
	if len(b) >= 2 && b[0]&0x0f == 8 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0 {
		if zr, err := zlib.NewReader(bytes.NewReader(b)); err == nil {
			return zr
		}
	}
	return flate.NewReader(bytes.NewReader(b))
}

// connState is fasthttp's ConnState hook: the tracker follows each connection's state.
func (s *Server) connState(nc net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateActive:
		s.conns.Active(nc)
	case fasthttp.StateIdle:
		s.conns.Idled(nc)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.conns.Closed(nc)
	}
}

// lingerOnClose closes the request's connection after the answer, lingering: the client may
// still be sending the body the server did not read.
func lingerOnClose(fc *fasthttp.RequestCtx) {
	fc.SetConnectionClose()
	if c, ok := fc.Conn().(*netx.Conn); ok {
		c.LingerOnClose()
	}
}

// overflowConn reports whether the request's connection was admitted over
// server.max_connections (it is served health checks and metrics only).
func overflowConn(fc *fasthttp.RequestCtx) bool {
	c, ok := fc.Conn().(*netx.Conn)
	return ok && c.Overflow()
}

// handleParseError answers a request that could not be read or parsed. Its answers are ours
// (JSON, the right status) and never repeat request bytes: fasthttp's own page for some of
// these errors quotes the raw header block, credentials included. Nothing of err's text
// reaches the response or the log.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	defer s.finishHTTP(ctx, time.Time{})
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than server.max_body_bytes (%d bytes)", s.opts.MaxBodyBytes))
	case errors.As(err, &small):
		if c, ok := ctx.Conn().(*netx.Conn); ok && !c.LineDone() {
			writeError(ctx, fasthttp.StatusRequestURITooLong,
				fmt.Sprintf("the request line (method, URI, version) is longer than the %d-byte header limit", readBufferSize))
		} else {
			writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge,
				fmt.Sprintf("the request's header block is larger than %d bytes", readBufferSize))
		}
	case errors.As(err, &ne) && ne.Timeout():
		writeError(ctx, fasthttp.StatusRequestTimeout, "timed out reading the request (server.read_timeout)")
	case errors.Is(err, netx.ErrHTTPOnTLSPort): // answered in plain text (netx.Conn.Write)
		writeError(ctx, fasthttp.StatusBadRequest, "this port speaks HTTPS (TLS), not plain HTTP: use https://")
	case errors.Is(err, netx.ErrNotTLS):
		writeError(ctx, fasthttp.StatusBadRequest, "not a TLS handshake: this port speaks HTTPS")
	case errors.Is(err, netx.ErrTLSOnPlainPort):
		writeError(ctx, fasthttp.StatusBadRequest, "this port speaks plain HTTP, not TLS: use http://, not https://")
	case errors.Is(err, netx.ErrNotHTTP):
		writeError(ctx, fasthttp.StatusBadRequest, "not an HTTP/1.x request: a request line starts with a method, such as POST")
	case errors.Is(err, netx.ErrBareLF):
		writeError(ctx, fasthttp.StatusBadRequest, "the request line ends with a bare LF: HTTP/1.1 lines end with CRLF")
	default:
		writeError(ctx, fasthttp.StatusBadRequest, "malformed HTTP request")
	}
}

// readBufferSize bounds a request's header block, request line included.
const readBufferSize = 16 << 10

// httpLogger receives fasthttp's own log lines. Their arguments can quote request bytes (the
// header block of a malformed request, with its credentials), so only the constant message is
// logged, through slog, at most once a second.
type httpLogger struct {
	log  *slog.Logger
	last atomic.Int64 // unix nanoseconds of the last line logged
}

func (l *httpLogger) Printf(format string, _ ...any) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(time.Second) || !l.last.CompareAndSwap(last, now) {
		return
	}
	msg, _, _ := strings.Cut(format, "%")
	l.log.Warn("http server: "+strings.TrimSpace(strings.TrimRight(msg, " :\"")), "detail", "arguments withheld: they may quote request bytes")
}
