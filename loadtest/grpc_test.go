package loadtest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
	"github.com/imagegate/imagegate/loadtest/oipgrpc/oipgrpctest"
)

func TestGRPCTarget(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8001":        "127.0.0.1:8001",
		"grpc://localhost:8001": "localhost:8001",
		"grpc://[::1]:9/":       "[::1]:9",
	} {
		if got, err := GRPCTarget(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"localhost", "http://h:1", "grpc://h:1/v2/models/m", "grpc://h", "grpc://h:1?x=1", ":8001"} {
		if _, err := GRPCTarget(in); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// elementOf returns the one BYTES element a request from PrepareGRPC carries.
func elementOf(t *testing.T, r *inference.ModelInferRequest) []byte {
	raw := r.GetRawInputContents()
	if len(raw) != 1 || len(raw[0]) < 4 {
		t.Errorf("request raw contents %q", raw)
		return nil
	}
	return raw[0][4:]
}

// TestPrepareGRPCRun prepares a gRPC run of two images (an image file and the article's JSON
// body) and runs it on two shared connections: every request reaches the stand-in server
// with its image as the one raw BYTES element and the run's metadata, and the figures count
// status OK as success.
func TestPrepareGRPCRun(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	png := []byte("\x89PNG\r\n\x1a\n image bytes")
	jpeg := []byte("\xff\xd8\xff a larger image " + strings.Repeat("x", 5000))
	var mu sync.Mutex
	seen := map[string]int{}
	srv.SetFail(func(_ context.Context, r *inference.ModelInferRequest) error {
		mu.Lock()
		seen[string(elementOf(t, r))]++
		mu.Unlock()
		return nil
	})
	cfg := Config{URL: srv.Addr, Bodies: []Body{{Name: "a.png", Data: png}, JSONImageBody("b.jpg", jpeg)},
		Requests: 40, WarmupRequests: 4, Concurrency: 8, GRPCConns: 2,
		Headers: []Header{{Name: "Authorization", Value: "Bearer x"}, {Name: "Content-Type", Value: "application/json"}}}
	if err := PrepareGRPC(t.Context(), &cfg, oipgrpctest.Model); err != nil {
		t.Fatal(err)
	}
	if cfg.Protocol != ProtocolGRPC || cfg.URL != "grpc://"+srv.Addr || !cfg.KeepAlive || !strings.Contains(cfg.Bodies[1].Name, "gRPC") {
		t.Fatalf("prepared %+v", cfg)
	}
	res := mustRun(t, cfg)
	s := res.Summary
	if s.OK2xx != 40 || s.Errors != 0 || s.Warmup != 4 || s.StatusCodes["OK"] != 40 || len(s.StatusCodes) != 1 || s.BytesIn <= 0 ||
		s.BytesOut != 20*int64(len(cfg.Bodies[0].Data)+len(cfg.Bodies[1].Data)) {
		t.Fatalf("summary %+v", s)
	}
	if seen[string(png)] != 22 || seen[string(jpeg)] != 22 || len(seen) != 2 {
		t.Errorf("server saw %d images: png %d, jpeg %d", len(seen), seen[string(png)], seen[string(jpeg)])
	}
	if got := srv.LastHeader("authorization"); len(got) != 1 || got[0] != "Bearer x" || srv.LastHeader("content-type")[0] != "application/grpc+proto" {
		t.Errorf("metadata authorization %q, content-type %q", got, srv.LastHeader("content-type"))
	}
	var text bytes.Buffer
	res.WriteText(&text)
	for _, want := range []string{"Target:        ModelInfer grpc://" + srv.Addr, "40 sent, 40 completed, 40 OK", "gRPC codes:    OK=40", "Errors:        0\n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if res.Config.Protocol != "grpc" || res.Config.Method != "ModelInfer" {
		t.Errorf("report config %+v", res.Config)
	}

	// Refused before the run: no model, an unknown model, no images, an HTTP URL.
	for name, c := range map[string]struct {
		cfg   Config
		model string
	}{
		"no model":      {Config{URL: srv.Addr, Bodies: []Body{{Name: "a", Data: png}}}, ""},
		"unknown model": {Config{URL: srv.Addr, Bodies: []Body{{Name: "a", Data: png}}}, "nope"},
		"no images":     {Config{URL: srv.Addr}, oipgrpctest.Model},
		"bad URL":       {Config{URL: "http://" + srv.Addr, Bodies: []Body{{Name: "a", Data: png}}}, oipgrpctest.Model},
	} {
		if err := PrepareGRPC(t.Context(), &c.cfg, c.model); err == nil {
			t.Errorf("%s: prepared", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestGRPCErrorsByCode runs requests that the server refuses in each way the gateway will
// (RESOURCE_EXHAUSTED, UNAVAILABLE, NOT_FOUND) or that miss their deadline, in rotation
// with good ones: each is counted under its code, the refusals' latency apart, and the first
// message of each code is kept.
func TestGRPCErrorsByCode(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	srv.SetFail(func(ctx context.Context, r *inference.ModelInferRequest) error {
		switch string(elementOf(t, r)) {
		case "busy":
			return status.Error(codes.ResourceExhausted, "queue full")
		case "gone":
			return status.Error(codes.Unavailable, "draining")
		case "slow":
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	})
	var bodies []Body
	for _, img := range []string{"fine", "busy", "gone", "slow"} {
		b, err := oipgrpc.MarshalRequest(oipgrpctest.Model, "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(oipgrpctest.Input, true, []byte(img))}})
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, Body{Name: img, Data: b})
	}
	unknown, _ := oipgrpc.MarshalRequest("nope", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(oipgrpctest.Input, true, []byte("fine"))}})
	bodies = append(bodies, Body{Name: "unknown model", Data: unknown})
	// The deadline ends the slow requests; the others, answered at once, never come near it.
	res := mustRun(t, Config{Protocol: ProtocolGRPC, URL: "grpc://" + srv.Addr, Bodies: bodies, KeepAlive: true,
		Requests: 10, Concurrency: 5, Timeout: 2 * time.Second})
	s := res.Summary
	want := map[string]uint64{"RESOURCE_EXHAUSTED": 2, "UNAVAILABLE": 2, "DEADLINE_EXCEEDED": 2, "NOT_FOUND": 2}
	if s.OK2xx != 2 || s.Errors != 8 || s.Refused != 4 || s.StatusCodes["OK"] != 2 || len(s.ErrorKinds) != len(want) {
		t.Fatalf("summary %+v", s)
	}
	for k, n := range want {
		if s.ErrorKinds[k] != n || s.StatusCodes[k] != n || s.ErrorSamples[k] == "" {
			t.Errorf("%s: %d errors, %d answers, sample %q; want %d", k, s.ErrorKinds[k], s.StatusCodes[k], s.ErrorSamples[k], n)
		}
	}
	if !strings.Contains(s.ErrorSamples["RESOURCE_EXHAUSTED"], "queue full") {
		t.Errorf("sample %q", s.ErrorSamples["RESOURCE_EXHAUSTED"])
	}
	var text bytes.Buffer
	res.WriteText(&text)
	for _, w := range []string{"Latency of refusals, RESOURCE_EXHAUSTED/UNAVAILABLE (ms, 4 refused)", "DEADLINE_EXCEEDED=2", "Latency of OK answers"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
}

// TestGRPCConnectFailure: a run against an address nobody listens on ends with every request
// UNAVAILABLE (gRPC's code for a connection that cannot be made), not with a hang.
func TestGRPCConnectFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	s := mustRun(t, Config{Protocol: ProtocolGRPC, URL: addr, Bodies: []Body{{Name: "x", Data: []byte{}}}, KeepAlive: true,
		Requests: 3, Concurrency: 1}).Summary
	if s.Errors != 3 || s.ErrorKinds["UNAVAILABLE"] != 3 || s.ErrorSamples["UNAVAILABLE"] == "" {
		t.Fatalf("summary %+v", s)
	}
}

// TestGRPCOpenLoop: an open-loop gRPC run sends at its rate and keeps each request's intended
// time, as an HTTP run does.
func TestGRPCOpenLoop(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	b, err := oipgrpc.MarshalRequest(oipgrpctest.Model, "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(oipgrpctest.Input, true, []byte("img"))}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Protocol: ProtocolGRPC, URL: srv.Addr, Bodies: []Body{{Name: "img", Data: b}}, KeepAlive: true,
		Rate: 200, Requests: 60, Concurrency: 4}
	res := mustRun(t, cfg)
	if s := res.Summary; s.OK2xx != 60 || s.TargetRate != 200 || res.Config.Mode != "open" {
		t.Fatalf("summary %+v", s)
	}
	// A worker's sample keeps the intended time in an open loop, the send time in a closed one.
	if err := cfg.normalize(); err != nil {
		t.Fatal(err)
	}
	clients, err := grpcClients(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer clients[0].Close()
	w := &grpcWorker{cfg: &cfg, client: clients[0]}
	start := time.Now().Add(-time.Second)
	if s := w.do(start, 0, 123, false); s.intended != 123 || s.status != 0 || s.sent < int64(time.Second) || s.done < s.sent {
		t.Errorf("open-loop sample %+v", s)
	}
	closed := cfg
	closed.Rate = 0
	w.cfg = &closed
	if s := w.do(start, 0, 123, false); s.intended != s.sent {
		t.Errorf("closed-loop sample %+v", s)
	}
}

func TestGRPCConfigErrors(t *testing.T) {
	body := []Body{{Name: "x", Data: []byte{1}}}
	for name, cfg := range map[string]Config{
		"keep-alive off":   {Protocol: ProtocolGRPC, URL: "h:1", Bodies: body, Requests: 1},
		"HTTP method":      {Protocol: ProtocolGRPC, URL: "h:1", Bodies: body, Requests: 1, KeepAlive: true, Method: "POST"},
		"no bodies":        {Protocol: ProtocolGRPC, URL: "h:1", Requests: 1, KeepAlive: true},
		"no port":          {Protocol: ProtocolGRPC, URL: "h", Bodies: body, Requests: 1, KeepAlive: true},
		"conns over c":     {Protocol: ProtocolGRPC, URL: "h:1", Bodies: body, Requests: 1, KeepAlive: true, Concurrency: 2, GRPCConns: 3},
		"conns for HTTP":   {URL: "http://h:1/", Requests: 1, GRPCConns: 2},
		"unknown protocol": {Protocol: "h3", URL: "http://h:1/", Requests: 1},
	} {
		if _, err := Run(t.Context(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
