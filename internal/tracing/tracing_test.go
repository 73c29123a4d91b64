package tracing

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		env     []string
		enabled bool
		proto   string
		sampler string
		ratio   float64
		err     string
	}{
		{nil, false, "http/protobuf", "parentbased_always_on", 1, ""},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, true, "http/protobuf", "parentbased_always_on", 1, ""},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"}, true, "http/protobuf", "parentbased_always_on", 1, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, false, "http/protobuf", "parentbased_always_on", 1, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_SDK_DISABLED", "true"}, false, "", "", 0, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, true, "grpc", "parentbased_always_on", 1, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, true, "http/protobuf", "parentbased_always_on", 1, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"}, true, "http/protobuf", "parentbased_traceidratio", 0.25, ""},
		{[]string{"OTEL_TRACES_EXPORTER", "jaeger"}, false, "", "", 0, "OTEL_TRACES_EXPORTER"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, false, "", "", 0, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{[]string{"OTEL_TRACES_SAMPLER", "sometimes"}, false, "", "", 0, "OTEL_TRACES_SAMPLER"},
		{[]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"}, false, "", "", 0, "OTEL_TRACES_SAMPLER_ARG"},
	} {
		got, err := Parse(env(c.env...))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want one naming %s", c.env, err, c.err)
			}
			continue
		}
		if err != nil || got.Enabled != c.enabled || c.enabled && (got.Protocol != c.proto || got.Sampler != c.sampler || got.Ratio != c.ratio) {
			t.Errorf("%v: %+v, %v", c.env, got, err)
		}
	}
}

// TestBatchSpansFollowTheirRequests: with a ratio of 0, request spans without a sampled
// parent are dropped, and a root span linking only those is dropped too; a root span linking
// one sampled span is sampled. A sampled remote parent is followed.
func TestBatchSpansFollowTheirRequests(t *testing.T) {
	s := Config{Sampler: "parentbased_traceidratio", Ratio: 0}.NewSampler()
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}, Remote: true})
	decide := func(parent trace.SpanContext, links ...trace.SpanContext) sdktrace.SamplingDecision {
		p := sdktrace.SamplingParameters{ParentContext: trace.ContextWithSpanContext(context.Background(), parent), TraceID: trace.TraceID{9}, Name: "x"}
		for _, l := range links {
			p.Links = append(p.Links, trace.Link{SpanContext: l})
		}
		return s.ShouldSample(p).Decision
	}
	if d := decide(trace.SpanContext{}); d != sdktrace.Drop {
		t.Errorf("a root request span at ratio 0: %v", d)
	}
	if d := decide(sampled); d != sdktrace.RecordAndSample {
		t.Errorf("a request span with a sampled parent: %v", d)
	}
	if d := decide(trace.SpanContext{}, unsampled, unsampled); d != sdktrace.Drop {
		t.Errorf("a batch of unsampled requests: %v", d)
	}
	if d := decide(trace.SpanContext{}, unsampled, sampled); d != sdktrace.RecordAndSample {
		t.Errorf("a batch with a sampled request: %v", d)
	}
	if d := decide(unsampled, sampled); d != sdktrace.Drop {
		t.Errorf("a child of an unsampled parent: %v", d)
	}
}
