package loadtest

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestExpectContinue: with ExpectContinue every request carries "Expect: 100-continue"; a
// request the server accepts sends its body after "100 Continue" (net/http sends it when the
// handler reads the body), and one the server refuses on its headers sends none and gets its
// answer, counted as a refusal.
func TestExpectContinue(t *testing.T) {
	var got, bodies, expects atomic.Int64
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") == "100-continue" {
			expects.Add(1)
		}
		if got.Add(1)%2 == 0 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) == "payload" {
			bodies.Add(1)
		}
		io.WriteString(w, "ok")
	})
	res, err := Run(context.Background(), Config{URL: srv.URL + "/p", Bodies: []Body{{Data: []byte("payload")}},
		Requests: 40, Concurrency: 2, KeepAlive: true, ExpectContinue: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	if s.Completed != 40 || s.OK2xx != 20 || s.Refused != 20 || s.StatusCodes["503"] != 20 {
		t.Fatalf("40 requests, every other refused: %+v", s)
	}
	if expects.Load() != 40 || bodies.Load() != 20 {
		t.Fatalf("%d requests carried Expect (want 40), %d bodies arrived (want 20: the refused sent none)", expects.Load(), bodies.Load())
	}
	if s.BytesOut != 20*int64(len("payload")) {
		t.Fatalf("bytes out %d, want the accepted bodies only (%d)", s.BytesOut, 20*len("payload"))
	}
	if _, err := Run(context.Background(), Config{URL: "https://x/", ExpectContinue: true, Requests: 1}); err == nil {
		t.Fatal("Expect over https accepted")
	}
}
