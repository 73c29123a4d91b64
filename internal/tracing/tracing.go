// Package tracing builds the gateway's OpenTelemetry tracer provider from the standard OTEL_*
// environment variables: the exporter (OTLP over HTTP or gRPC, or none), the sampler, the
// resource. Tracing is off unless the environment asks for it: OTEL_TRACES_EXPORTER=otlp, or
// an OTLP endpoint set and OTEL_TRACES_EXPORTER unset; OTEL_SDK_DISABLED=true turns it off.
// The exporters read their own variables (endpoints, headers, timeouts, compression,
// certificates), and the batch span processor its OTEL_BSP_* ones.
//
// It imports no package of the gateway: cmd/gateway passes the provider it returns to the
// server as an OpenTelemetry TracerProvider.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is what the environment asks for.
type Config struct {
	// Enabled: export traces (the rest is meaningful only then).
	Enabled bool
	// Protocol is grpc or http/protobuf.
	Protocol string
	// Sampler is the sampler's name and Ratio its argument (traceidratio samplers).
	Sampler string
	Ratio   float64
}

// Parse reads the configuration from the environment (getenv: os.Getenv) and checks it; an
// error names the variable to change.
func Parse(getenv func(string) string) (Config, error) {
	var c Config
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return c, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		c.Enabled = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "none":
	case "otlp":
		c.Enabled = true
	default:
		return c, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER is %q: the gateway exports otlp or none", exp)
	}
	c.Protocol = cmpOr(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	if c.Protocol != "http/protobuf" && c.Protocol != "grpc" {
		return c, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) is %q: want http/protobuf or grpc", c.Protocol)
	}
	c.Sampler = cmpOr(getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on")
	c.Ratio = 1
	switch c.Sampler {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if a := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); a != "" {
			r, err := strconv.ParseFloat(a, 64)
			if err != nil || !(r >= 0 && r <= 1) {
				return c, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG is %q: want a ratio in [0, 1]", a)
			}
			c.Ratio = r
		}
	default:
		return c, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER is %q: want always_on, always_off, traceidratio or their parentbased_ forms", c.Sampler)
	}
	return c, nil
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// NewSampler is the configured sampler, which also samples a root span that links a sampled
// span: a batch run, which serves requests of many traces, is recorded whenever a request it
// served is (linkedSampler).
func (c Config) NewSampler() sdktrace.Sampler {
	var s sdktrace.Sampler
	switch strings.TrimPrefix(c.Sampler, "parentbased_") {
	case "always_on":
		s = sdktrace.AlwaysSample()
	case "always_off":
		s = sdktrace.NeverSample()
	default:
		s = sdktrace.TraceIDRatioBased(c.Ratio)
	}
	s = linkedSampler{s}
	if strings.HasPrefix(c.Sampler, "parentbased_") {
		s = sdktrace.ParentBased(s)
	}
	return s
}

// linkedSampler samples a span without a parent that links a sampled span, and asks base
// about every other span.
type linkedSampler struct{ base sdktrace.Sampler }

func (l linkedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, k := range p.Links {
			if k.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return l.base.ShouldSample(p)
}

func (l linkedSampler) Description() string { return "LinkedSampler{" + l.base.Description() + "}" }

// Provider is a tracer provider that exports; Shutdown flushes it.
type Provider struct {
	*sdktrace.TracerProvider
	Config Config
}

// New builds the provider the configuration asks for: nil when tracing is off. The exporter
// connects lazily: an unreachable collector costs dropped spans (logged through otel's error
// handler), never a failed start.
func New(ctx context.Context, c Config, version string) (*Provider, error) {
	if !c.Enabled {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if c.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: cannot create the OTLP exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "imagegate"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(c.NewSampler()))
	return &Provider{TracerProvider: tp, Config: c}, nil
}

// ErrorHandler logs OpenTelemetry's errors (a collector that cannot be reached, spans
// dropped) at most once every 10 s: main sets it with otel.SetErrorHandler.
func ErrorHandler(log *slog.Logger) otel.ErrorHandler {
	var last atomic.Int64
	return otel.ErrorHandlerFunc(func(err error) {
		now := time.Now().UnixNano()
		if l := last.Load(); now-l < int64(10*time.Second) || !last.CompareAndSwap(l, now) {
			return
		}
		log.Warn("tracing: cannot export spans (OTEL_EXPORTER_OTLP_*); logged at most every 10s", "err", err)
	})
}
