package main_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP trace receiver, over HTTP (POST /v1/traces, protobuf) or gRPC
// (TraceService/Export): it keeps every span it is sent, decoded with OTLP's own types.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	names map[string]string // resource attributes of the last export
}

func (o *otlpReceiver) keep(req *collectortrace.ExportTraceServiceRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		o.names = map[string]string{}
		for _, a := range rs.GetResource().GetAttributes() {
			o.names[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
}

func (o *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	o.keep(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, fmt.Sprintf("%s %s: %v", r.URL.Path, r.Header.Get("Content-Type"), err), http.StatusBadRequest)
		return
	}
	o.keep(&req)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// listen serves the receiver over protocol (http/protobuf or grpc) and returns its endpoint.
func (o *otlpReceiver) listen(t *testing.T, protocol string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if protocol == "grpc" {
		gs := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(gs, o)
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)
	} else {
		hs := &http.Server{Handler: o}
		go hs.Serve(ln)
		t.Cleanup(func() { hs.Close() })
	}
	return "http://" + ln.Addr().String()
}

// trace returns the spans of one trace, by name.
func (o *otlpReceiver) trace(traceID []byte) map[string][]*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]*tracepb.Span{}
	for _, s := range o.spans {
		if bytes.Equal(s.GetTraceId(), traceID) {
			out[s.GetName()] = append(out[s.GetName()], s)
		}
	}
	return out
}

func (o *otlpReceiver) named(name string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			if _, isInt := a.GetValue().GetValue().(*commonpb.AnyValue_IntValue); isInt {
				return fmt.Sprint(a.GetValue().GetIntValue())
			}
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// tracedGateway starts the gateway exporting its traces to a receiver over protocol, with two
// models from the committed file: "one" (the default batching) and "batch8" (a fixed window
// of 8 requests), and the access log on.
func tracedGateway(t *testing.T, protocol string) (*gateway, *otlpReceiver) {
	rcv := &otlpReceiver{}
	endpoint := rcv.listen(t, protocol)
	root := repoRoot(t)
	model := func(name, batching string) string {
		return fmt.Sprintf(`  - name: %s
    path: %[2]s/models/mobilenet_v3_small/model.onnx
    labels: %[2]s/models/mobilenet_v3_small/labels.txt
    batching: %s
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, name, root, batching)
	}
	cfg := "log: {access: {mode: all, format: json}}\nmodels:\n" + model("one", "{max_batch_size: 2}") +
		model("batch8", "{max_batch_size: 8, max_queue_delay: 30s, adaptive: {latency_target: 0s}}")
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol, "OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=gw-under-test"}
	g := launch(t, env, "-config", path, "-listen", "127.0.0.1:0", "-admin-listen", "off")
	return g, rcv
}

// TestTracesReachACollector: the gateway exports its traces over OTLP (HTTP and gRPC) to a
// receiver written here. One request with a traceparent yields a server span in that trace,
// a child of the client's span, with its stage spans as children and the batch run linked; 8
// concurrent requests (8 traces) sharing one batch each get their own server span, and the
// one batch run span links all 8. The access log line names the trace.
func TestTracesReachACollector(t *testing.T) {
	jpeg, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			g, rcv := tracedGateway(t, protocol)
			const traceHex, parentHex = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			traceID, _ := hex.DecodeString(traceHex)
			a := g.do("POST", "/models/one/predict", "image/jpeg", jpeg, "traceparent", "00-"+traceHex+"-"+parentHex+"-01",
				"X-Request-ID", "trace-test-1")
			if a.status != 200 || a.header.Get("X-Request-ID") != "trace-test-1" || !strings.Contains(a.header.Get("Server-Timing"), "run;dur=") {
				t.Fatalf("%d %v %s", a.status, a.header, a.body)
			}
			var spans map[string][]*tracepb.Span
			waitFor(t, func() bool {
				spans = rcv.trace(traceID)
				return len(spans["infer one"]) == 1 && len(spans["run"]) == 1
			})
			server := spans["infer one"][0]
			if hex.EncodeToString(server.GetParentSpanId()) != parentHex || server.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
				t.Fatalf("the server span is not the client span's child: %v", server)
			}
			for k, v := range map[string]string{"imagegate.model": "one", "imagegate.request_id": "trace-test-1",
				"http.response.status_code": "200", "imagegate.outcome": "ok", "imagegate.batch.size": "1"} {
				if got := spanAttr(server, k); got != v {
					t.Errorf("server span: %s = %q, want %q", k, got, v)
				}
			}
			for _, name := range []string{"read body", "decode", "queue", "run"} {
				if c := spans[name]; len(c) != 1 || !bytes.Equal(c[0].GetParentSpanId(), server.GetSpanId()) {
					t.Errorf("stage span %q: %v", name, c)
				}
			}
			runLinks := spans["run"][0].GetLinks()
			if len(runLinks) != 1 {
				t.Fatalf("the run span links %d spans", len(runLinks))
			}
			var batch *tracepb.Span
			waitFor(t, func() bool {
				for _, b := range rcv.named("batch run") {
					if bytes.Equal(b.GetSpanId(), runLinks[0].GetSpanId()) {
						batch = b
					}
				}
				return batch != nil
			})
			if len(batch.GetLinks()) != 1 || !bytes.Equal(batch.GetLinks()[0].GetSpanId(), server.GetSpanId()) {
				t.Fatalf("the batch run does not link the request: %v", batch.GetLinks())
			}
			rcv.mu.Lock()
			service := rcv.names["service.name"]
			rcv.mu.Unlock()
			if service != "gw-under-test" {
				t.Errorf("service.name %q (OTEL_SERVICE_NAME)", service)
			}
			if protocol != "http/protobuf" {
				return
			}

			// 8 requests of 8 traces, one batch.
			var wg sync.WaitGroup
			ids := make([][]byte, 8)
			for i := range 8 {
				ids[i], _ = hex.DecodeString(fmt.Sprintf("%032x", 0xabc0+i))
				wg.Go(func() {
					tp := fmt.Sprintf("00-%032x-%016x-01", 0xabc0+i, i+1)
					if a := g.do("POST", "/models/batch8/predict", "image/jpeg", jpeg, "traceparent", tp); a.status != 200 {
						t.Errorf("%d %s", a.status, a.body)
					}
				})
			}
			wg.Wait()
			servers := map[string]bool{}
			waitFor(t, func() bool {
				for _, id := range ids {
					for _, s := range rcv.trace(id)["infer batch8"] {
						servers[string(s.GetSpanId())] = true
					}
				}
				return len(servers) == 8
			})
			var batches []*tracepb.Span
			waitFor(t, func() bool {
				batches = batches[:0]
				for _, b := range rcv.named("batch run") {
					if spanAttr(b, "imagegate.model") == "batch8" {
						batches = append(batches, b)
					}
				}
				return len(batches) > 0
			})
			if len(batches) != 1 || spanAttr(batches[0], "imagegate.batch.size") != "8" || len(batches[0].GetLinks()) != 8 {
				t.Fatalf("%d batch spans of batch8 (want one of 8 linking 8 requests): %v", len(batches), batches)
			}
			for _, l := range batches[0].GetLinks() {
				if !servers[string(l.GetSpanId())] {
					t.Errorf("the batch run links a span that is no request's: %x", l.GetSpanId())
				}
			}
			for _, id := range ids {
				run := rcv.trace(id)["run"]
				if len(run) != 1 || len(run[0].GetLinks()) != 1 || !bytes.Equal(run[0].GetLinks()[0].GetSpanId(), batches[0].GetSpanId()) {
					t.Errorf("trace %x: its run does not link the batch run", id)
				}
			}

			// The access log names each request's trace.
			re := regexp.MustCompile(`(?m)^\{.*"msg":"access".*$`)
			var line map[string]any
			for _, l := range re.FindAllString(g.log(), -1) {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["request_id"] == "trace-test-1" {
					line = m
				}
			}
			if line == nil || line["trace_id"] != traceHex || line["model"] != "one" || line["status"] != 200.0 {
				t.Fatalf("access log line of the traced request: %v\n%s", line, g.log())
			}
		})
	}
}

// TestTracingOffByDefault: with no OTEL_* variable the gateway starts no exporter, and says
// nothing about tracing; the answers still carry their request ID and Server-Timing.
func TestTracingOffByDefault(t *testing.T) {
	jpeg, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 2}"))
	a := g.do("POST", "/predict/", "image/jpeg", jpeg, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if a.status != 200 || a.header.Get("X-Request-ID") == "" || !strings.Contains(a.header.Get("Server-Timing"), "total;dur=") {
		t.Fatalf("%d %v", a.status, a.header)
	}
	if strings.Contains(g.log(), "tracing") {
		t.Fatalf("tracing is on without OTEL_* variables:\n%s", g.log())
	}
}
