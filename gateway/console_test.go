package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// adminServer serves s's admin listener on an in-memory listener, with a client for it.
func adminServer(t *testing.T, s *Server) *testServer {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	go s.ServeAdmin(ln)
	t.Cleanup(func() { ln.Close() })
	return &testServer{t: t, s: s, ln: ln,
		client: &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }, ReadTimeout: 20 * time.Second}}
}

// doFull is do with every response header.
func (ts *testServer) doFull(method, path string, body []byte, hdr ...string) (int, *fasthttp.ResponseHeader, []byte) {
	ts.t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw" + path)
	req.Header.SetMethod(method)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.SetBody(body)
	if err := ts.client.Do(req, resp); err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	h := &fasthttp.ResponseHeader{}
	resp.Header.CopyTo(h)
	return resp.StatusCode(), h, append([]byte(nil), resp.Body()...)
}

// consoleSnapshot is the part of GET /ui/api/snapshot the tests read.
type consoleSnapshot struct {
	Listener, Repository string
	Authorized           bool
	Server               struct{ Values map[string]float64 }
	Models               []struct {
		Name, Version, State, Reason string
		Default, Newest              bool
		Instances                    int
		Values                       map[string]float64
		By                           map[string]map[string]float64
		Hist                         map[string]struct {
			Le, Counts []float64
			Count      float64
		}
		Stats *struct {
			BatchStats []struct {
				BatchSize    int                 `json:"batch_size"`
				ComputeInfer struct{ Count int } `json:"compute_infer"`
			} `json:"batch_stats"`
		}
	}
}

func (ts *testServer) snapshot(hdr ...string) consoleSnapshot {
	ts.t.Helper()
	status, h, body := ts.doFull("GET", "/ui/api/snapshot", nil, hdr...)
	var s consoleSnapshot
	if status != 200 || string(h.ContentType()) != "application/json" || json.Unmarshal(body, &s) != nil {
		ts.t.Fatalf("snapshot: %d %s %.300s", status, h.ContentType(), body)
	}
	return s
}

// TestConsoleOnTheAdminListener: by default the console is the admin listener's: its page
// and assets (with their security headers, ETags and gzip), the snapshot, and what Try it
// calls (metadata and inference through the pipeline); the public listener has none of it.
func TestConsoleOnTheAdminListener(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	admin := adminServer(t, ts.s)

	status, h, page := admin.doFull("GET", "/ui/", nil)
	if status != 200 || !strings.HasPrefix(string(h.ContentType()), "text/html") || !bytes.Contains(page, []byte(`<script type="module" src="console.js">`)) {
		t.Fatalf("GET /ui/: %d %s %.200s", status, h.ContentType(), page)
	}
	if csp := string(h.Peek("Content-Security-Policy")); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	etag := string(h.Peek("ETag"))
	if status, _, body := admin.doFull("GET", "/ui/", nil, "If-None-Match", etag); status != 304 || len(body) != 0 {
		t.Errorf("GET /ui/ with its ETag: %d, %d bytes; want 304", status, len(body))
	}
	status, h, js := admin.doFull("GET", "/ui/console.js", nil, "Accept-Encoding", "gzip, deflate")
	if status != 200 || string(h.ContentType()) != "text/javascript; charset=utf-8" || string(h.Peek("Content-Encoding")) != "gzip" {
		t.Fatalf("GET /ui/console.js: %d %s %q", status, h.ContentType(), h.Peek("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := io.ReadAll(zr); !bytes.Contains(plain, []byte("new Live(")) {
		t.Errorf("console.js, gunzipped: %.100s", plain)
	}
	for _, c := range []struct {
		method, path string
		status       int
		header       string
	}{
		{"GET", "/ui", 308, "Location"},
		{"POST", "/ui/", 405, "Allow"},
		{"GET", "/ui/missing.js", 404, ""},
		{"GET", "/ui/api/", 404, ""},
	} {
		status, h, body := admin.doFull(c.method, c.path, nil)
		if status != c.status || (c.header != "" && len(h.Peek(c.header)) == 0) || !bytes.HasPrefix(body, []byte(`{"error":`)) {
			t.Errorf("%s %s: %d %s; want %d with %s", c.method, c.path, status, body, c.status, c.header)
		}
	}
	if r := ts.do("GET", "/ui/", "", nil); r.status != 404 {
		t.Errorf("the public listener serves the console: %d", r.status)
	}

	// Try it, on the admin listener: metadata, configuration, inference.
	if status, _, body := admin.doFull("GET", "/v2/models/m/versions/1/config", nil); status != 200 || !bytes.Contains(body, []byte(`"max_batch_size"`)) {
		t.Fatalf("config on the admin listener: %d %s", status, body)
	}
	status, h, body := admin.doFull("POST", "/models/m/predict?top_k=2", solidPNG(t, 16, 16, 9), "Content-Type", "image/png")
	if status != 200 || !bytes.Contains(body, []byte(`"top_k"`)) || !strings.Contains(string(h.Peek("Server-Timing")), "decode;dur=") || len(h.Peek("X-Request-ID")) == 0 {
		t.Fatalf("predict on the admin listener: %d %s %s", status, h.Peek("Server-Timing"), body)
	}

	// The snapshot: the request just answered, counted once, in every view of it.
	s := admin.snapshot()
	if s.Listener != "admin" || s.Repository != "open" || !s.Authorized || s.Server.Values["inflight_bytes_limit"] != 64<<20 || s.Server.Values["ready"] != 1 {
		t.Errorf("snapshot: %+v", s)
	}
	if len(s.Models) != 1 {
		t.Fatalf("snapshot models: %+v", s.Models)
	}
	m := s.Models[0]
	if m.Name != "m" || m.Version != "1" || m.State != StateReady || !m.Default || !m.Newest || m.Instances != 1 || m.Values["max_batch_size"] != 4 {
		t.Errorf("snapshot model: %+v", m)
	}
	dur := m.Hist["request_duration_seconds"]
	if m.By["requests_total"]["200"] != 1 || m.Values["request_success_total"] != 1 || dur.Count != 1 || dur.Counts[len(dur.Counts)-1] != 1 || len(dur.Counts) != len(dur.Le)+1 {
		t.Errorf("snapshot counts: %v %v %+v", m.By["requests_total"], m.Values, dur)
	}
	if m.Stats == nil || len(m.Stats.BatchStats) != 1 || m.Stats.BatchStats[0].BatchSize != 1 || m.Stats.BatchStats[0].ComputeInfer.Count != 1 {
		t.Errorf("snapshot statistics: %+v", m.Stats)
	}
	if want := ts.metric(`gateway_requests_total{model="m",version="1",code="200"}`); want != 1 {
		t.Errorf("/metrics counts %v", want)
	}

	// Unloaded, the version stays listed, with its state and why, and no series.
	if err := ts.s.UnloadModel("m"); err != nil {
		t.Fatal(err)
	}
	s = admin.snapshot()
	if len(s.Models) != 1 || s.Models[0].State != StateUnavailable || s.Models[0].Reason != "unloaded" || s.Models[0].Values != nil {
		t.Errorf("after unload: %+v", s.Models)
	}
}

// TestConsoleWhere: Options.Console places the console (off: nowhere, and the admin listener
// serves no inference; public: on both listeners), and with an admin token the snapshot
// tells the reasons of unavailable versions only to a request that carries it.
func TestConsoleWhere(t *testing.T) {
	o := testOptions()
	o.Console = ConsoleOff
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	admin := adminServer(t, ts.s)
	for _, p := range []string{"/ui/", "/ui/api/snapshot", "/models/m", "/v2/models/m/config"} {
		if status, _, _ := admin.doFull("GET", p, nil); status != 404 {
			t.Errorf("console off: admin %s: %d, want 404", p, status)
		}
		if r := ts.do("GET", p, "", nil); p != "/models/m" && p != "/v2/models/m/config" && r.status != 404 {
			t.Errorf("console off: public %s: %d, want 404", p, r.status)
		}
	}
	if status, _, _ := admin.doFull("GET", "/metrics", nil); status != 200 {
		t.Errorf("console off: the admin listener's /metrics: %d", status)
	}

	const token = "0123456789abcdef0123"
	o = testOptions()
	o.Console, o.AdminToken = ConsolePublic, token
	ts = newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}), modelOpts("n", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	admin = adminServer(t, ts.s)
	if r := ts.do("GET", "/ui/", "", nil); r.status != 200 || !strings.HasPrefix(r.header["Content-Type"], "text/html") {
		t.Errorf("console public: GET /ui/ on the public listener: %d", r.status)
	}
	if status, _, _ := admin.doFull("GET", "/ui/", nil); status != 200 {
		t.Errorf("console public: GET /ui/ on the admin listener: %d", status)
	}
	if err := ts.s.UnloadModel("n"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		srv        *testServer
		listener   string
		auth       []string
		authorized bool
	}{
		{ts, "public", nil, false},
		{ts, "public", []string{"Authorization", "Bearer " + token}, true},
		{admin, "admin", nil, false},
		{admin, "admin", []string{"Authorization", "Bearer wrong-token-0123456789"}, false},
		{admin, "admin", []string{"Authorization", "Bearer " + token}, true},
	} {
		s := c.srv.snapshot(c.auth...)
		var reason string
		for _, m := range s.Models {
			if m.Name == "n" {
				reason = m.Reason
			}
		}
		if s.Listener != c.listener || s.Repository != "token" || s.Authorized != c.authorized || (reason == "unloaded") != c.authorized || len(s.Models) != 2 {
			t.Errorf("%s %v: listener %s, repository %s, authorized %v, reason %q, %d models", c.listener, c.auth, s.Listener, s.Repository, s.Authorized, reason, len(s.Models))
		}
	}

	o.Console = "everywhere"
	if _, err := New(o, nil); err == nil || !strings.Contains(err.Error(), "Console") {
		t.Errorf("Console everywhere: %v", err)
	}
}

// TestAdminListenerStreamsBodies: the admin listener streams bodies, so the console's Try
// it takes a photo over 1 MiB (read into the memory budget by the pipeline, up to
// max_body_bytes), while the repository API and the profiles still take 1 MiB at most.
func TestAdminListenerStreamsBodies(t *testing.T) {
	o := testOptions()
	o.MaxBodyBytes = 8 << 20
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	admin := adminServer(t, ts.s)
	img := image.NewNRGBA(image.Rect(0, 0, 800, 800)) // noise: a PNG of about 2.5 MiB
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(rng.Uint32())
	}
	var big bytes.Buffer
	if err := png.Encode(&big, img); err != nil {
		t.Fatal(err)
	}
	if big.Len() < 2<<20 {
		t.Fatalf("the photo is %d bytes; the test needs more than 2 MiB", big.Len())
	}
	if status, _, body := admin.doFull("POST", "/models/m/predict", big.Bytes(), "Content-Type", "image/png"); status != 200 {
		t.Fatalf("a %d-byte photo on the admin listener: %d %s", big.Len(), status, body)
	}
	if status, _, body := admin.doFull("POST", "/debug/pprof/symbol", []byte("0x1")); status != 200 {
		t.Errorf("pprof symbol: %d %s", status, body)
	}
	for _, path := range []string{"/v2/repository/models/m/load", "/debug/pprof/symbol"} {
		// The answer comes before the body is read (the client still sends it).
		c, err := admin.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", path, 2<<20)
			c.Write(bytes.Repeat([]byte(" "), 2<<20))
		}()
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || r.StatusCode != 413 {
			t.Errorf("a 2 MiB body to %s on the admin listener: %v %v, want 413", path, r, err)
		}
		c.Close()
	}
	if status, _, body := admin.doFull("POST", "/v2/repository/index", nil); status != 200 || !bytes.Contains(body, []byte(`"READY"`)) {
		t.Errorf("the index after: %d %s", status, body)
	}
}

// BenchmarkConsoleSnapshot: what one GET /ui/api/snapshot costs the server (a page open asks
// once a second; with none open it costs nothing), with one model version served.
func BenchmarkConsoleSnapshot(b *testing.B) {
	s, err := New(testOptions(), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(b.Context())
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/ui/api/snapshot")
		s.handleAdmin(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	b.ReportMetric(float64(len(ctx.Response.Body())), "bytes/snapshot")
}
