package loadtest

import (
	"net/http"
	"testing"
	"time"
)

// TestOpenLoopEndsWithItsDuration: an open loop against a server slower than its rate ends at
// -duration (plus the requests in flight), counting what the rate scheduled but no worker could
// send as unsent; it went on sending everything scheduled (rate 100 for 1 s with 2 workers and
// 200 ms answers: 10 s). The sent rate is over the window, not between two sends.
func TestOpenLoopEndsWithItsDuration(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { time.Sleep(200 * time.Millisecond) })
	begin := time.Now()
	res := mustRun(t, Config{URL: srv.URL, Rate: 100, Duration: time.Second, Concurrency: 2, KeepAlive: true})
	took := time.Since(begin)
	s := res.Summary
	if s.Unsent < 50 || s.Sent+s.Unsent < 90 || s.Sent+s.Unsent > 110 {
		t.Fatalf("sent %d, unsent %d; want about 100 scheduled, most of them unsent", s.Sent, s.Unsent)
	}
	if took > 5*time.Second {
		t.Fatalf("the run took %v for a 1 s window", took)
	}
	if s.SentRate > 2*float64(s.Sent) {
		t.Fatalf("sent rate %.1f for %d requests sent over a 1 s window", s.SentRate, s.Sent)
	}
}
