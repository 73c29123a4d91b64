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
