package loadtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newServer starts an HTTP server on a 127.0.0.1 loopback port.
func newServer(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func mustRun(t *testing.T, cfg Config) *Result {
	t.Helper()
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestClosedLoopCountsAndLatency(t *testing.T) {
	// Every fourth request takes 20ms, the rest answer at once: p50 is
	// well under 20ms and p90 at least 20ms.
	var n atomic.Int64
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%4 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	})
	res := mustRun(t, Config{URL: srv.URL, Concurrency: 4, Requests: 200, KeepAlive: true})
	s := res.Summary
	if s.Sent != 200 || s.Completed != 200 || s.OK2xx != 200 || s.Errors != 0 || s.StatusCodes["200"] != 200 {
		t.Fatalf("counts: %+v", s)
	}
	if n.Load() != 200 {
		t.Fatalf("server saw %d requests, want 200", n.Load())
	}
	if s.Latency.P50 >= 15 || s.Latency.P90 < 19 || s.Latency.Max < 19 || s.Latency.Max > 2000 {
		t.Errorf("latency p50 %.2f p90 %.2f max %.2f ms: want p50 < 15, p90 and max >= 19", s.Latency.P50, s.Latency.P90, s.Latency.Max)
	}
	if s.BytesIn != 400 || s.Throughput <= 0 || s.SentRate <= 0 || s.DurationS <= 0 {
		t.Errorf("bytes/rates: %+v", s)
	}
	if res.Config.Mode != "closed" || res.Config.Method != "GET" || res.Latency().Count() != 200 {
		t.Errorf("config %+v, histogram count %d", res.Config, res.Latency().Count())
	}
}

// TestExpiredRefusals: refusals a server marks as given after a wait in its line
// (X-Refusal: expired) are counted and timed apart from those given at once; both are refusals.
// The same from clients that send Expect: 100-continue, whose answers the load generator reads
// itself (a refusal before the body, and one after it).
func TestExpiredRefusals(t *testing.T) {
	for _, expect := range []bool{false, true} {
		t.Run(fmt.Sprintf("expect=%v", expect), func(t *testing.T) {
			var n atomic.Int64
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				switch n.Add(1) % 4 {
				case 0:
					io.ReadAll(r.Body) // under Expect, "100 Continue" and the body first
					time.Sleep(20 * time.Millisecond)
					w.Header().Set(RefusalHeader, RefusalExpired)
					w.WriteHeader(503)
				case 1:
					w.Header().Set(RefusalHeader, "queue_time")
					w.WriteHeader(503)
				}
			})
			cfg := Config{URL: srv.URL, Concurrency: 1, Requests: 100, KeepAlive: true}
			if expect {
				cfg.Bodies, cfg.ExpectContinue = []Body{{Data: []byte("payload")}}, true
			}
			s := mustRun(t, cfg).Summary
			if s.OK2xx != 50 || s.Refused != 50 || s.Expired != 25 || s.StatusCodes["503"] != 50 {
				t.Fatalf("counts: %+v", s)
			}
			if s.RefusalLatency.Max >= 15 || s.ExpiredLatency.Min < 19 {
				t.Errorf("refusals at once up to %.1f ms, expired from %.1f ms: want under 15 and from 19", s.RefusalLatency.Max, s.ExpiredLatency.Min)
			}
			var txt strings.Builder
			if err := (&Result{Summary: s}).WriteText(&txt); err != nil || !strings.Contains(txt.String(), "25 marked X-Refusal: expired") {
				t.Errorf("the text report does not show the expired refusals (%v):\n%s", err, txt.String())
			}
		})
	}
}

func TestErrorKinds(t *testing.T) {
	t.Run("status", func(t *testing.T) {
		var n atomic.Int64
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			switch n.Add(1) % 5 {
			case 0:
				w.WriteHeader(http.StatusServiceUnavailable)
			case 1:
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		s := mustRun(t, Config{URL: srv.URL, Concurrency: 3, Requests: 100, KeepAlive: true}).Summary
		if s.OK2xx != 60 || s.Errors != 40 || s.StatusCodes["503"] != 20 || s.StatusCodes["429"] != 20 ||
			s.ErrorKinds["status_5xx"] != 20 || s.ErrorKinds["status_4xx"] != 20 || s.StatusCodes["200"] != 60 {
			t.Fatalf("summary: %+v", s)
		}
		if s.Throughput >= s.CompletedRate {
			t.Errorf("throughput %.1f counts only 2xx, must be below completed rate %.1f", s.Throughput, s.CompletedRate)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		var n atomic.Int64
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1)%2 == 0 {
				select { // hang past the client's timeout
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			}
		})
		s := mustRun(t, Config{URL: srv.URL, Concurrency: 2, Requests: 10, KeepAlive: true, Timeout: 100 * time.Millisecond}).Summary
		if s.ErrorKinds["timeout"] != 5 || s.OK2xx != 5 || s.Errors != 5 {
			t.Fatalf("summary: %+v", s)
		}
		// The 100 ms timeout, not the handler's 5 s sleep, ended the slow requests.
		if s.Latency.Max < 99 || s.Latency.Max > 4000 || !strings.Contains(s.ErrorSamples["timeout"], "timeout") {
			t.Errorf("timed-out latency max %.1f ms, sample %q", s.Latency.Max, s.ErrorSamples["timeout"])
		}
	})
	t.Run("closed", func(t *testing.T) {
		var n atomic.Int64
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1)%2 == 0 {
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					c.Close()
				}
			}
		})
		s := mustRun(t, Config{URL: srv.URL, Concurrency: 1, Requests: 20, KeepAlive: true}).Summary
		if s.ErrorKinds["closed"] != 10 || s.OK2xx != 10 {
			t.Fatalf("summary: %+v", s)
		}
	})
	t.Run("connect", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		s := mustRun(t, Config{URL: "http://" + addr + "/", Concurrency: 2, Requests: 6, KeepAlive: true}).Summary
		if s.ErrorKinds["connect"] != 6 || s.Completed != 6 || s.OK2xx != 0 {
			t.Fatalf("summary: %+v", s)
		}
	})
}

func TestKeepAliveAndWarmup(t *testing.T) {
	var conns, reqs atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reqs.Add(1) }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	s := mustRun(t, Config{URL: srv.URL, Concurrency: 3, Requests: 30, WarmupRequests: 10, KeepAlive: true}).Summary
	if s.Sent != 30 || s.Warmup != 10 || reqs.Load() != 40 || s.Completed != 30 {
		t.Fatalf("warm-up: sent %d warmup %d, server saw %d", s.Sent, s.Warmup, reqs.Load())
	}
	if c := conns.Load(); c > 3 {
		t.Errorf("keep-alive opened %d connections for 3 workers", c)
	}
	conns.Store(0)
	s = mustRun(t, Config{URL: srv.URL, Concurrency: 2, Requests: 20, KeepAlive: false}).Summary
	if c := conns.Load(); c != 20 || s.OK2xx != 20 {
		t.Errorf("without keep-alive: %d connections for 20 requests (%d ok)", c, s.OK2xx)
	}
}

func TestBodiesHeadersAndMethod(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Image string }
		if r.Method != "PUT" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Test") != "yes" {
			w.WriteHeader(400)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(400)
			return
		}
		img, _ := base64.StdEncoding.DecodeString(body.Image)
		mu.Lock()
		seen[string(img)]++
		mu.Unlock()
	})
	bodies := []Body{JSONImageBody("a", []byte("AAAA-image")), JSONImageBody("b", []byte("BB"))}
	if got := string(bodies[1].Data); got != `{"image": "QkI="}` {
		t.Fatalf("JSON body = %s", got)
	}
	s := mustRun(t, Config{
		URL: srv.URL + "/predict/", Method: "put", Bodies: bodies, Concurrency: 2, Requests: 10, KeepAlive: true,
		Headers: []Header{{"Content-Type", "application/json"}, {"X-Test", "yes"}},
	}).Summary
	if s.OK2xx != 10 || seen["AAAA-image"] != 5 || seen["BB"] != 5 {
		t.Fatalf("ok %d, bodies seen %v", s.OK2xx, seen)
	}
	if want := int64(5*len(bodies[0].Data) + 5*len(bodies[1].Data)); s.BytesOut != want {
		t.Errorf("bytes out %d, want %d", s.BytesOut, want)
	}
}

func TestOpenLoopPacing(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	for _, arrival := range []Arrival{ArrivalConstant, ArrivalPoisson} {
		t.Run(string(arrival), func(t *testing.T) {
			res := mustRun(t, Config{URL: srv.URL, Rate: 400, Arrival: arrival, Requests: 400, Concurrency: 20, KeepAlive: true})
			s := res.Summary
			if s.Sent != 400 || s.OK2xx != 400 {
				t.Fatalf("summary: %+v", s)
			}
			tol := 0.05
			if arrival == ArrivalPoisson {
				tol = 0.2 // 400 exponential gaps: the realised mean varies ~5 %, seed fixed
			}
			if d := s.SentRate/400 - 1; d < -tol || d > tol {
				t.Errorf("sent rate %.1f req/s, want 400 ±%.0f%%", s.SentRate, tol*100)
			}
			if s.DurationS < 0.8 || s.DurationS > 1.5 {
				t.Errorf("duration %.3f s for 400 requests at 400/s", s.DurationS)
			}
			if res.earlySends != 0 {
				t.Errorf("%d requests were sent before their intended time", res.earlySends)
			}
			if s.SendDelay.P50 > 50 {
				t.Errorf("median send delay %.2f ms: the pacer is late", s.SendDelay.P50)
			}
			if res.Config.Mode != "open" || s.TargetRate != 400 {
				t.Errorf("mode %q target %v", res.Config.Mode, s.TargetRate)
			}
		})
	}
}

func TestOpenLoopDurationAndWarmupDuration(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	s := mustRun(t, Config{URL: srv.URL, Rate: 200, Duration: 500 * time.Millisecond, WarmupDuration: 200 * time.Millisecond,
		Concurrency: 10, KeepAlive: true}).Summary
	// 0.5 s at 200/s = 100 measured, 0.2 s warm-up = 40 more.
	if s.Sent != 100 || s.Warmup != 40 {
		t.Fatalf("sent %d (want 100), warm-up %d (want 40)", s.Sent, s.Warmup)
	}
}

// TestCoordinatedOmission stalls the server for one second once. With one
// worker, the requests scheduled during the stall queue behind it; an open
// loop counts their latency from their scheduled time, so p90/p99 show the
// stall, while a closed loop hides it (only one request ever waits).
func TestCoordinatedOmission(t *testing.T) {
	newStallServer := func() *httptest.Server {
		var n atomic.Int64
		return newServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 20 {
				time.Sleep(time.Second)
			}
		})
	}
	open := mustRun(t, Config{URL: newStallServer().URL, Rate: 100, Requests: 200, Concurrency: 1, KeepAlive: true})
	s := open.Summary
	// Requests 20..120 were scheduled during the stall: half the run waited
	// between 0 and 1 s, so p90 is about 0.8 s and p99 close to 1 s.
	if s.Latency.P99 < 850 || s.Latency.P90 < 600 || s.Latency.Max < 950 {
		t.Errorf("open loop p90 %.0f ms, p99 %.0f ms, max %.0f ms: the stall is hidden", s.Latency.P90, s.Latency.P99, s.Latency.Max)
	}
	if s.ServiceTime.P90 > 500 || s.SendDelay.P90 < 500 {
		t.Errorf("service time p90 %.0f ms, send delay p90 %.0f ms: only one request was served slowly, the rest waited for the worker",
			s.ServiceTime.P90, s.SendDelay.P90)
	}
	// The stall falls in the first second of the timeline, by scheduled time.
	if len(open.Timeline) < 2 || open.Timeline[0].P99Ms < 850 || open.Timeline[0].Scheduled != 100 {
		t.Errorf("timeline: %+v", open.Timeline)
	}
	closed := mustRun(t, Config{URL: newStallServer().URL, Requests: 200, Concurrency: 1, KeepAlive: true}).Summary
	if closed.Latency.P99 > 500 || closed.Latency.Max < 950 {
		t.Errorf("closed loop p99 %.0f ms max %.0f ms: expected the stall in max only", closed.Latency.P99, closed.Latency.Max)
	}
}

func TestClosedLoopDurationAndCancel(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Millisecond) })
	s := mustRun(t, Config{URL: srv.URL, Concurrency: 2, Duration: 300 * time.Millisecond, KeepAlive: true}).Summary
	// The measured window lasts at least the configured duration (an upper bound would only
	// measure this machine's load).
	if s.DurationS < 0.3 || s.Sent == 0 {
		t.Fatalf("duration run: summary %+v", s)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Run(ctx, Config{URL: srv.URL, Rate: 50, Duration: time.Minute, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled after 300 ms of a minute-long run at 50/s: far fewer than the minute's 3,000.
	if el := time.Since(start); el > 30*time.Second || r.Summary.Sent == 0 || r.Summary.Sent > 1000 {
		t.Fatalf("cancelled run took %v and sent %d", el, r.Summary.Sent)
	}
}

func TestProgressCallback(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	var mu sync.Mutex
	var calls []Progress
	mustRun(t, Config{URL: srv.URL, Rate: 100, Requests: 30, KeepAlive: true, ProgressInterval: 50 * time.Millisecond,
		Progress: func(p Progress) { mu.Lock(); calls = append(calls, p); mu.Unlock() }})
	mu.Lock()
	defer mu.Unlock()
	last := calls[len(calls)-1]
	if len(calls) < 3 || !last.Done || last.Completed != 30 || last.OK != 30 || last.Fraction != 1 {
		t.Fatalf("%d calls, last %+v", len(calls), last)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{URL: "ftp://x/", Requests: 1},
		{URL: "http://127.0.0.1:1/"},
		{URL: "http://127.0.0.1:1/", Requests: 1, Arrival: "bursty"},
		{URL: "http://127.0.0.1:1/", Requests: 1, WarmupRequests: 1, WarmupDuration: time.Second},
		{URL: "http://127.0.0.1:1/", Requests: 1, Rate: -1},
		// found by a hostile review: NaN ran a closed loop, +Inf failed only when the report
		// was written, a billion workers ran out of memory, a negative timeout became 30s
		{URL: "http://127.0.0.1:1/", Requests: 1, Rate: math.NaN()},
		{URL: "http://127.0.0.1:1/", Requests: 1, Rate: math.Inf(1)},
		{URL: "http://127.0.0.1:1/", Requests: 1, Concurrency: 1_000_000_000},
		{URL: "http://127.0.0.1:1/", Requests: 1, Timeout: -time.Second},
	} {
		if _, err := Run(t.Context(), cfg); err == nil {
			t.Errorf("%+v: want an error", cfg)
		}
	}
}

func TestJSONReportShape(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	res := mustRun(t, Config{URL: srv.URL, Rate: 100, Requests: 50, KeepAlive: true,
		Bodies: []Body{{Name: "x.json", Data: []byte("{}")}}})
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	get := func(path ...string) any {
		var v any = m
		for _, p := range path {
			obj, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", path, p)
			}
			v, ok = obj[p]
			if !ok {
				t.Fatalf("report lacks %v", path)
			}
		}
		return v
	}
	for _, path := range [][]string{
		{"tool"}, {"version"}, {"start_time"}, {"config", "url"}, {"config", "mode"}, {"config", "rate"},
		{"config", "concurrency"}, {"config", "keepalive"}, {"config", "timeout_s"}, {"config", "bodies"},
		{"results", "sent"}, {"results", "completed"}, {"results", "ok_2xx"}, {"results", "errors"},
		{"results", "error_kinds"}, {"results", "status_codes"}, {"results", "sent_rate"}, {"results", "throughput"},
		{"results", "duration_s"}, {"results", "latency_ms", "p50"}, {"results", "latency_ms", "p90"},
		{"results", "latency_ms", "p99"}, {"results", "latency_ms", "p99_9"}, {"results", "latency_ms", "max"},
		{"results", "latency_ms", "mean"}, {"results", "service_time_ms", "p99"}, {"results", "send_delay_ms", "p99"},
		{"results", "cpu", "percent_of_one_core"}, {"timeline"}, {"latency_percentiles"}, {"latency_histogram"},
	} {
		get(path...)
	}
	if get("config", "mode") != "open" || get("results", "ok_2xx").(float64) != 50 {
		t.Errorf("mode %v ok %v", get("config", "mode"), get("results", "ok_2xx"))
	}
	tl := get("timeline").([]any)
	if len(tl) == 0 {
		t.Fatal("empty timeline")
	}
	for _, k := range []string{"t", "sent", "completed", "ok", "errors", "scheduled", "p50_ms", "p90_ms", "p99_ms", "max_ms"} {
		if _, ok := tl[0].(map[string]any)[k]; !ok {
			t.Errorf("timeline entry lacks %q", k)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, get("start_time").(string)); err != nil {
		t.Errorf("start_time: %v", err)
	}
	rt, err := ReadResultJSON(bytes.NewReader(mustJSON(t, res)))
	if err != nil || rt.Summary.OK2xx != 50 || len(rt.Timeline) != len(res.Timeline) {
		t.Fatalf("round trip: %v %+v", err, rt)
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Sent rate:", "Throughput:", "p99.9", "Service time", "Loadtest CPU:", "200=50"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
}

func mustJSON(t *testing.T, r *Result) []byte {
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestHTTPSRun: an https:// run trusts Config.TLS's CA, and the report withholds the values of
// credential headers.
func TestHTTPSRun(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(401)
		}
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	res, err := Run(context.Background(), Config{URL: srv.URL, Requests: 20, Concurrency: 2, KeepAlive: true,
		Headers: []Header{{"Authorization", "Bearer s3cret"}}, TLS: &tls.Config{RootCAs: pool}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary.OK2xx != 20 {
		t.Fatalf("%+v", res.Summary)
	}
	if h := res.Config.Headers; len(h) != 1 || h[0].Value != "(redacted)" {
		t.Fatalf("report headers %v", h)
	}
	if _, err := Run(context.Background(), Config{URL: srv.URL, Requests: 2}); err != nil {
		t.Fatal(err)
	} // without the CA: every request fails to connect (counted, not an error of the run)
}
