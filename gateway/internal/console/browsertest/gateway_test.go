package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateway is a bin/gateway process serving the pretrained MobileNetV2 of ../shared, as
// versions 1 and 2.
type gateway struct {
	public, admin string // base URLs
	model         string
	log           *syncBuffer
}

// shared returns the path of a file under the repository's ../shared, or skips the test
// when it is absent.
func shared(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "..", "shared", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: %s not found (the test data of ../shared: models and photos)", p)
	}
	return p
}

// startGateway runs $GATEWAY_BIN with a configuration of its own (server, when not empty, is
// its server section) on ports of its own, and waits until both HTTP listeners serve.
func startGateway(t *testing.T, server string) *gateway {
	t.Helper()
	bin := os.Getenv("GATEWAY_BIN")
	if bin == "" {
		t.Skip("skipping: GATEWAY_BIN is not set (make console-test sets it to bin/gateway)")
	}
	dir := shared(t, "models/mobilenetv2-12-int8")
	// Two versions of the model (Triton's layout, each a link to the same file): the page
	// tries the newest through the article's API and the other through the Open Inference
	// Protocol.
	repo := versions(t, filepath.Join(t.TempDir(), "repo"), filepath.Join(dir, "mobilenetv2-12-int8.onnx"))
	yaml := fmt.Sprintf(`%smodels:
  - name: mobilenetv2-12-int8
    path: %s
    version_policy: {all: true}
    labels: %s
    batching: {max_batch_size: 8, max_queue_delay: 3ms}
`, server, repo, filepath.Join(dir, "imagenet-simple-labels.json"))
	return launch(t, bin, yaml, "mobilenetv2-12-int8")
}

// versions lays out a Triton-style repository under dir: versions 1 and 2 of the model
// file, each a link to it, and returns its path.
func versions(t *testing.T, dir, model string) string {
	t.Helper()
	for _, v := range []string{"1", "2"} {
		if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(model, filepath.Join(dir, v, "model.onnx")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startTaskGateway runs $GATEWAY_BIN serving the other tasks, each as versions 1 and 2: the
// face detector of ../shared ("faces", with its authors' preprocessing and selection, as in
// docs/api.md) and, where Debian's python3 has onnx, MobileNetV2 cut at its pooled features
// ("features", the embedding model of docs/api.md; embedding is false without it).
func startTaskGateway(t *testing.T) (g *gateway, embedding bool) {
	t.Helper()
	bin := os.Getenv("GATEWAY_BIN")
	if bin == "" {
		t.Skip("skipping: GATEWAY_BIN is not set (make console-test sets it to bin/gateway)")
	}
	faces := shared(t, "models/ultraface-rfb-320/version-RFB-320.onnx")
	mobilenet := shared(t, "models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx")
	tmp := t.TempDir()
	labels := filepath.Join(tmp, "face-labels.txt")
	if err := os.WriteFile(labels, []byte("background\nface\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`models:
  - name: faces
    path: %s
    version_policy: {all: true}
    labels: %s
    task: detect
    preprocess: {mode: stretch, mean: [0.498, 0.498, 0.498], std: [0.502, 0.502, 0.502]}
    detect: {score_threshold: 0.7, iou_threshold: 0.3}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, versions(t, filepath.Join(tmp, "faces"), faces), labels)
	features := filepath.Join(tmp, "features.onnx")
	if err := cutMobileNet(mobilenet, features); err != nil {
		t.Logf("no embedding model: %v", err)
	} else {
		embedding = true
		yaml += fmt.Sprintf(`  - name: features
    path: %s
    version_policy: {all: true}
    batching: {max_batch_size: 2}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, versions(t, filepath.Join(tmp, "features"), features))
	}
	return launch(t, bin, yaml, "faces"), embedding
}

// cutMobileNet writes the shared MobileNetV2 cut at its pooled features (one output
// "features", [batch, 1280]) to dst with the repository's own script
// (internal/pilref/cut_mobilenetv2.py) and Debian's python3 with onnx.
func cutMobileNet(src, dst string) error {
	const python = "/usr/bin/python3"
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "internal", "pilref", "cut_mobilenetv2.py"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(python); err != nil {
		return err
	}
	in, err := json.Marshal(map[string]string{"src": src, "dst": dst})
	if err != nil {
		return err
	}
	cmd := exec.Command(python, script)
	cmd.Stdin = bytes.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", python, script, err, out)
	}
	return nil
}

// launch runs bin with the configuration yaml on ports of its own, and waits until both HTTP
// listeners serve; model is the one predict and load send to.
func launch(t *testing.T, bin, yaml, model string) *gateway {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfg, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-grpc-listen", "off")
	g := &gateway{model: model, log: &syncBuffer{}}
	stderr, w := io.Pipe()
	cmd.Stderr = w // copied by exec until the process ends (Wait waits for it)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); w.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.log.String())
		}
	})
	addrs := make(chan [2]string, 2)
	go func() {
		re := regexp.MustCompile(`msg=(admin|serving) addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			g.log.WriteString(line + "\n")
			if m := re.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
		}
	}()
	deadline := time.After(60 * time.Second)
	for g.public == "" || g.admin == "" {
		select {
		case a := <-addrs:
			if a[0] == "admin" {
				g.admin = "http://" + a[1]
			} else {
				g.public = "http://" + a[1]
			}
		case <-done:
			t.Fatalf("the gateway exited:\n%s", g.log.String())
		case <-deadline:
			t.Fatalf("the gateway did not start within 60 s:\n%s", g.log.String())
		}
	}
	return g
}

// predict sends a photo to the model over the public listener and returns the status.
func (g *gateway) predict(ctx context.Context, img []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", g.public+"/models/"+g.model+"/predict", bytes.NewReader(img))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "image/png")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// predictJSON posts a photo to a model's /predict over the public listener and decodes its
// answer into v.
func (g *gateway) predictJSON(t *testing.T, model string, img []byte, v any) {
	t.Helper()
	res, err := http.Post(g.public+"/models/"+model+"/predict", "application/octet-stream", bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("%s: %d %s (%v)", model, res.StatusCode, body, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %s: %v", model, body, err)
	}
}

// load sends n requests, c at a time, and returns how many were answered 200.
func (g *gateway) load(ctx context.Context, img []byte, n, c int) int {
	var mu sync.Mutex
	ok := 0
	next := make(chan struct{})
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for range next {
				if st, err := g.predict(ctx, img); err == nil && st == 200 {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		})
	}
	for range n {
		select {
		case next <- struct{}{}:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return ok
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	s.b.WriteString(v)
	s.mu.Unlock()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
