package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/preprocess"
)

// The request pipeline, shared by every inference front end (the article's /predict, the Open
// Inference Protocol's /v2/.../infer):
//
//	admit → read body (bounded, streamed) → parse (front end) → decode (budgeted) → queue →
//	batch → answer
//
// Each stage has one bound and one fast refusal, and every error goes through classify, the
// one place that maps errors to a status and a metric reason:
//
//   - admit, before a body byte is read: the door (admission.go, admit.Control.Door), the one
//     admission decision every entry makes: the declared length against server.max_body_bytes
//     (413); the model's queue by count and by time (queue_full); the decode queue and the
//     memory budget (overloaded); the deadline against the predicted time (shed).
//   - read body: bytes are taken from the memory budget as they arrive, never as declared;
//     server.max_body_bytes as received and as decompressed; server.read_timeout (408).
//   - parse: the front end checks every sample's size against the declared shapes before it
//     keeps anything, admits the samples on the model's queue and takes their input rows
//     from the budget.
//   - decode: the decode gate (admit.DecodeGate): workers, a bounded queue, the image's decode
//     memory from the budget, deadline-aware admission and dispatch, the queue target's
//     discipline (a waiter may expire: dropped after its wait).
//   - queue, batch: the model's batcher (its queue bound and deadline shedding; under the
//     predict discipline, admit's bound on its wait).
//   - answer: the front end writes the result; a failure is written by fail.
//
// A request's context carries its deadline and is cancelled when its client goes away
// (cause errClientGone) or when a drain runs out of time (cause errDraining).
//
// The stages are the same for every transport; what depends on the protocol that carried the
// request (where its deadline and options are, how its body arrives, how the server learns
// that its client left, how a failure is answered) goes through the request's transport
// (transport.go; HTTP/1's is http.go). A front end is one protocol's body and answer format.

// frontEnd is one protocol's view of an inference request.
type frontEnd interface {
	// parse turns r.body into samples (r.expect, r.rows) and fills them, decoding images
	// with r.decodeImage.
	parse(r *request) error
	// write writes the successful answer.
	write(r *request) error
	// decodes reports whether the front end's requests are (almost always) images to decode.
	decodes() bool
}

// request is one inference request on its way through the pipeline. It is pooled: reset
// clears everything a request left, and buffers that grew too large are dropped.
type request struct {
	s        *Server
	t        transport     // how the request arrived and how its answer leaves: &http for HTTP
	http     httpTransport // HTTP/1's transport state, pooled with the request
	grpc     grpcTransport // gRPC's (grpc.go)
	m        *model
	fe       frontEnd
	start    time.Time
	deadline time.Time
	priority int
	topK     int
	rctx     context.Context
	cancel   context.CancelCauseFunc
	held     int64        // bytes reserved from the memory budget
	incoming admit.Ticket // counted among the decode gate's incoming until it reaches the gate
	admitted int          // samples admitted on m
	bodyDone bool         // the body was read to its end
	bodyBad  bool         // reading the body failed (broken framing, a timeout): nothing to drain
	body     []byte
	bodyBuf  []byte // the body as read (pooled)
	inflated []byte // the body decompressed (pooled)
	img      []byte // a decoded base64 image (pooled)
	scratch  []byte
	out      []byte // the response (pooled)
	samples  sampleSet
	v2       v2State
	meta     requestMeta // its ID, trace context and stage times (observe.go)
}

// maxPooledBuffer: a request's buffers above this size are not kept for the next request.
const maxPooledBuffer = 4 << 20

func (r *request) reset() {
	r.dropBody()
	r.dropImage()
	out := r.out
	if cap(out) > maxPooledBuffer {
		out = nil
	}
	v2 := r.v2
	v2.Reset()
	*r = request{out: out[:0], v2: v2State{InferRequest: v2.InferRequest}}
}

// Body and image buffers are kept apart from requests (s.bodyBufs, s.imageBufs), so that a
// request gives them back as soon as it is done with them instead of holding them while it
// waits: a request waiting for a decode worker holds its decoded image but not its JSON body;
// one waiting for a batch, only its tensor rows.

// dropBody gives the request's body buffers back; r.body is nil after it.
func (r *request) dropBody() {
	if r.s != nil {
		r.s.bodyBufs.put(r.bodyBuf)
		r.s.bodyBufs.put(r.inflated)
		r.s.imageBufs.put(r.scratch)
	}
	r.body, r.bodyBuf, r.inflated, r.scratch = nil, nil, nil, nil
}

// dropImage gives the decoded base64 image's buffer back.
func (r *request) dropImage() {
	if r.s != nil {
		r.s.imageBufs.put(r.img)
	}
	r.img = nil
}

// reserve takes n more bytes of the memory budget for the request.
func (r *request) reserve(n int64) error {
	if r.held+n > r.s.adm.Mem.Limit() {
		// Not even an idle server could hold this request: no retry helps.
		return fmt.Errorf("%w: the request needs %d bytes; server.max_inflight_bytes is %d", errTooLarge, r.held+n, r.s.adm.Mem.Limit())
	}
	if !r.s.adm.Mem.Reserve(n) {
		r.refuse(refuseMemory)
		return errMemory
	}
	r.held += n
	return nil
}

// newRequest takes a pooled request for model m through front end fe, arrived now; the
// caller sets its transport.
func (s *Server) newRequest(m *model, fe frontEnd) *request {
	r := s.requests.Get().(*request)
	r.s, r.m, r.fe, r.start = s, m, fe, time.Now()
	return r
}

// putRequest gives r back to the pool, cleared.
func (s *Server) putRequest(r *request) {
	r.reset()
	s.requests.Put(r)
}

// infer runs an inference request through the pipeline, answers it (its transport writes the
// failure; the front end, the success) with its ID and stage times, counts it, traces and
// logs it, and gives back all it took.
func (s *Server) infer(r *request) {
	m := r.m
	s.inflight.Add(1)
	defer func() {
		// Whatever happened (a panic included), the request gives back all it took.
		if r.samples != nil {
			r.samples.release()
		}
		if r.admitted > 0 {
			m.unadmit(r.admitted)
		}
		r.leftIncoming()
		if r.cancel != nil {
			r.cancel(nil)
		}
		s.adm.Mem.Release(r.held)
		s.putRequest(r)
		s.inflight.Add(-1)
		s.inflightDone()
	}()
	s.startSpan(r)
	err := s.runPipeline(r)
	status, reason := http.StatusOK, ""
	if err != nil {
		status, reason = s.fail(r, err)
		if reason != reasonCanceled && !r.bodyDone {
			r.t.discard(r, err)
		}
		if r.meta.door {
			// Refused at the door: answered once what was sent of the body is dropped.
			s.met.doorLatency.Update(time.Since(r.start).Seconds())
		}
	}
	r.meta.stages.total = time.Since(r.start)
	m.stats.Request(r.statTimes(), err == nil)
	if reason != reasonCanceled {
		r.t.annotate(r)
	}
	m.met.req.Observe(status, reason, r.meta.stages.total)
	s.endSpan(r, status, reason)
	s.logRequest(r, status, reason)
}

// runPipeline runs the request's stages, in order (see the top of this file).
func (s *Server) runPipeline(r *request) error {
	// Admit: before a byte of the body is read.
	r.meta.stage = stageAdmit
	if err := s.door(r); err != nil {
		return err
	}
	if r.fe.decodes() && r.incoming == 0 {
		// In line for a decode worker from now on, as its body arrives (a gRPC call is from its
		// admission at the tap, as its message arrives).
		r.incoming = s.adm.Gate.Admitted(r.start)
	}
	// From here the request has a context: its deadline, its client leaving, a drain's end.
	ctx, cancel := context.WithDeadline(s.life.abort, r.deadline)
	r.rctx, r.cancel = context.WithCancelCause(ctx)
	cancelDeadline := r.cancel
	r.cancel = func(cause error) { cancelDeadline(cause); cancel() }
	release := r.t.watchGone(r, func() { cancelDeadline(errClientGone) })
	defer release()
	// Read the body, within the memory budget.
	r.meta.stage = stageRead
	t := time.Now()
	err := r.t.readBody(r)
	end := time.Now()
	r.meta.stages.read, r.meta.stages.readEnd = end.Sub(t), end
	if r.traced() {
		r.stageSpan("read body", t, end)
	}
	if err != nil {
		return err
	}
	// Parse it into samples (the front end), decoding images through the decode gate.
	r.meta.stage = stageParse
	if err := r.fe.parse(r); err != nil {
		return err
	}
	// Queue and batch: the samples run in the model's batches.
	r.meta.stage = stageQueue
	if err := r.beforeQueue(); err != nil {
		return err
	}
	err = r.samples.submit(r.rctx, r.priority, r.meta.sc)
	r.sampleTimes()
	if err != nil {
		return r.queueError(err)
	}
	// Answer (the front end, through the transport's response).
	r.meta.stage = stageAnswer
	return r.fe.write(r)
}

// sampleTimes takes the request's queue and run times from its samples (the longest of
// each) and its batch size (the largest), and traces them; it notes when the answer begins.
func (r *request) sampleTimes() {
	if r.samples == nil {
		return
	}
	st := &r.meta.stages
	now := time.Now()
	st.answering = now
	if r.samples.len() > 0 && !st.readEnd.IsZero() {
		if sub := r.samples.stage(0).submitted; !sub.IsZero() {
			st.parse = sub.Sub(st.readEnd)
		}
	}
	var last time.Time
	for i := range r.samples.len() {
		ss := r.samples.stage(i)
		switch {
		case !ss.runStart.IsZero():
			st.queue = max(st.queue, ss.runStart.Sub(ss.submitted))
			st.run = max(st.run, ss.runEnd.Sub(ss.runStart))
			st.batch = max(st.batch, ss.batch)
			if ss.runEnd.After(last) { // the statistics take the sample that ran last
				last = ss.runEnd
				st.lastQueue, st.lastRun = ss.runStart.Sub(ss.submitted), ss.runEnd.Sub(ss.runStart)
				st.runInput, st.runInfer = ss.runInput, ss.runInfer
			}
		case !ss.submitted.IsZero():
			st.queue = max(st.queue, now.Sub(ss.submitted)) // it left the queue without running
		}
	}
	r.traceSamples()
}

// leftIncoming takes the request out of the decode gate's incoming count (it reached the gate
// or ended before).
func (r *request) leftIncoming() {
	if r.incoming != 0 {
		r.s.adm.Gate.Arrived(r.incoming)
		r.incoming = 0
	}
}

// admitSamples counts n more samples of the request against its model's queue bound.
func (r *request) admitSamples(n int) error {
	if err := r.m.admit(n); err != nil {
		r.refuse(refuseQueue)
		return err
	}
	r.admitted += n
	return nil
}

// expect admits the request's n samples on its model's queue; parse calls it once it knows n
// (the body is read), before any sample is decoded or filled.
func (r *request) expect(n int) error {
	if n > r.admitted {
		if err := r.admitSamples(n - r.admitted); err != nil {
			return err
		}
	}
	return nil
}

// rows takes the input rows of the admitted samples (memory budget, pooled jobs), once: rows
// for encoded images or for tensor data (a request carries one or the other).
func (r *request) rows(images bool) (sampleSet, error) {
	if r.samples != nil {
		return r.samples, nil
	}
	size := r.m.rowBytes()
	if images {
		size = r.m.imageRowBytes()
	}
	if err := r.reserve(int64(r.admitted) * size); err != nil {
		return nil, err
	}
	r.samples = r.m.impl.samples(r.admitted, images)
	return r.samples, nil
}

// decodeImage decodes an encoded image into sample i through the decode gate.
func (r *request) decodeImage(i int, img []byte) error {
	start := time.Now()
	var got time.Time // when a decode worker was free
	stage := r.meta.stage
	r.meta.stage = stageDecode
	err := r.decodeImageGated(i, img, &got)
	end := time.Now()
	r.meta.stages.decode += end.Sub(start)
	if !got.IsZero() {
		r.meta.stages.decodeWait += got.Sub(start)
	}
	if err == nil {
		r.meta.stage = stage
	}
	if r.traced() {
		sp := r.startStageSpan("decode", start, trace.WithAttributes(attrSample.Int(i), attrImage.Int(len(img))))
		if !got.IsZero() {
			sp.AddEvent("decode worker", trace.WithTimestamp(got))
		}
		if err != nil {
			sp.SetStatus(codes.Error, "")
		}
		sp.End(trace.WithTimestamp(end))
	}
	return err
}

func (r *request) decodeImageGated(i int, img []byte, got *time.Time) error {
	s, m := r.s, r.m
	cost, heavy, err := decodeCost(m.pre, img)
	if err != nil {
		return err
	}
	if r.held+cost > s.adm.Mem.Limit() {
		return fmt.Errorf("%w: the request and its image's decode need %d bytes; server.max_inflight_bytes is %d", errTooLarge, r.held+cost, s.adm.Mem.Limit())
	}
	after, _ := m.impl.predict(r.priority)
	r.leftIncoming()
	if err := s.adm.Gate.Acquire(r.rctx, r.deadline, m.queueTarget, cost, heavy, after); err != nil {
		return r.gateError(err, cost)
	}
	// The rows are taken once a worker is: a request waiting for one holds only its body.
	samples, err := r.rows(true)
	if err != nil {
		s.adm.Gate.Release(cost, heavy, 0)
		return err
	}
	decode := func() (err error) {
		defer func() {
			// A Go codec that panics on hostile data (its state is the call's own) fails
			// this image, not the server.
			if p := recover(); p != nil {
				s.log.Error("image decoder panicked", "model", m.name, "request_id", string(r.requestID()), "panic", fmt.Sprint(p))
				err = fmt.Errorf("cannot decode the image: the decoder failed: %w", preprocess.ErrBadImage)
			}
		}()
		// The request's context: a decode stops when its client leaves or its deadline passes.
		return samples.decode(r.rctx, i, img)
	}
	t := time.Now()
	*got = t
	if heavy {
		err = s.threads.Heavy(decode)
	} else {
		err = s.threads.Decode(decode)
	}
	d := time.Since(t)
	if err != nil && r.rctx.Err() != nil {
		// Stopped part-way (the client left, the deadline passed): not a decode time.
		s.adm.Gate.Release(cost, heavy, 0)
		return err
	}
	s.adm.Gate.Release(cost, heavy, d)
	m.met.preprocess.Update(d.Seconds())
	return err
}

// bodyChunk is the first reservation for a body, and the smallest growth (the door checks that
// the budget has it).
const bodyChunk = admit.FirstChunk

// readAll reads src to its end into *buf, growing it (doubling from bodyChunk, up to the
// declared length when there is one) as bytes arrive; each growth is taken from the memory
// budget first, so memory follows the bytes received, never a declared length. More than
// server.max_body_bytes is refused.
func (r *request) readAll(src io.Reader, declared int64, buf *[]byte) ([]byte, error) {
	limit := r.s.opts.MaxBodyBytes
	b := (*buf)[:0]
	defer func() { *buf = b[:0] }() // the buffer, grown, goes back with the request
	var room int64                  // bytes reserved for b
	zeroReads := 0
	for {
		if int64(len(b)) == room {
			if room > limit {
				return nil, fmt.Errorf("%w: server.max_body_bytes is %d", errBodyTooLarge, limit)
			}
			next := max(2*room, bodyChunk)
			if declared >= 0 {
				next = min(next, declared+1) // room for the end to be seen
			}
			next = min(next, limit+1)
			if err := r.reserve(next - room); err != nil {
				return nil, err
			}
			room = next
			if int64(cap(b)) < room {
				nb := make([]byte, len(b), room)
				copy(nb, b)
				b = nb
			}
		}
		n, err := src.Read(b[len(b):room])
		b = b[:len(b)+n]
		switch {
		case int64(len(b)) > limit:
			return nil, fmt.Errorf("%w: server.max_body_bytes is %d", errBodyTooLarge, limit)
		case err == io.EOF:
			return b, nil
		case err != nil:
			return nil, err
		case n == 0:
			if zeroReads++; zeroReads > 100 {
				return nil, io.ErrNoProgress
			}
		}
	}
}

// fail answers a failed request, through its transport, and returns its status and reason
// (classify's).
func (s *Server) fail(r *request, err error) (int, string) {
	if errors.Is(err, context.Canceled) && r.rctx != nil {
		if cause := context.Cause(r.rctx); cause != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
	}
	status, reason := s.classify(err)
	switch reason {
	case reasonCanceled:
		// The client closed its connection (or its sending side) while the request waited:
		// it is dropped unanswered.
		r.t.abandon(r)
		return status, reason
	case reasonInternal:
		s.log.Error("inference failed", "model", r.m.name, "version", r.m.version, "request_id", string(r.requestID()), "err", err)
	}
	msg := err.Error()
	switch {
	case reason == reasonTimeout && status == http.StatusGatewayTimeout:
		msg = "the request's deadline passed before it could be answered (X-Request-Timeout or batching.default_timeout)"
	case reason == reasonDraining && !errors.Is(err, errDraining):
		// The batcher's "closed": the drain ran out of server.shutdown_timeout.
		msg = "gateway: draining: the server is shutting down and dropped the requests still queued; retry"
	}
	r.t.fail(r, status, msg, retryable(reason))
	return status, reason
}
