package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (OpenTelemetry), when Options.TracerProvider is set. Each inference request is a
// server span, a child of its client's trace context when it sent one, with a child span per
// stage: "read body", "decode" (one per image; an event when it got a decode worker),
// "queue" and "run" (one each per sample). A batch run serves many requests, often of many
// traces: it is a span of its own ("batch run", a root) with a link to every request span it
// served, and each request's "run" span links to it. The batcher knows nothing of this: each
// job carries its request's span context into the run function, which gives it the batch
// span's back (model.go). With no provider, nothing here runs: no span, no allocation.

const tracerName = "github.com/imagegate/imagegate/gateway"

// Span attribute keys.
const (
	attrModel     = attribute.Key("imagegate.model")
	attrVersion   = attribute.Key("imagegate.model.version")
	attrRequestID = attribute.Key("imagegate.request_id")
	attrBatchSize = attribute.Key("imagegate.batch.size")
	attrInstance  = attribute.Key("imagegate.batch.instance")
	attrOutcome   = attribute.Key("imagegate.outcome") // ok, or the failure reason
	attrSample    = attribute.Key("imagegate.sample")
	attrStatus    = attribute.Key("http.response.status_code")
	attrImage     = attribute.Key("imagegate.image.bytes")
	attrKey       = attribute.Key("imagegate.key") // the API key's name
)

// startSpan starts the request's server span (at its start), when tracing is on.
func (s *Server) startSpan(r *request) {
	if s.tracer == nil {
		return
	}
	ctx := context.Background()
	if r.meta.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, r.meta.parent)
	}
	_, span := s.tracer.Start(ctx, r.m.spanName, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(r.start),
		trace.WithAttributes(attrModel.String(r.m.name), attrVersion.String(r.m.version)))
	r.meta.span, r.meta.sc = span, span.SpanContext()
}

// traced reports whether the request's span records (it is sampled): its stage spans are
// made only then.
func (r *request) traced() bool { return r.meta.span != nil && r.meta.span.IsRecording() }

// stageSpan records a finished stage of the request as a child span.
func (r *request) stageSpan(name string, start, end time.Time, opts ...trace.SpanStartOption) {
	r.startStageSpan(name, start, opts...).End(trace.WithTimestamp(end))
}

// startStageSpan starts a child span of the request at start; the caller ends it.
func (r *request) startStageSpan(name string, start time.Time, opts ...trace.SpanStartOption) trace.Span {
	ctx := trace.ContextWithSpanContext(context.Background(), r.meta.sc)
	_, sp := r.s.tracer.Start(ctx, name, append(opts, trace.WithTimestamp(start))...)
	return sp
}

// traceSamples records each sample's queue wait and run as spans, the run linked to its
// batch's span.
func (r *request) traceSamples() {
	if !r.traced() || r.samples == nil {
		return
	}
	for i := range r.samples.len() {
		st := r.samples.stage(i)
		if st.runStart.IsZero() {
			continue // it never ran (dropped from the queue, or the request failed before)
		}
		idx := attrSample.Int(i)
		r.stageSpan("queue", st.submitted, st.runStart, trace.WithAttributes(idx))
		r.stageSpan("run", st.runStart, st.runEnd, trace.WithAttributes(idx, attrBatchSize.Int(st.batch)),
			trace.WithLinks(trace.Link{SpanContext: st.batchSpan}))
	}
}

// endSpan ends the request's span with its outcome.
func (s *Server) endSpan(r *request, status int, reason string) {
	sp := r.meta.span
	if sp == nil {
		return
	}
	if sp.IsRecording() {
		outcome := reason
		if outcome == "" {
			outcome = "ok"
		}
		sp.SetAttributes(attrRequestID.String(string(r.requestID())), attrStatus.Int(status), attrOutcome.String(outcome),
			attrBatchSize.Int(r.meta.stages.batch))
		if r.meta.key != "" {
			sp.SetAttributes(attrKey.String(r.meta.key))
		}
		if status >= 500 {
			// Server spans fail on 5xx only: a 4xx is the client's error (OpenTelemetry's HTTP
			// conventions).
			sp.SetStatus(codes.Error, reason)
		}
	}
	sp.End(trace.WithTimestamp(r.start.Add(r.meta.stages.total)))
}

// batchSpan starts the span of a batch run on instance, linked to the sampled request spans
// of its jobs; it returns nil when none of them is sampled.
func batchSpan(tr trace.Tracer, m *model, instance, size int, start time.Time, spans func(yield func(trace.SpanContext) bool)) trace.Span {
	var links []trace.Link
	for sc := range spans {
		if sc.IsSampled() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if len(links) == 0 {
		return nil
	}
	_, sp := tr.Start(context.Background(), "batch run", trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(attrModel.String(m.name), attrVersion.String(m.version), attrInstance.Int(instance), attrBatchSize.Int(size)))
	return sp
}

// endBatchSpan ends a batch run's span with its outcome.
func endBatchSpan(sp trace.Span, end time.Time, err error) {
	if err != nil {
		sp.SetAttributes(attrOutcome.String(reasonInternal))
		sp.SetStatus(codes.Error, err.Error())
	} else {
		sp.SetAttributes(attrOutcome.String("ok"))
	}
	sp.End(trace.WithTimestamp(end))
}
