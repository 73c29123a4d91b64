package browsertest

import (
	"bufio"
	"bytes"
	"context"
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
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	for _, v := range []string{"1", "2"} {
		if err := os.MkdirAll(filepath.Join(repo, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "mobilenetv2-12-int8.onnx"), filepath.Join(repo, v, "model.onnx")); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(tmp, "gateway.yaml")
	yaml := fmt.Sprintf(`%smodels:
  - name: mobilenetv2-12-int8
    path: %s
    version_policy: {all: true}
    labels: %s
    batching: {max_batch_size: 8, max_queue_delay: 3ms}
`, server, repo, filepath.Join(dir, "imagenet-simple-labels.json"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfg, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-grpc-listen", "off")
	g := &gateway{model: "mobilenetv2-12-int8", log: &syncBuffer{}}
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
