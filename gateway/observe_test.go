package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/imagegate/imagegate/batcher"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// lines decodes the JSON lines written so far.
func (w *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.Lines(w.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

var generatedID = regexp.MustCompile(`^[0-9a-f]{16}-[0-9a-f]+$`)

// TestRequestIDs: a sane X-Request-ID comes back; an insane one, or none, is replaced by the
// gateway's own; a v2 request's id is the request ID when no header brings one; every answer
// carries one, failures and answers outside the pipeline included.
func TestRequestIDs(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 8, 8, 40)
	if a := ts.do("POST", "/predict/", "image/png", img, "X-Request-ID", "req-42:a/b=@"); a.status != 200 || a.header["X-Request-ID"] != "req-42:a/b=@" {
		t.Fatalf("sane ID: %d %q", a.status, a.header["X-Request-ID"])
	}
	seen := map[string]bool{}
	for _, bad := range []string{"", "two words", `quo"te`, "caf\xc3\xa9", strings.Repeat("a", maxRequestID+1)} {
		var hdr []string
		if bad != "" {
			hdr = []string{"X-Request-ID", bad}
		}
		a := ts.do("POST", "/predict/", "image/png", img, hdr...)
		id := a.header["X-Request-ID"]
		if a.status != 200 || !generatedID.MatchString(id) || seen[id] {
			t.Fatalf("ID %q: answered %d with ID %q (want a new one of the gateway's)", bad, a.status, id)
		}
		seen[id] = true
	}
	if a := ts.do("POST", "/predict/", "image/png", img, "X-Request-ID", strings.Repeat("b", maxRequestID)); a.header["X-Request-ID"] != strings.Repeat("b", maxRequestID) {
		t.Fatalf("a %d-byte ID is taken: got %q", maxRequestID, a.header["X-Request-ID"])
	}

	v2 := fmt.Sprintf(`{"id":"v2-id-7","inputs":[{"name":"input","datatype":"BYTES","shape":[1],"data":[%q]}]}`, base64.StdEncoding.EncodeToString(img))
	if a := ts.do("POST", "/v2/models/m/infer", "application/json", []byte(v2)); a.status != 200 || a.header["X-Request-ID"] != "v2-id-7" {
		t.Fatalf("v2 id: %d %q %s", a.status, a.header["X-Request-ID"], a.body)
	}
	if a := ts.do("POST", "/v2/models/m/infer", "application/json", []byte(v2), "X-Request-ID", "from-header"); a.header["X-Request-ID"] != "from-header" || !bytes.Contains(a.body, []byte(`"id":"v2-id-7"`)) {
		t.Fatalf("the header wins, the body's id is echoed: %q %s", a.header["X-Request-ID"], a.body)
	}
	// Failures and answers the pipeline does not make.
	for _, c := range []struct{ method, path, ct, body string }{
		{"POST", "/predict/", "image/png", "not an image"},
		{"POST", "/models/nope/predict", "image/png", "x"},
		{"GET", "/predict/", "", ""},
		{"GET", "/v2/health/live", "", ""},
		{"GET", "/v2/models/m", "", ""},
		{"GET", "/nowhere", "", ""},
	} {
		a := ts.do(c.method, c.path, c.ct, []byte(c.body), "X-Request-ID", "echo-me")
		if a.header["X-Request-ID"] != "echo-me" {
			t.Errorf("%s %s: %d without the request's ID (%q)", c.method, c.path, a.status, a.header["X-Request-ID"])
		}
		if a = ts.do(c.method, c.path, c.ct, []byte(c.body)); !generatedID.MatchString(a.header["X-Request-ID"]) {
			t.Errorf("%s %s: %d without an ID of the gateway's (%q)", c.method, c.path, a.status, a.header["X-Request-ID"])
		}
	}
}

// serverTiming parses a Server-Timing value into durations in ms by name, in order.
func serverTiming(t *testing.T, v string) ([]string, map[string]float64) {
	t.Helper()
	var names []string
	durs := map[string]float64{}
	for _, e := range strings.Split(v, ", ") {
		name, dur, ok := strings.Cut(e, ";dur=")
		f, err := strconv.ParseFloat(dur, 64)
		if !ok || err != nil || f < 0 {
			t.Fatalf("Server-Timing %q: entry %q", v, e)
		}
		names = append(names, name)
		durs[name] = f
	}
	return names, durs
}

// TestServerTiming: every inference answer, failures included, says where its time went;
// the stages of a one-image request follow one another, so they add up to no more than its
// total.
func TestServerTiming(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	a := ts.do("POST", "/predict/", "image/png", noisePNG(t, 64, 64))
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	names, d := serverTiming(t, a.header["Server-Timing"])
	if strings.Join(names, ",") != "read,decode,queue,run,total" {
		t.Fatalf("Server-Timing %q", a.header["Server-Timing"])
	}
	if d["decode"] <= 0 || d["run"] <= 0 || d["total"] <= 0 {
		t.Fatalf("a decoded and run request with a zero stage: %q", a.header["Server-Timing"])
	}
	// Each is rounded to the microsecond: allow the rounding of four of them.
	if sum := d["read"] + d["decode"] + d["queue"] + d["run"]; sum > d["total"]+0.004 {
		t.Fatalf("stages add up to %.3f ms, more than the total: %q", sum, a.header["Server-Timing"])
	}
	a = ts.do("POST", "/predict/", "image/png", []byte("not an image"))
	if a.status != 415 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if _, d = serverTiming(t, a.header["Server-Timing"]); d["run"] != 0 || d["queue"] != 0 {
		t.Fatalf("a request that never ran reports a run: %q", a.header["Server-Timing"])
	}
}

// TestAccessLog: one JSON line per request, with its model, status, sizes, stage times, batch,
// request and trace IDs; failures always, successes as sampled; requests outside the pipeline
// too.
func TestAccessLog(t *testing.T) {
	for _, sample := range []float64{1, 0} {
		t.Run(fmt.Sprint("sample=", sample), func(t *testing.T) {
			var w syncBuffer
			o := testOptions()
			o.AccessLog = slog.New(slog.NewJSONHandler(&w, nil))
			o.AccessSample = sample
			ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
			img := solidPNG(t, 8, 8, 40)
			const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			ok := ts.do("POST", "/predict/", "image/png", img, "traceparent", tp)
			bad := ts.do("POST", "/predict/", "image/png", []byte("not an image"), "X-Request-ID", "bad-1")
			ts.do("GET", "/nowhere", "", nil)
			if ok.status != 200 || bad.status != 415 {
				t.Fatalf("%d %d", ok.status, bad.status)
			}
			lines := w.lines(t)
			want := 2
			if sample == 1 {
				want = 3
			}
			if len(lines) != want {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), want, w.String())
			}
			if sample == 1 {
				l := lines[0]
				for k, v := range map[string]any{"msg": "access", "method": "POST", "path": "/predict/", "model": "m", "version": "1",
					"status": 200.0, "batch": 1.0, "bytes_in": float64(len(img)), "bytes_out": float64(len(ok.body)),
					"request_id": ok.header["X-Request-ID"], "trace_id": "0af7651916cd43dd8448eb211c80319c"} {
					if l[k] != v {
						t.Errorf("%s = %v, want %v (%v)", k, l[k], v, l)
					}
				}
				for _, k := range []string{"read_ms", "decode_ms", "queue_ms", "run_ms", "total_ms", "client", "time"} {
					if _, ok := l[k]; !ok {
						t.Errorf("no %s: %v", k, l)
					}
				}
				lines = lines[1:]
			}
			l := lines[0]
			for k, v := range map[string]any{"status": 415.0, "reason": "bad_input", "stage": "decode", "request_id": "bad-1", "batch": 0.0} {
				if l[k] != v {
					t.Errorf("failure: %s = %v, want %v (%v)", k, l[k], v, l)
				}
			}
			if l := lines[1]; l["status"] != 404.0 || l["path"] != "/nowhere" || !generatedID.MatchString(fmt.Sprint(l["request_id"])) {
				t.Errorf("not found: %v", l)
			}
		})
	}
}

// TestAccessLogNamesTheRefusal: a request refused at once says which bound refused it, in the
// access log and to its client (X-Refusal). The memory budget that cannot hold a body's first
// bytes refuses it at the door, before any of it is read.
func TestAccessLogNamesTheRefusal(t *testing.T) {
	var w syncBuffer
	o := testOptions()
	o.AccessLog = slog.New(slog.NewJSONHandler(&w, nil))
	o.MaxInflightBytes = 2 << 20
	o.MaxBodyBytes = 1 << 20
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	held := int64(o.MaxInflightBytes) - 1000
	if !ts.s.adm.Mem.Reserve(held) {
		t.Fatal("cannot hold the budget")
	}
	a := ts.do("POST", "/predict/", "image/png", noisePNG(t, 64, 64))
	ts.s.adm.Mem.Release(held)
	if a.status != 503 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	l := w.lines(t)[0]
	if l["reason"] != "overloaded" || l["refusal"] != "memory" || l["stage"] != "admit" {
		t.Fatalf("%v", l)
	}
	if h := a.header["X-Refusal"]; h != "memory" {
		t.Fatalf("X-Refusal: %q, want memory", h)
	}
}

// tracedServer serves model m (a fake runner) with tracing into an in-memory exporter.
func tracedServer(t *testing.T, mo ModelOptions) (*testServer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	o := testOptions()
	o.TracerProvider = tp
	return newTestServer(t, o, mo), exp
}

func spansNamed(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// TestTraceOfARequest: a request with a traceparent is a server span in its client's trace,
// with a child span per stage; its run links the batch run's span, which links it back.
func TestTraceOfARequest(t *testing.T) {
	ts, exp := tracedServer(t, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	a := ts.do("POST", "/predict/", "image/png", solidPNG(t, 8, 8, 40), "traceparent", tp, "tracestate", "vendor=x")
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	spans := exp.GetSpans()
	server := spansNamed(spans, "infer m")
	if len(server) != 1 {
		t.Fatalf("%d server spans: %v", len(server), spans)
	}
	sv := server[0]
	if sv.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sv.Parent.SpanID().String() != "b7ad6b7169203331" ||
		!sv.Parent.IsRemote() || sv.SpanKind != trace.SpanKindServer || sv.SpanContext.TraceState().Get("vendor") != "x" {
		t.Fatalf("server span not in the client's trace: %+v", sv)
	}
	for k, v := range map[string]string{"imagegate.model": "m", "imagegate.model.version": "1", "http.response.status_code": "200",
		"imagegate.outcome": "ok", "imagegate.batch.size": "1", "imagegate.request_id": a.header["X-Request-ID"]} {
		if got := attr(sv, k); got != v {
			t.Errorf("server span %s = %q, want %q", k, got, v)
		}
	}
	for _, name := range []string{"read body", "decode", "queue", "run"} {
		c := spansNamed(spans, name)
		if len(c) != 1 || c[0].Parent.SpanID() != sv.SpanContext.SpanID() || c[0].SpanContext.TraceID() != sv.SpanContext.TraceID() {
			t.Fatalf("stage span %q: %+v", name, c)
		}
		if c[0].StartTime.Before(sv.StartTime) || c[0].EndTime.After(sv.EndTime) {
			t.Errorf("stage span %q outside its request's", name)
		}
	}
	batch := spansNamed(spans, "batch run")
	if len(batch) != 1 || len(batch[0].Links) != 1 || batch[0].Links[0].SpanContext.SpanID() != sv.SpanContext.SpanID() {
		t.Fatalf("batch run span: %+v", batch)
	}
	if run := spansNamed(spans, "run")[0]; len(run.Links) != 1 || run.Links[0].SpanContext.SpanID() != batch[0].SpanContext.SpanID() {
		t.Fatalf("the run span does not link the batch run's: %+v", run.Links)
	}
	if len(spansNamed(spans, "decode")[0].Events) != 1 {
		t.Error("the decode span has no decode worker event")
	}
}

// TestTraceOfABatch: 8 concurrent requests of 8 traces share one batch: each has its own
// server span, and the one batch run span links all 8; each one's run links it.
func TestTraceOfABatch(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 8)
	runs := make(chan int, 8)
	mo := modelOpts("m", RunnersOf[float32]{f})
	mo.Batching = batcher.Config{MaxBatchSize: 8, MaxQueueSize: 16, MaxQueueDelay: time.Minute}
	ts, exp := tracedServer(t, mo)
	f.runs = runs // after the warm-up
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			tp := fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
			if a := ts.do("POST", "/predict/", "image/png", solidPNG(t, 8, 8, uint8(10*i)), "traceparent", tp); a.status != 200 {
				t.Errorf("%d %s", a.status, a.body)
			}
		})
	}
	wg.Wait()
	if n := <-runs; n != 8 {
		t.Fatalf("a batch of %d, want 8", n)
	}
	spans := exp.GetSpans()
	servers := spansNamed(spans, "infer m")
	batch := spansNamed(spans, "batch run")
	if len(servers) != 8 || len(batch) != 1 || attr(batch[0], "imagegate.batch.size") != "8" {
		t.Fatalf("%d server spans, %d batch spans", len(servers), len(batch))
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range batch[0].Links {
		linked[l.SpanContext.SpanID()] = true
	}
	traces := map[trace.TraceID]bool{}
	for _, sv := range servers {
		traces[sv.SpanContext.TraceID()] = true
		if !linked[sv.SpanContext.SpanID()] {
			t.Errorf("the batch run does not link server span %v", sv.SpanContext.SpanID())
		}
	}
	if len(traces) != 8 || len(batch[0].Links) != 8 {
		t.Fatalf("%d traces, %d links", len(traces), len(batch[0].Links))
	}
	for _, run := range spansNamed(spans, "run") {
		if len(run.Links) != 1 || run.Links[0].SpanContext.SpanID() != batch[0].SpanContext.SpanID() {
			t.Errorf("a run span does not link the batch run: %v", run.Links)
		}
	}
}

// TestObservabilityOffAllocatesNothing: with tracing and the access log off, what the pipeline
// does for them (and the request ID, Server-Timing and the statistics, always on) allocates
// nothing.
func TestObservabilityOffAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	s, err := New(testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(t.Context())
	if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
		t.Fatal(err)
	}
	m, err := s.lookup("m", "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.done()
	var fc fasthttp.RequestCtx
	fc.Request.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	allocs := testing.AllocsPerRun(200, func() {
		r := s.newRequest(m, predictAPI{})
		r.http.fc = &fc
		r.t = &r.http
		r.takeRequestID(fc.Request.Header.Peek(headerRequestID))
		r.takeTraceContext(fc.Request.Header.Peek("traceparent"), nil)
		s.startSpan(r)
		r.samples = m.impl.samples(1, true)
		st := r.samples.stage(0)
		st.submitted, st.runStart, st.runEnd, st.batch = r.start, r.start, r.start, 1
		r.sampleTimes()
		r.meta.stages.total = time.Since(r.start)
		m.stats.Batch(1, 0, 0, 0) // what the batch run and infer count for the statistics
		m.stats.Request(r.statTimes(), true)
		r.t.annotate(r)
		s.endSpan(r, 200, "")
		s.logRequest(r, 200, "")
		r.samples.release()
		s.putRequest(r)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per request", allocs)
	}
}

// TestWatchdogFailsLivenessWhileARunHangs: a batch run that runs past its bound fails
// liveness (503 with the reason, gateway_live 0, one hung run counted, a log line) until it
// ends; then the server is live again and the request is answered.
func TestWatchdogFailsLivenessWhileARunHangs(t *testing.T) {
	var logs syncBuffer
	o := testOptions()
	o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	o.Watchdog = WatchdogOptions{RunMultiple: 2, MinHang: 30 * time.Millisecond, MaxRun: time.Minute}
	f := newFake[float32](3*side*side, 3, 4)
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{f}))
	if a := ts.do("GET", "/v2/health/live", "", nil); a.status != 200 || ts.metric("gateway_live") != 1 {
		t.Fatalf("live before: %d %s", a.status, a.body)
	}
	gate := make(chan struct{})
	f.gate = gate // the next run waits for it
	answered := make(chan reply, 1)
	go func() { answered <- ts.do("POST", "/predict/", "image/png", solidPNG(t, 8, 8, 40)) }()
	var a reply
	waitUntil(t, func() bool { a = ts.do("GET", "/v2/health/live", "", nil); return a.status == 503 })
	if !bytes.Contains(a.body, []byte(`"live":false`)) || !bytes.Contains(a.body, []byte("model m version 1")) {
		t.Fatalf("not live, says %s", a.body)
	}
	series := `gateway_hung_runs_total{model="m",version="1"}`
	if ts.metric("gateway_live") != 0 || ts.metric(series) != 1 || ts.metric(`gateway_run_age_seconds{model="m",version="1"}`) <= 0 {
		t.Fatalf("gateway_live %v, %s %v", ts.metric("gateway_live"), series, ts.metric(series))
	}
	if !strings.Contains(logs.String(), "a batch run is hung") {
		t.Fatalf("no log line says why:\n%s", logs.String())
	}
	close(gate)
	if r := <-answered; r.status != 200 {
		t.Fatalf("the hung request, once its run ended: %d %s", r.status, r.body)
	}
	waitUntil(t, func() bool { return ts.do("GET", "/v2/health/live", "", nil).status == 200 })
	if ts.metric("gateway_live") != 1 || ts.metric(series) != 1 {
		t.Fatalf("after: gateway_live %v, hung runs %v", ts.metric("gateway_live"), ts.metric(series))
	}
	waitUntil(t, func() bool { return strings.Contains(logs.String(), "live again") })
}

// TestNotReadyBeforeWarmUp: a server answers health checks while its first model warms up:
// not ready until the warm-up run has answered; and a warm-up that hangs (no typical run yet:
// the watchdog's MaxRun) fails liveness too.
func TestNotReadyBeforeWarmUp(t *testing.T) {
	o := testOptions()
	o.Watchdog = WatchdogOptions{RunMultiple: 2, MinHang: 10 * time.Millisecond, MaxRun: 50 * time.Millisecond}
	s, err := New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, s)
	f := newFake[float32](3*side*side, 3, 4)
	gate := make(chan struct{})
	f.gate = gate
	added := make(chan error, 1)
	go func() { added <- s.AddModel(modelOpts("m", RunnersOf[float32]{f})) }()
	if a := ts.do("GET", "/v2/health/ready", "", nil); a.status != 503 {
		t.Fatalf("ready before any model: %d", a.status)
	}
	waitUntil(t, func() bool { return ts.do("GET", "/v2/health/live", "", nil).status == 503 })
	if a := ts.do("GET", "/v2/health/ready", "", nil); a.status != 503 {
		t.Fatalf("ready while the warm-up runs: %d", a.status)
	}
	close(gate)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	f.gate = nil
	if a := ts.do("GET", "/v2/health/ready", "", nil); a.status != 200 {
		t.Fatalf("not ready after the warm-up: %d", a.status)
	}
	waitUntil(t, func() bool { return ts.do("GET", "/v2/health/live", "", nil).status == 200 })
}

// TestTraceparentParsing: W3C's format, strictly.
func TestTraceparentParsing(t *testing.T) {
	for _, c := range []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true, true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", true, false},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", true, true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", false, false},
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, false},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false, false},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false, false},
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", false, false},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", false, false},
		{"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, false},
	} {
		_, _, flags, ok := parseTraceparent([]byte(c.in))
		if ok != c.ok || ok && flags.IsSampled() != c.sampled {
			t.Errorf("%s: ok %v sampled %v", c.in, ok, flags.IsSampled())
		}
	}
}
