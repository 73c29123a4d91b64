package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oipgrpc/oipgrpctest"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunWritesSummaryAndReports(t *testing.T) {
	var ctype, method atomic.Value
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		ctype.Store(r.Header.Get("Content-Type"))
		method.Store(r.Method)
	}))
	defer srv.Close()
	dir := t.TempDir()
	img := filepath.Join(dir, "a.jpg")
	os.WriteFile(img, []byte("\xff\xd8fake"), 0o644)
	jsonOut, htmlOut := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")

	code, out, errOut := runCLI(t, "-c", "2", "-n", "20", "-warmup", "5", "-json-image", img+","+img,
		"-H", "X-A: b", "-o", jsonOut, "-html", htmlOut, srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if errOut != "" {
		t.Errorf("stderr is not a terminal, so no progress bar; got %q", errOut)
	}
	if !strings.Contains(out, "Requests:      20 sent, 20 completed, 20 2xx (warm-up of 5 excluded)") {
		t.Errorf("summary:\n%s", out)
	}
	if n.Load() != 25 || ctype.Load() != "application/json" || method.Load() != "POST" {
		t.Errorf("server saw %d requests, content type %v, method %v", n.Load(), ctype.Load(), method.Load())
	}
	var rep struct {
		Config  struct{ Mode string }
		Results struct {
			OK uint64 `json:"ok_2xx"`
		}
	}
	data, err := os.ReadFile(jsonOut)
	if err != nil || json.Unmarshal(data, &rep) != nil || rep.Results.OK != 20 || rep.Config.Mode != "closed" {
		t.Fatalf("JSON report (%v): %s", err, data)
	}
	page, err := os.ReadFile(htmlOut)
	if err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Fatalf("HTML report: %v", err)
	}
}

func TestRunOpenLoopDurationWarmup(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	code, out, errOut := runCLI(t, "-rate", "100", "-arrival", "poisson", "-duration", "300ms", "-warmup", "100ms",
		"-keepalive=false", "-m", "GET", srv.URL)
	if code != 0 || !strings.Contains(out, "open loop, 100 req/s poisson") || !strings.Contains(out, "new connection per request") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestSweepCommand(t *testing.T) {
	var items atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/p", func(w http.ResponseWriter, r *http.Request) { items.Add(1) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "my_batches %d\nmy_items %d\n", items.Load()/4, items.Load())
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "s.json")
	code, stdout, errOut := runCLI(t, "sweep", "-c", "1,2", "-n", "40", "-metrics", srv.URL+"/metrics",
		"-batch-count-metric", "my_batches", "-batch-items-metric", "my_items", "-o", out, srv.URL+"/p")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "batch") || !strings.Contains(lines[1], " 4.00 ") {
		t.Fatalf("table:\n%s\n%s", stdout, errOut)
	}
	if data, err := os.ReadFile(out); err != nil || !bytes.Contains(data, []byte(`"mean_batch": 4`)) {
		t.Fatalf("sweep JSON (%v): %s", err, data)
	}
}

// TestRunGRPC: -protocol grpc sends the image over gRPC to a stand-in server, on the
// connections asked for, and reports the answers by gRPC code; a run where nothing succeeds
// exits 3.
func TestRunGRPC(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	img := filepath.Join(t.TempDir(), "a.jpg")
	os.WriteFile(img, []byte("\xff\xd8fake"), 0o644)
	code, out, errOut := runCLI(t, "-protocol", "grpc", "-model", oipgrpctest.Model, "-n", "20", "-c", "4", "-grpc-conns", "2",
		"-body", img, "-H", "Authorization: Bearer x", srv.Addr)
	if code != 0 || !strings.Contains(out, "20 sent, 20 completed, 20 OK") || !strings.Contains(out, "gRPC codes:    OK=20") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if srv.Infers.Load() != 20 || srv.LastHeader("authorization")[0] != "Bearer x" {
		t.Errorf("server answered %d, saw %q", srv.Infers.Load(), srv.LastHeader("authorization"))
	}
	srv.SetFail(func(context.Context, *inference.ModelInferRequest) error {
		return status.Error(codes.ResourceExhausted, "queue full")
	})
	code, out, errOut = runCLI(t, "-protocol", "grpc", "-model", oipgrpctest.Model, "-n", "5", "-body", img, "grpc://"+srv.Addr)
	if code != 3 || !strings.Contains(out, "RESOURCE_EXHAUSTED=5") || !strings.Contains(errOut, "no answer with status OK") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-warmup", "soon", "http://127.0.0.1:1/"},
		{"-body", "/nonexistent", "http://127.0.0.1:1/"},
		{"-json-image", "a", "-body", "b", "http://127.0.0.1:1/"},
		{"-H", "novalue", "http://127.0.0.1:1/"},
		{"-arrival", "bursty", "-rate", "1", "http://127.0.0.1:1/"},
		{"sweep", "http://127.0.0.1:1/"},
		{"sweep", "-c", "1,x", "http://127.0.0.1:1/"},
		{"sweep", "-rates", "10", "-c", "1,2", "http://127.0.0.1:1/"},
		{"-protocol", "v3", "http://127.0.0.1:1/"},
		{"-binary", "-body", "main.go", "http://127.0.0.1:1/"},
		{"-protocol", "v2", "-body", "main.go", "http://127.0.0.1:1/"},
		{"-protocol", "v2", "-model", "m", "http://127.0.0.1:1/"},
		{"-protocol", "v2", "-model", "m", "-body", "main.go", "http://127.0.0.1:1/v2/models/m"},
		{"-protocol", "grpc", "-binary", "-model", "m", "-body", "main.go", "127.0.0.1:1"},
		{"-protocol", "grpc", "-body", "main.go", "127.0.0.1:1"},
		{"-protocol", "grpc", "-model", "m", "-body", "main.go", "127.0.0.1"},
		{"-protocol", "grpc", "-model", "m", "127.0.0.1:1"},
		{"-grpc-conns", "2", "-body", "main.go", "http://127.0.0.1:1/"},
	} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if _, _, errOut := runCLI(t, "-h"); !strings.Contains(errOut, "Examples:") {
		t.Errorf("usage text lacks examples:\n%s", errOut)
	}
}

// TestParamFlag: -param values typed as a request parameter wants them; malformed and
// repeated keys refused.
func TestParamFlag(t *testing.T) {
	var p paramFlag
	for _, v := range []string{"detections=true", "score_threshold=0.25", "max_detections=5", "note=hello=world", "flag=True"} {
		if err := p.Set(v); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
	}
	want := paramFlag{"detections": true, "score_threshold": 0.25, "max_detections": int64(5), "note": "hello=world", "flag": "True"}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %#v, want %#v", p, want)
	}
	for _, bad := range []string{"novalue", "=1", "detections=false"} {
		if err := p.Set(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
