package main_test

import (
	"bufio"
	"bytes"
	"image"
	"image/color"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The gateway started the way KServe starts a predictor: a model directory and flags.

// startGatewayArgs starts bin/gateway with these arguments and extra environment variables,
// and waits for its "serving" log line.
func startGatewayArgs(t *testing.T, env []string, args ...string) *gateway {
	t.Helper()
	ortLib(t)
	cmd := exec.Command(gatewayBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gateway{t: t, cmd: cmd, logs: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg=serving addr=(\S+)`)
		for sc.Scan() {
			g.mu.Lock()
			g.logs.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		g.done <- cmd.Wait()
		close(addr)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-g.done
		}
	})
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("gateway exited before serving:\n%s", g.log())
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		if host != "0.0.0.0" && host != "::" {
			t.Fatalf("model-directory mode listens on %s, want all interfaces (0.0.0.0)", a)
		}
		g.url = "http://127.0.0.1:" + port
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not start in 60s:\n%s", g.log())
	}
	return g
}

// modelRepo lays out a KServe/Triton-style model directory in a temp folder: DIR/1/model.onnx
// with its labels, from the committed default model.
func modelRepo(t *testing.T, config string) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "models", "mobilenet_v3_small")
	dir := filepath.Join(t.TempDir(), "models")
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(src, "model.onnx"), filepath.Join(dir, "1", "model.onnx")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(src, "labels.txt"), filepath.Join(dir, "1", "labels.txt")); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := 0; y < 48; y++ {
		for x := 0; x < 64; x++ {
			img.Set(x, y, color.RGBA{uint8(4 * x), uint8(5 * y), 128, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestModelDirKServeFlags(t *testing.T) {
	dir := modelRepo(t, "")
	// As a KServe ServingRuntime passes them: --snake_case=value.
	g := startGatewayArgs(t, []string{"PORT=1"}, "--model_name=weather", "--model_dir="+dir, "--http_port=0")
	labels := strings.Fields(mustRead(t, filepath.Join(repoRoot(t), "models", "mobilenet_v3_small", "labels.txt")))
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/weather/ready"} {
		if a := g.do("GET", p, "", nil); a.status != 200 {
			t.Fatalf("GET %s: %d %s", p, a.status, a.body)
		}
	}
	img := testPNG(t)
	for _, path := range []string{"/predict/", "/models/weather/predict"} {
		a := g.do("POST", path, "image/png", img)
		if a.status != 200 {
			t.Fatalf("POST %s: %d %s", path, a.status, a.body)
		}
		if p := decodePrediction(t, a); !contains(labels, p.Prediction) {
			t.Fatalf("POST %s: prediction %q is not one of the labels %v", path, p.Prediction, labels)
		}
	}
	if a := g.do("GET", "/v2/models/mobilenet_v3_small/ready", "", nil); a.status != 404 {
		t.Fatalf("the model is served under -model_name only; the default name answered %d", a.status)
	}

	// The drain defaults of this mode (drain_delay 5s, shutdown_timeout 20s): after SIGTERM
	// readiness fails at once while predictions are still served, then the process exits 0.
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.do("GET", "/v2/health/ready", "", nil).status == 503 })
	if a := g.do("POST", "/predict/", "image/png", img); a.status != 200 {
		t.Fatalf("POST during drain_delay: %d %s", a.status, a.body)
	}
	g.exitsCleanly(t)
	if !strings.Contains(g.log(), "drain_delay=5s shutdown_timeout=20s") {
		t.Fatalf("model-directory mode should default to drain_delay 5s, shutdown_timeout 20s:\n%s", g.log())
	}
}

func TestModelDirPortEnvAndConfigFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// gateway.yaml in the directory: the main config's schema; the model's name, path and
	// labels come from the flags and the files found.
	dir := modelRepo(t, "server: {shutdown_timeout: 5s, drain_delay: 0s}\nmodels:\n  - batching: {max_batch_size: 2, max_queue_size: 7}\n")
	g := startGatewayArgs(t, []string{"PORT=" + strconv.Itoa(port)}, "-model-dir", dir, "-model-name", "m1")
	if !strings.HasSuffix(g.url, ":"+strconv.Itoa(port)) {
		t.Fatalf("with $PORT=%d and no port flag the gateway serves on %s", port, g.url)
	}
	if a := g.do("POST", "/models/m1/predict", "image/png", testPNG(t)); a.status != 200 {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	if c := g.metric("gateway_queue_capacity", `model="m1"`); c != 7 {
		t.Fatalf("gateway_queue_capacity = %v, want 7 from the directory's gateway.yaml", c)
	}
	// The file's drain settings win over the mode's defaults.
	g.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-g.done; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if !strings.Contains(g.log(), "drain_delay=0s shutdown_timeout=5s") {
		t.Fatalf("the directory's gateway.yaml should set the drain:\n%s", g.log())
	}
}

func TestModelDirErrors(t *testing.T) {
	ortLib(t)
	bin := gatewayBin(t)
	root := filepath.Join(repoRoot(t), "models", "mobilenet_v3_small")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PORT=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// The single *.onnx at the top of the directory, labels.json beside it; -check loads it.
	flat := t.TempDir()
	os.Symlink(filepath.Join(root, "model.onnx"), filepath.Join(flat, "weather.onnx"))
	labels, _ := os.ReadFile(filepath.Join(root, "labels.txt"))
	os.WriteFile(filepath.Join(flat, "labels.json"), []byte(`["`+strings.Join(strings.Fields(string(labels)), `","`)+`"]`), 0o644)
	if out, err := run("-model_dir", flat, "-model_name", "w", "-check"); err != nil || !strings.Contains(out, "ok: model w") {
		t.Fatalf("-check on a flat model directory: %v\n%s", err, out)
	}

	full := func(dir string) {
		os.Symlink(filepath.Join(root, "model.onnx"), filepath.Join(dir, "model.onnx"))
		os.Symlink(filepath.Join(root, "labels.txt"), filepath.Join(dir, "labels.txt"))
	}
	cases := []struct {
		name  string
		setup func(dir string)
		args  []string
		want  string
	}{
		{"unknown key in gateway.yaml", func(dir string) {
			full(dir)
			os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte("models:\n  - batching: {max_batch_sise: 2}\n"), 0o644)
		}, nil, "max_batch_sise"},
		{"two models in gateway.yaml", func(dir string) {
			full(dir)
			os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte("models: [{}, {}]\n"), 0o644)
		}, nil, "one model"},
		{"another name in gateway.yaml", func(dir string) {
			full(dir)
			os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte("models: [{name: other}]\n"), 0o644)
		}, nil, "-model_name"},
		{"several ONNX files", func(dir string) {
			os.Symlink(filepath.Join(root, "model.onnx"), filepath.Join(dir, "a.onnx"))
			os.Symlink(filepath.Join(root, "model.onnx"), filepath.Join(dir, "b.onnx"))
		}, nil, "several ONNX files"},
		{"no ONNX file", func(dir string) {}, nil, "no model.onnx"},
		{"-config beside -model_dir", full, []string{"-config", "x.yaml"}, "not both"},
		{"-listen beside -http_port", full, []string{"-listen", "127.0.0.1:0", "-http_port", "0"}, "not both"},
		{"bad -http_port", full, []string{"-http_port", "70000"}, "-http_port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(dir)
			out, err := run(append([]string{"-model_dir", dir, "-model_name", "m", "-check"}, c.args...)...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("want an error naming %q, got %v:\n%s", c.want, err, out)
			}
		})
	}
	// No label file: the classes are named by index, and the log says how to name them.
	bare := t.TempDir()
	os.Symlink(filepath.Join(root, "model.onnx"), filepath.Join(bare, "model.onnx"))
	if out, err := run("-model_dir", bare, "-model_name", "m", "-check"); err != nil || !strings.Contains(out, "labels=class indices") ||
		!strings.Contains(out, "no labels: answers name classes by index (set labels, or put labels.txt") {
		t.Fatalf("a model directory without labels: %v\n%s", err, out)
	}
	if out, err := run("-model_name", "m", "-check"); err == nil || !strings.Contains(out, "-model_dir") {
		t.Fatalf("-model_name alone: %v\n%s", err, out)
	}
}

// TestModelDirServesItsVersionNumber: a model directory whose model is in version folder 3/ serves
// version 3, as a configuration naming the directory does; it was served as version 1, and
// /v2/models/{name}/versions/3/ready answered 404.
func TestModelDirServesItsVersionNumber(t *testing.T) {
	dir := modelRepo(t, "")
	if err := os.Rename(filepath.Join(dir, "1"), filepath.Join(dir, "3")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "4"), 0o755) // a version being copied in: no model yet
	g := startGatewayArgs(t, []string{"PORT="}, "-model_name", "w", "-model_dir", dir, "-http_port", "0")
	if a := g.do("GET", "/v2/models/w/versions/3/ready", "", nil); a.status != 200 {
		t.Fatalf("version 3 ready: %d %s", a.status, a.body)
	}
	if a := g.do("GET", "/v2/models/w", "", nil); a.status != 200 || !strings.Contains(string(a.body), `"versions":["3"]`) {
		t.Fatalf("metadata: %d %s", a.status, a.body)
	}
}
