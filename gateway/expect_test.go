package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imagegate/imagegate/batcher"
)

// TestExpectContinueRefusesBeforeTheBody: a client that sends "Expect: 100-continue" and
// waits is refused on the header alone, without uploading its body, whenever the gateway
// would refuse it on the header (unknown model, body over max_body_bytes, full queue); the
// answer is the one it would get after uploading (status, JSON, Retry-After, metrics), and the
// connection closes. A request the gateway takes gets "100 Continue" and is served.
func TestExpectContinueRefusesBeforeTheBody(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 1)
	mo := modelOpts("m", RunnersOf[float32]{f})
	mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 2}
	ts := newTestServer(t, testOptions(), mo)
	img := solidPNG(t, 16, 16, 7)

	// send writes a request's header with Expect: 100-continue, and its body only once the
	// server says "100 Continue". It returns the final answer and whether the body was sent.
	send := func(path string, declared int, hdr ...string) (*http.Response, string, bool) {
		t.Helper()
		c, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		extra := ""
		for i := 0; i+1 < len(hdr); i += 2 {
			extra += hdr[i] + ": " + hdr[i+1] + "\r\n"
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\nExpect: 100-continue\r\n%s\r\n", path, declared, extra)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		sent := false
		if resp.StatusCode == http.StatusContinue {
			if declared != len(img) {
				t.Fatalf("%s: 100 Continue for a request the gateway refuses on its header", path)
			}
			c.Write(img)
			sent = true
			if resp, err = http.ReadResponse(br, nil); err != nil {
				t.Fatalf("%s: after the body: %v", path, err)
			}
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body), sent
	}

	resp, body, sent := send("/predict/", len(img))
	if resp.StatusCode != 200 || !sent {
		t.Fatalf("an admitted request: %d (body sent: %v) %s", resp.StatusCode, sent, body)
	}
	for _, path := range []string{"/models/nope/predict", "/v2/models/nope/infer", "/v2/models/m/versions/9/infer"} {
		resp, body, sent = send(path, len(img)+1)
		if resp.StatusCode != 404 || sent || !resp.Close || !strings.Contains(body, "nope") && !strings.Contains(body, "version") {
			t.Fatalf("%s: %d (body sent: %v, close %v) %s", path, resp.StatusCode, sent, resp.Close, body)
		}
	}
	if v := ts.metric(`gateway_requests_total{model="_unknown",version="",code="404"}`); v != 3 {
		t.Errorf(`requests_total{model="_unknown",code="404"} = %v, want 3`, v)
	}
	resp, body, sent = send("/models/m/predict", 2<<20, "X-Request-ID", "expect-1")
	if resp.StatusCode != 413 || sent || !resp.Close || !strings.Contains(body, "max_body_bytes") {
		t.Fatalf("a body declared over max_body_bytes: %d (body sent: %v) %s", resp.StatusCode, sent, body)
	}
	if resp.Header.Get("X-Request-ID") != "expect-1" || !strings.Contains(resp.Header.Get("Server-Timing"), "total;dur=") {
		t.Fatalf("a refusal before the body without its request ID or Server-Timing: %v", resp.Header)
	}
	if resp, _, _ = send("/models/nope/predict", len(img)+1); resp.Header.Get("X-Request-ID") == "" {
		t.Fatalf("an unknown model's refusal before the body without a request ID: %v", resp.Header)
	}

	// A full queue: 1 running (blocked in Run) and 2 waiting.
	f.gate = make(chan struct{})
	warm := f.entered.Load()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if r := ts.do("POST", "/predict/", "image/png", img); r.status != 200 {
				t.Errorf("queued request: %d %s", r.status, r.body)
			}
		})
		if i == 0 { // running, so that it no longer holds a place in the batcher's queue
			waitUntil(t, func() bool { return f.entered.Load() > warm })
		}
	}
	waitUntil(t, func() bool { return ts.metric(`gateway_pending_samples{model="m",version="1"}`) == 3 })
	for _, path := range []string{"/predict/", "/v2/models/m/infer"} {
		resp, body, sent = send(path, len(img)+1)
		if resp.StatusCode != 503 || sent || !resp.Close || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "max_queue_size") {
			t.Fatalf("%s, the queue full: %d (body sent: %v) %v %s", path, resp.StatusCode, sent, resp.Header, body)
		}
	}
	if v := ts.metric(`gateway_request_failures_total{model="m",version="1",reason="queue_full"}`); v != 2 {
		t.Errorf("failures{queue_full} = %v, want 2", v)
	}
	if v := ts.metric(`gateway_refusals_total{stage="queue"}`); v != 2 {
		t.Errorf(`refusals_total{stage="queue"} = %v, want 2`, v)
	}
	for range 3 {
		f.gate <- struct{}{}
	}
	wg.Wait()
	f.gate = nil
	if resp, body, sent = send("/predict/", len(img)); resp.StatusCode != 200 || !sent {
		t.Fatalf("after the queue drained: %d (body sent: %v) %s", resp.StatusCode, sent, body)
	}
}

// TestExpectContinueElsewhere: a request with "Expect: 100-continue" that is not an inference
// POST (an unknown path, a wrong method, health, metrics) gets its final answer at once, even
// for a huge declared body, instead of "100 Continue" and an upload it has no use for; a POST
// to the repository API, whose handlers read the body, gets "100 Continue".
func TestExpectContinueElsewhere(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/nope", 404},
		{"PUT", "/predict/", 405},
		{"PUT", "/models/m/predict", 405},
		{"POST", "/models/m", 405},
		{"POST", "/v2/models/m", 405},
		{"POST", "/v2/models/m/ready", 405},
		{"POST", "/v2/repository/index", 100}, // the repository's handlers read their bodies
		{"POST", "/v2/health/ready", 200},
		{"POST", "/metrics", 200},
	} {
		conn, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000000000000\r\nExpect: 100-continue\r\n\r\n", c.method, c.path)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if c.want == 100 && resp.StatusCode == 100 {
			continue
		}
		if resp.StatusCode != c.want || !resp.Close {
			t.Errorf("%s %s: %d (connection close %v), want %d at once", c.method, c.path, resp.StatusCode, resp.Close, c.want)
		}
	}
}
