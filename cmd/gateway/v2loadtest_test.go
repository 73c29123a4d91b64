package main_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var (
	loadtestOnce sync.Once
	loadtestPath string
	loadtestErr  error
)

// loadtestBin builds cmd/loadtest once (LOADTEST_BIN overrides).
func loadtestBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOADTEST_BIN"); p != "" {
		return p
	}
	loadtestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "loadtest-bin")
		if err != nil {
			loadtestErr = err
			return
		}
		loadtestPath = filepath.Join(dir, "loadtest")
		if out, err := exec.Command("go", "build", "-o", loadtestPath, "../loadtest").CombinedOutput(); err != nil {
			loadtestErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if loadtestErr != nil {
		t.Fatal(loadtestErr)
	}
	return loadtestPath
}

// TestV2LoadtestProtocol runs bin/loadtest -protocol v2 (JSON and -binary, a base URL and an
// infer URL) against the real gateway and checks that the gateway answered every request on
// its v2 path: 2xx for all, counted on the model.
func TestV2LoadtestProtocol(t *testing.T) {
	g := startGateway(t, "models:\n"+imagenetModelYAML(t, "{max_batch_size: 4, max_queue_delay: 2ms}"))
	shared := sharedDir(t)
	coffee := filepath.Join(shared, "images", "skimage_coffee.png")
	article := filepath.Join(shared, "seed", "rime_5868.json")
	re := regexp.MustCompile(`Requests: +(\d+) sent, (\d+) completed, (\d+) 2xx`)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"json images, base URL", []string{"-json-image", coffee, "-model", "mobilenetv2", g.url}},
		{"binary images, base URL", []string{"-binary", "-json-image", coffee + "," + coffee, "-model", "mobilenetv2", g.url + "/"}},
		{"binary article body, infer URL", []string{"-binary", "-body", article, g.url + "/v2/models/mobilenetv2/versions/1/infer"}},
		{"json raw image body", []string{"-body", coffee, "-model", "mobilenetv2", g.url}},
	} {
		before := g.metric("gateway_requests_total", `model="mobilenetv2",version="1",code="200"`)
		args := append([]string{"-q", "-protocol", "v2", "-n", "12", "-c", "3"}, tc.args...)
		out, err := exec.Command(loadtestBin(t), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: loadtest %q: %v\n%s", tc.name, args, err, out)
		}
		m := re.FindStringSubmatch(string(out))
		if m == nil || m[1] != "12" || m[3] != "12" {
			t.Fatalf("%s: loadtest %q:\n%s", tc.name, args, out)
		}
		if d := g.metric("gateway_requests_total", `model="mobilenetv2",version="1",code="200"`) - before; d != 12 {
			t.Fatalf("%s: the gateway counted %v answers, want 12", tc.name, d)
		}
	}
	// A model whose input is not BYTES, and an unknown model, are refused before the run.
	for _, args := range [][]string{
		{"-protocol", "v2", "-model", "mobilenetv2.tensor", "-json-image", coffee, g.url},
		{"-protocol", "v2", "-model", "nope", "-json-image", coffee, g.url},
		{"-protocol", "v2", "-json-image", coffee, g.url},
	} {
		out, err := exec.Command(loadtestBin(t), args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("loadtest %q: %v\n%s", args, err, out)
		}
		t.Logf("loadtest %q: %s", args, strings.TrimSpace(string(out)))
	}
}

// TestLoadtestTasks drives an embedding model and a detector with bin/loadtest through each
// protocol: the article's API (a detector's selection in the URL's query), the Open
// Inference Protocol in JSON and binary, and gRPC, with -param detections=true asking a
// detector for its detections. Every request is answered 2xx and counted on its model; the
// same parameter sent to the embedding model has every request refused (400, or gRPC's
// INVALID_ARGUMENT), which shows the parameters reach the server.
func TestLoadtestTasks(t *testing.T) {
	dir := t.TempDir()
	model := cutMobileNet(t, dir)
	g := startGateway(t, "models:\n"+ultrafaceYAML(t)+fmt.Sprintf("  - name: features\n    path: %s\n    batching: {max_batch_size: 4}\n", model))
	photo := filepath.Join(sharedDir(t), "images", "opencv_messi5.jpg")
	re := regexp.MustCompile(`Requests: +(\d+) sent, (\d+) completed, (\d+) `)
	g.mu.Lock()
	grpcAddr := g.grpc
	g.mu.Unlock()
	if grpcAddr == "" {
		t.Fatalf("the gateway does not serve gRPC:\n%s", g.log())
	}
	for _, tc := range []struct {
		name, model string
		args        []string
		ok          bool
		code        string // the refusals' status code or gRPC code
	}{
		{"detector, article's API", "ultraface", []string{"-body", photo, g.url + "/models/ultraface/predict?score_threshold=0.9&max_detections=5"}, true, ""},
		{"detector, v2 JSON, detections", "ultraface", []string{"-protocol", "v2", "-model", "ultraface", "-param", "detections=true", "-param", "score_threshold=0.9", "-json-image", photo, g.url}, true, ""},
		{"detector, v2 binary, raw outputs", "ultraface", []string{"-protocol", "v2", "-binary", "-model", "ultraface", "-body", photo, g.url}, true, ""},
		{"detector, gRPC, detections", "ultraface", []string{"-protocol", "grpc", "-model", "ultraface", "-param", "detections=true", "-param", "max_detections=3", "-body", photo, grpcAddr}, true, ""},
		{"embedding, article's API", "features", []string{"-body", photo, g.url + "/models/features/predict"}, true, ""},
		{"embedding, v2 binary", "features", []string{"-protocol", "v2", "-binary", "-model", "features", "-body", photo, g.url}, true, ""},
		{"embedding, gRPC", "features", []string{"-protocol", "grpc", "-model", "features", "-body", photo, grpcAddr}, true, ""},
		{"embedding, v2, a detector's parameter", "features", []string{"-protocol", "v2", "-model", "features", "-param", "detections=true", "-body", photo, g.url}, false, "400=8"},
		{"embedding, gRPC, a detector's parameter", "features", []string{"-protocol", "grpc", "-model", "features", "-param", "score_threshold=0.5", "-body", photo, grpcAddr}, false, "INVALID_ARGUMENT=8"},
	} {
		match := fmt.Sprintf(`model="%s",version="1",code="200"`, tc.model)
		before := g.metric("gateway_requests_total", match)
		args := append([]string{"-q", "-n", "8", "-c", "2"}, tc.args...)
		out, err := exec.Command(loadtestBin(t), args...).CombinedOutput()
		m := re.FindStringSubmatch(string(out))
		if m == nil || m[1] != "8" || m[2] != "8" {
			t.Fatalf("%s: loadtest %q: %v\n%s", tc.name, args, err, out)
		}
		if !tc.ok {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 || m[3] != "0" || !strings.Contains(string(out), tc.code) {
				t.Fatalf("%s: loadtest %q: want every request refused (%s), exit 3: %v\n%s", tc.name, args, tc.code, err, out)
			}
			continue
		}
		if err != nil || m[3] != "8" {
			t.Fatalf("%s: loadtest %q: %v\n%s", tc.name, args, err, out)
		}
		if d := g.metric("gateway_requests_total", match) - before; d != 8 {
			t.Fatalf("%s: the gateway counted %v answers, want 8", tc.name, d)
		}
	}
}
