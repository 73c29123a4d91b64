package gateway

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// What a request tells about itself, the same for every transport: its ID, the trace context
// its client sent, and the time each stage took. A transport takes the client's values in
// (r.takeRequestID, r.takeTraceContext) before the pipeline runs, and puts the request's
// values on its answer (transport.annotate: r.requestID, r.appendServerTiming); the pipeline
// fills the rest (stage times, the span, the access log line). Nothing here allocates unless
// tracing or the access log is on.

// maxRequestID bounds a request ID taken from a client (longer ones are replaced).
const maxRequestID = 128

// validRequestID reports whether b is a request ID the gateway takes from a client: 1 to 128
// bytes, each a token character (RFC 9110's tchar) or one of ':', '/', '=', '@' (URNs,
// base64). Anything else (spaces, quotes, control bytes, non-ASCII) is replaced by an ID of
// the gateway's own, so that IDs are safe in log lines and headers.
func validRequestID(b []byte) bool {
	if len(b) == 0 || len(b) > maxRequestID {
		return false
	}
	for _, c := range b {
		if !idChar[c] {
			return false
		}
	}
	return true
}

var idChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~:/=@" {
		t[c] = true
	}
	return t
}()

// requestIDs makes the IDs of requests that bring none: a random prefix per Server and a
// counter, "3f9a0c2b5e1d7a48-1f" (no random number, lock or allocation per request).
type requestIDs struct {
	prefix [17]byte // 16 hex digits and '-'
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	g := &requestIDs{}
	hex := strconv.AppendUint(nil, rand.Uint64()|1<<63, 16) // 16 digits
	copy(g.prefix[:], hex)
	g.prefix[16] = '-'
	return g
}

// next appends a new ID to dst.
func (g *requestIDs) next(dst []byte) []byte {
	dst = append(dst, g.prefix[:]...)
	return strconv.AppendUint(dst, g.n.Add(1), 16)
}

// requestMeta is what the pipeline knows about a request beside its data, pooled with it.
type requestMeta struct {
	id      [maxRequestID]byte
	idLen   uint8
	stages  stageTimes
	refusal string            // its refusal: the stage when refused at once (gateway_refusals_total's), or "expired"
	door    bool              // refused at the door (gateway_refusal_duration_seconds times its answer)
	stage   string            // the pipeline stage the request is in (where it failed, if it did)
	parent  trace.SpanContext // the client's trace context (traceparent, tracestate); zero: none
	span    trace.Span        // the request's server span; nil: not traced
	sc      trace.SpanContext // span's context (for the batch run's links)
	key     string            // the name of its API key ("": none)
}

// stageTimes are the times a request spent in each stage. Samples of one request that run in
// different batches report the longest queue wait and run.
type stageTimes struct {
	read   time.Duration // reading the body
	decode time.Duration // decoding its images: waiting for a decode worker and the decode
	queue  time.Duration // waiting in the model's queue for a batch
	run    time.Duration // its batch's run
	total  time.Duration // from its headers to its answer
	batch  int           // the size of its (largest) batch
	// For the statistics extension (stats.go), from the times taken above: the part of decode
	// spent waiting for a decode worker; from the body's end to its samples' submission (the
	// parse, decodes included); the queue wait and run of the sample that ran last (so that
	// the stages add up to at most total) and how that run divides; when the answer began.
	decodeWait         time.Duration
	parse              time.Duration
	lastQueue, lastRun time.Duration
	runInput, runInfer time.Duration
	readEnd, answering time.Time
}

// Pipeline stages, as the access log names the one a failed request was in.
const (
	stageAdmit  = "admit"
	stageRead   = "read"
	stageParse  = "parse"
	stageDecode = "decode"
	stageQueue  = "queue"
	stageAnswer = "answer"
)

// takeRequestID takes the client's request ID (X-Request-ID, gRPC's x-request-id) when it is
// sane (validRequestID); nil or anything else leaves the request without one, and it gets
// one of the gateway's own when it is first asked for.
func (r *request) takeRequestID(b []byte) {
	if validRequestID(b) {
		r.meta.idLen = uint8(copy(r.meta.id[:], b))
	}
}

// adoptRequestID takes the Open Inference Protocol's request id as the request ID when the
// transport brought none.
func (r *request) adoptRequestID(b []byte) {
	if r.meta.idLen == 0 {
		r.takeRequestID(b)
	}
}

// requestID returns the request's ID, making one when it has none yet. The slice is the
// request's: valid until it is answered.
func (r *request) requestID() []byte {
	if r.meta.idLen == 0 {
		r.meta.idLen = uint8(len(r.s.ids.next(r.meta.id[:0])))
	}
	return r.meta.id[:r.meta.idLen]
}

// appendServerTiming appends the request's stage times as a Server-Timing header value
// (W3C Server Timing; milliseconds): read, decode, queue, run and total.
func (r *request) appendServerTiming(b []byte) []byte {
	st := &r.meta.stages
	b = appendTiming(b, "read", st.read)
	b = append(b, ", "...)
	b = appendTiming(b, "decode", st.decode)
	b = append(b, ", "...)
	b = appendTiming(b, "queue", st.queue)
	b = append(b, ", "...)
	b = appendTiming(b, "run", st.run)
	b = append(b, ", "...)
	return appendTiming(b, "total", st.total)
}

func appendTiming(b []byte, name string, d time.Duration) []byte {
	b = append(b, name...)
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// takeTraceContext takes the client's W3C trace context (the traceparent and tracestate
// headers, or gRPC metadata) when tracing or the access log is on; a malformed traceparent is
// ignored (the request starts a trace of its own), as the W3C recommends.
func (r *request) takeTraceContext(traceparent, tracestate []byte) {
	if r.s.tracer == nil && r.s.access == nil || len(traceparent) == 0 {
		return
	}
	tid, sid, flags, ok := parseTraceparent(traceparent)
	if !ok {
		return
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true}
	if len(tracestate) > 0 && r.s.tracer != nil {
		if ts, err := trace.ParseTraceState(string(tracestate)); err == nil {
			cfg.TraceState = ts
		}
	}
	r.meta.parent = trace.NewSpanContext(cfg)
}

// parseTraceparent parses a W3C traceparent, "00-<32 hex trace id>-<16 hex parent id>-<2 hex
// flags>"; a later version may append fields after a '-', version ff is invalid, and all-zero
// IDs are invalid. Only lower-case hex digits are valid.
func parseTraceparent(b []byte) (tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags, ok bool) {
	if len(b) < 55 || b[2] != '-' || b[35] != '-' || b[52] != '-' {
		return tid, sid, flags, false
	}
	var ver [1]byte
	if !unhex(ver[:], b[0:2]) || ver[0] == 0xff || ver[0] == 0 && len(b) != 55 || len(b) > 55 && b[55] != '-' {
		return tid, sid, flags, false
	}
	var f [1]byte
	if !unhex(tid[:], b[3:35]) || !unhex(sid[:], b[36:52]) || !unhex(f[:], b[53:55]) || !tid.IsValid() || !sid.IsValid() {
		return tid, sid, flags, false
	}
	return tid, sid, trace.TraceFlags(f[0]) & trace.FlagsSampled, true
}

// unhex decodes lower-case hex digits into dst (len(src) == 2*len(dst)).
func unhex(dst, src []byte) bool {
	for i := range dst {
		hi, ok1 := hexVal(src[2*i])
		lo, ok2 := hexVal(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// traceID is the trace the request belongs to: its span's, else its client's; zero: none.
func (r *request) traceID() trace.TraceID {
	if r.meta.sc.IsValid() {
		return r.meta.sc.TraceID()
	}
	return r.meta.parent.TraceID()
}

// refuse counts a refusal at stage (gateway_refusals_total) and notes it for the access log.
func (r *request) refuse(stage string) {
	r.s.met.refusals[stage].Inc()
	r.meta.refusal = stage
}
