package loadtest

import (
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// fastServer serves a tiny response from a fasthttp server on loopback, so
// the benchmark measures the client more than the server.
func fastServer(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/predict/"
}

func benchWorker(tb testing.TB, bodies ...Body) *worker {
	if len(bodies) == 0 {
		bodies = []Body{JSONImageBody("x", make([]byte, 4096))}
	}
	cfg := &Config{URL: fastServer(tb), Requests: 1, KeepAlive: true, Bodies: bodies}
	if err := cfg.normalize(); err != nil {
		tb.Fatal(err)
	}
	u, _ := url.Parse(cfg.URL)
	w := newWorker(cfg, hostClient(cfg, u))
	tb.Cleanup(w.release)
	return w
}

// BenchmarkRequest measures issuing one keep-alive POST and reading its
// answer, the per-request hot path of a worker.
func BenchmarkRequest(b *testing.B) {
	w := benchWorker(b)
	start := time.Now()
	b.ReportAllocs()
	var seq int64
	for b.Loop() {
		if s := w.do(start, seq, 0, false); s.status != 200 {
			b.Fatalf("status %d, err %v", s.status, s.err)
		}
		seq++
	}
}

// v2Bodies are Open Inference Protocol requests with binary data whose
// Inference-Header-Content-Length differs, so each request sets its own.
func v2Bodies(tb testing.TB) []Body {
	var bodies []Body
	for _, n := range []int{10, 100000} {
		b, err := V2ImageBody("x", make([]byte, n), "input", true, nil)
		if err != nil {
			tb.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	if bodies[0].Headers[0].Value == bodies[1].Headers[0].Value {
		tb.Fatalf("the bodies' header lengths are equal: %v", bodies)
	}
	return bodies
}

func TestRequestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	for name, bodies := range map[string][]Body{"article JSON": nil, "v2 binary, per-body headers": v2Bodies(t)} {
		w := benchWorker(t, bodies...)
		start := time.Now()
		w.do(start, 0, 0, false) // open the connection
		w.do(start, 1, 0, false)
		seq := int64(0)
		n := testing.AllocsPerRun(200, func() {
			if s := w.do(start, seq, 0, false); s.status != 200 {
				t.Fatalf("%s: status %d, err %v", name, s.status, s.err)
			}
			seq++
		})
		if n > 0 {
			t.Fatalf("%s: a keep-alive request allocates %v times", name, n)
		}
	}
}

// BenchmarkCollectorAdd measures folding one sample into the figures.
func BenchmarkCollectorAdd(b *testing.B) {
	cfg := &Config{URL: "http://127.0.0.1:1/", Requests: 1}
	_ = cfg.normalize()
	c := newCollector(cfg, newPacer(cfg, time.Now()))
	b.ReportAllocs()
	var i int64
	for b.Loop() {
		t := i * int64(time.Millisecond) % int64(10*time.Second)
		c.add(sample{intended: t, sent: t, done: t + 1e6 + i%1e6, status: 200})
		i++
	}
}
