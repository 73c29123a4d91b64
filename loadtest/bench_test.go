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

func benchWorker(tb testing.TB) *worker {
	cfg := &Config{URL: fastServer(tb), Requests: 1, KeepAlive: true,
		Bodies: []Body{JSONImageBody("x", make([]byte, 4096))}}
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

func TestRequestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	w := benchWorker(t)
	start := time.Now()
	w.do(start, 0, 0, false) // open the connection
	n := testing.AllocsPerRun(200, func() {
		if s := w.do(start, 1, 0, false); s.status != 200 {
			t.Fatalf("status %d, err %v", s.status, s.err)
		}
	})
	if n > 0 {
		t.Fatalf("a keep-alive request allocates %v times", n)
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
