package gateway

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/valyala/fasthttp"
)

// The access log: one line per request, through its own slog.Logger (text or JSON, its own
// stream), when Options.AccessLog is set. Every failed request is logged; of the successful
// ones, Options.AccessSample (a fraction, drawn at random per request). Inference requests
// log their model, stage times, batch size and trace; the other requests of the public
// listener (health, metadata, metrics, an unknown path or model) log what they have. The
// fields, in order: client, method, path, [model, version,] status, [reason, refusal, stage,]
// bytes_in, bytes_out, [read_ms, decode_ms, queue_ms, run_ms, batch,] total_ms, request_id,
// [trace_id,] [key]. No header value is logged but the request ID (which validRequestID
// checks); key is the name of the request's API key, never the key.

// accessLog is the access log's settings.
type accessLog struct {
	log    *slog.Logger
	sample float64
}

// wants reports whether a request with this status is logged.
func (a *accessLog) wants(status int) bool {
	return status >= 400 || a.sample >= 1 || a.sample > 0 && rand.Float64() < a.sample
}

// logRequest writes an inference request's access log line.
func (s *Server) logRequest(r *request, status int, reason string) {
	a := s.access
	if a == nil || !a.wants(status) {
		return
	}
	st := &r.meta.stages
	attrs := make([]slog.Attr, 0, 24)
	attrs = r.t.logAttrs(r, attrs)
	attrs = append(attrs, slog.String("model", r.m.name), slog.String("version", r.m.version), slog.Int("status", status))
	if reason != "" {
		attrs = append(attrs, slog.String("reason", reason))
		if r.meta.refusal != "" {
			attrs = append(attrs, slog.String("refusal", r.meta.refusal))
		}
		attrs = append(attrs, slog.String("stage", r.meta.stage))
	}
	in, out := r.t.bytes(r)
	attrs = append(attrs, slog.Int64("bytes_in", in), slog.Int64("bytes_out", out),
		msAttr("read_ms", st.read), msAttr("decode_ms", st.decode), msAttr("queue_ms", st.queue), msAttr("run_ms", st.run),
		slog.Int("batch", st.batch), msAttr("total_ms", st.total), slog.String("request_id", string(r.requestID())))
	if tid := r.traceID(); tid.IsValid() {
		attrs = append(attrs, slog.String("trace_id", tid.String()))
	}
	if r.meta.key != "" {
		attrs = append(attrs, slog.String("key", r.meta.key)) // its name, never the key
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}

// msAttr is a duration in milliseconds (to the microsecond): what log processors sum and
// compare, in both formats.
func msAttr(key string, d time.Duration) slog.Attr {
	return slog.Float64(key, float64(d.Microseconds())/1000)
}

// logHTTP writes the access log line of a request of the public listener answered without
// the pipeline (health, metadata, metrics, not found, an unknown model, a refusal at the
// connection limit); bytes_in is the length its headers declare.
func (s *Server) logHTTP(fc *fasthttp.RequestCtx, start time.Time, id []byte) {
	a := s.access
	status := fc.Response.StatusCode()
	if a == nil || !a.wants(status) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = appendHTTPAttrs(fc, attrs)
	attrs = append(attrs, slog.Int("status", status), slog.Int64("bytes_in", max(int64(fc.Request.Header.ContentLength()), 0)),
		slog.Int64("bytes_out", int64(len(fc.Response.Body()))), msAttr("total_ms", time.Since(start)),
		slog.String("request_id", string(id)))
	if k := keyName(fc); k != "" {
		attrs = append(attrs, slog.String("key", k))
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}

// appendHTTPAttrs appends an HTTP request's client address, method and path.
func appendHTTPAttrs(fc *fasthttp.RequestCtx, attrs []slog.Attr) []slog.Attr {
	return append(attrs, slog.String("client", fc.RemoteAddr().String()), slog.String("method", string(fc.Method())),
		slog.String("path", string(fc.Path())))
}
