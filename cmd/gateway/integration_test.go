package main_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
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

// These tests start the real gateway binary (GATEWAY_BIN, or one built here) with the real
// ONNX Runtime and the committed default model, on a loopback port, and talk HTTP to it.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func gatewayBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GATEWAY_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gateway-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gateway")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func sharedDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "..", "shared")
	if _, err := os.Stat(filepath.Join(dir, "seed", "rime_5868.json")); err != nil {
		t.Skip("../shared (test images, the article's payload, models) is not beside the checkout:", err)
	}
	return dir
}

func ortLib(t *testing.T) {
	t.Helper()
	if os.Getenv("ONNXRUNTIME_LIB") != "" {
		return
	}
	lib := filepath.Join(repoRoot(t), ".deps", "onnxruntime", "libonnxruntime.so")
	if _, err := os.Stat(lib); err != nil {
		t.Skip("ONNX Runtime is not installed (run scripts/setup-onnxruntime.sh or set ONNXRUNTIME_LIB):", err)
	}
	t.Setenv("ONNXRUNTIME_LIB", lib)
}

type gateway struct {
	t     *testing.T
	cmd   *exec.Cmd
	url   string
	admin string // the admin API's base URL (under mu)
	grpc  string // the gRPC API's address (under mu; set before url)
	logs  *bytes.Buffer
	mu    *sync.Mutex
	done  chan error
}

// defaultModelYAML is the committed default model's entry with batching overridden.
func defaultModelYAML(t *testing.T, batching string) string {
	root := repoRoot(t)
	return fmt.Sprintf(`  - name: mobilenet_v3_small
    path: %s/models/mobilenet_v3_small/model.onnx
    labels: %s/models/mobilenet_v3_small/labels.txt
    input: {name: input, width: 224, height: 224}
    output: {name: output}
    preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
    batching: %s
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, root, root, batching)
}

func startGateway(t *testing.T, config string) *gateway {
	t.Helper()
	return startGatewayFile(t, filepath.Join(t.TempDir(), "gateway.yaml"), config)
}

// startGatewayFile starts the gateway on a config written to path (which a test may change).
func startGatewayFile(t *testing.T, path, config string) *gateway {
	t.Helper()
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return launch(t, nil, "-config", path, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0")
}

// launch starts the gateway with these arguments and extra environment variables, and waits
// for its "serving" log line.
func launch(t *testing.T, env []string, args ...string) *gateway {
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
		reAdmin := regexp.MustCompile(`msg=admin addr=(\S+)`)
		reGRPC := regexp.MustCompile(`msg=grpc addr=(\S+)`)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.logs.WriteString(line + "\n")
			if m := reAdmin.FindStringSubmatch(line); m != nil {
				g.admin = "http://" + m[1]
			}
			if m := reGRPC.FindStringSubmatch(line); m != nil {
				g.grpc = m[1]
			}
			g.mu.Unlock()
			if m := re.FindStringSubmatch(line); m != nil {
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
		g.url = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not start in 60s:\n%s", g.log())
	}
	return g
}

func (g *gateway) log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (g *gateway) do(method, path, contentType string, body []byte, header ...string) answer {
	g.t.Helper()
	req, err := http.NewRequest(method, g.url+path, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

type prediction struct {
	Prediction string `json:"prediction"`
	TopK       []struct {
		Index int     `json:"index"`
		Label string  `json:"label"`
		Score float64 `json:"score"`
	} `json:"top_k"`
	Error string `json:"error"`
}

func decodePrediction(t *testing.T, a answer) prediction {
	t.Helper()
	var p prediction
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("status %d, body %q is not JSON: %v", a.status, a.body, err)
	}
	return p
}

// metric returns the sum of the samples of a metric name whose labels contain match.
func (g *gateway) metric(name, match string) float64 {
	g.t.Helper()
	a := g.do("GET", "/metrics", "", nil)
	if a.status != 200 {
		g.t.Fatalf("/metrics: %d %s", a.status, a.body)
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(string(a.body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if !strings.Contains(line[:sp], match) {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			g.t.Fatalf("bad metric line %q", line)
		}
		sum += v
		found = true
	}
	if !found {
		g.t.Fatalf("metric %s{%s} not found in /metrics", name, match)
	}
	return sum
}

type payload struct {
	name, contentType string
	body              []byte
}

// payloads: the article's JSON body and every photo in ../shared/images, raw and as JSON.
func payloads(t *testing.T) []payload {
	shared := sharedDir(t)
	article, err := os.ReadFile(filepath.Join(shared, "seed", "rime_5868.json"))
	if err != nil {
		t.Fatal(err)
	}
	ps := []payload{{"rime_5868.json", "application/json", article}}
	files, _ := filepath.Glob(filepath.Join(shared, "images", "*.*"))
	for _, f := range files {
		ext := strings.ToLower(filepath.Ext(f))
		if ext != ".jpg" && ext != ".jpeg" && ext != ".png" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ct := "image/jpeg"
		if ext == ".png" {
			ct = "image/png"
		}
		js, _ := json.Marshal(map[string]string{"image": base64.StdEncoding.EncodeToString(b)})
		ps = append(ps, payload{filepath.Base(f), ct, b}, payload{filepath.Base(f) + ".json", "application/json", js})
	}
	if len(ps) < 10 {
		t.Fatalf("only %d payloads found in %s", len(ps), shared)
	}
	return ps
}

func TestServeBatchesAndAnswersEveryRequest(t *testing.T) {
	ps := payloads(t)
	// A burst of 200 at once, every one of which is to be answered: the queue holds them by
	// count and by time (the shipped queue_target refuses what would wait longer than 100 ms).
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 32, max_queue_delay: 20ms, max_queue_size: 1024, queue_target: 1m}"))
	labels := strings.Fields(mustRead(t, filepath.Join(repoRoot(t), "models", "mobilenet_v3_small", "labels.txt")))

	if a := g.do("GET", "/", "", nil); a.status != 200 || !strings.Contains(string(a.body), `"status":"healthy"`) {
		t.Fatalf("GET /: %d %s", a.status, a.body)
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/mobilenet_v3_small/ready"} {
		if a := g.do("GET", p, "", nil); a.status != 200 {
			t.Fatalf("GET %s: %d %s", p, a.status, a.body)
		}
	}

	// Each payload alone: its scores when it runs in a batch of one.
	alone := map[string][]float64{}
	for _, p := range ps {
		a := g.do("POST", "/predict/?top_k=11", p.contentType, p.body)
		if a.status != 200 {
			t.Fatalf("%s alone: %d %s", p.name, a.status, a.body)
		}
		alone[p.name] = scoresByIndex(t, decodePrediction(t, a))
	}
	batchesBefore := g.metric("gateway_batches_total", `model="mobilenet_v3_small"`)
	itemsBefore := g.metric("gateway_batch_items_total", `model="mobilenet_v3_small"`)

	const n = 200
	var wg sync.WaitGroup
	results := make([]answer, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p := ps[i%len(ps)]
			path := "/predict/?top_k=11"
			if i%3 == 1 {
				path = "/models/mobilenet_v3_small/predict?top_k=11"
			}
			results[i] = g.do("POST", path, p.contentType, p.body)
		}()
	}
	close(start)
	wg.Wait()
	for i, a := range results {
		p := ps[i%len(ps)]
		if a.status != 200 {
			t.Fatalf("request %d (%s): %d %s", i, p.name, a.status, a.body)
		}
		pred := decodePrediction(t, a)
		if !contains(labels, pred.Prediction) || pred.Prediction != pred.TopK[0].Label {
			t.Fatalf("request %d (%s): prediction %q, top_k %v", i, p.name, pred.Prediction, pred.TopK)
		}
		got, want := scoresByIndex(t, pred), alone[p.name]
		for k := range want {
			if math.Abs(got[k]-want[k]) > 1e-4 {
				t.Fatalf("request %d (%s): score %d is %.6f in a batch, %.6f alone", i, p.name, k, got[k], want[k])
			}
		}
	}
	batches := g.metric("gateway_batches_total", `model="mobilenet_v3_small"`) - batchesBefore
	items := g.metric("gateway_batch_items_total", `model="mobilenet_v3_small"`) - itemsBefore
	if items != n {
		t.Fatalf("gateway_batch_items_total grew by %v, want %d", items, n)
	}
	if batches >= items {
		t.Fatalf("no batch larger than 1 formed: %v batches for %v items", batches, items)
	}
	t.Logf("%d concurrent requests ran in %v batches (mean batch size %.1f)", n, batches, items/batches)
	if le1 := g.metric("gateway_batch_size_bucket", `le="1"`); le1 >= g.metric("gateway_batch_size_count", "") {
		t.Fatalf("batch size histogram shows no batch above 1")
	}
	if ok := g.metric("gateway_requests_total", `code="200"`); ok < n+float64(len(ps)) {
		t.Fatalf("gateway_requests_total{code=200} = %v, want >= %d", ok, n+len(ps))
	}
	if d := g.metric("gateway_request_duration_seconds_count", `model="mobilenet_v3_small"`); d < n {
		t.Fatalf("request duration histogram counted %v requests", d)
	}
	for _, name := range []string{"gateway_queue_length", "gateway_queue_wait_seconds_count", "gateway_inference_duration_seconds_count",
		"gateway_preprocess_duration_seconds_count", "gateway_request_failures_total"} {
		g.metric(name, "")
	}
}

func scoresByIndex(t *testing.T, p prediction) []float64 {
	t.Helper()
	s := make([]float64, len(p.TopK))
	if len(p.TopK) == 0 {
		t.Fatalf("no top_k in %+v", p)
	}
	sum := 0.0
	for _, e := range p.TopK {
		s[e.Index] = e.Score
		sum += e.Score
	}
	if math.Abs(sum-1) > 1e-3 {
		t.Fatalf("top_k scores sum to %v, want 1", sum)
	}
	return s
}

func TestBadInputsGet4xxAndServerKeepsServing(t *testing.T) {
	shared := sharedDir(t)
	g := startGateway(t, "server: {max_body_bytes: 1MiB}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 8, max_queue_delay: 1ms}"))
	bad, _ := filepath.Glob(filepath.Join(shared, "images", "bad", "*"))
	if len(bad) < 4 {
		t.Fatalf("only %d files in images/bad", len(bad))
	}
	jpeg, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_rocket.jpg"))
	type tc struct {
		name, path, ct string
		body           []byte
		want           int
	}
	cases := []tc{
		{"malformed json", "/predict/", "application/json", []byte(`{"image": "abc`), 400},
		{"missing field", "/predict/", "application/json", []byte(`{"img": "abc"}`), 400},
		{"bad base64", "/predict/", "application/json", []byte(`{"image": "!!!!"}`), 400},
		{"not an image in json", "/predict/", "application/json", []byte(`{"image": "aGVsbG8gd29ybGQ="}`), 415},
		{"unsupported type", "/predict/", "text/plain", []byte("hello"), 415},
		{"unknown model", "/models/nope/predict", "image/jpeg", jpeg, 404},
		{"unknown v2 model", "/v2/models/nope/infer", "application/json", []byte(`{}`), 404},
		{"bad top_k", "/predict/?top_k=x", "image/jpeg", jpeg, 400},
		{"bad timeout", "/predict/?timeout=-1", "image/jpeg", jpeg, 400},
		{"NaN timeout", "/predict/?timeout=NaN", "image/jpeg", jpeg, 400},
		{"v2 too many samples", "/v2/models/mobilenet_v3_small/infer", "application/json",
			[]byte(`{"inputs":[{"name":"input","shape":[1024],"datatype":"x","data":[]}]}`), 400},
		{"v2 bad datatype", "/v2/models/mobilenet_v3_small/infer", "application/json",
			[]byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"INT64","data":[1]}]}`), 400},
		{"v2 short FP32", "/v2/models/mobilenet_v3_small/infer", "application/json",
			[]byte(`{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","data":[1,2,3]}]}`), 400},
		{"get predict", "/predict/", "", nil, 405},
		{"empty raw body", "/predict/", "image/jpeg", nil, 400},
	}
	for _, f := range bad {
		b, _ := os.ReadFile(f)
		cases = append(cases, tc{"bad/" + filepath.Base(f), "/predict/", "image/jpeg", b, 0})
		js, _ := json.Marshal(map[string]string{"image": base64.StdEncoding.EncodeToString(b)})
		cases = append(cases, tc{"bad/" + filepath.Base(f) + " as json", "/predict/", "application/json", js, 0})
	}
	for _, c := range cases {
		method := "POST"
		if c.want == 405 {
			method = "GET"
		}
		a := g.do(method, c.path, c.ct, c.body)
		if a.status < 400 || a.status > 499 || (c.want != 0 && a.status != c.want) {
			t.Errorf("%s: status %d (%s), want %d", c.name, a.status, a.body, c.want)
			continue
		}
		var e struct{ Error string }
		if json.Unmarshal(a.body, &e) != nil || e.Error == "" {
			t.Errorf("%s: body %q is not a JSON error", c.name, a.body)
		}
		t.Logf("%s: %d %s", c.name, a.status, e.Error)
		// The server keeps serving after every bad input.
		if ok := g.do("POST", "/predict/", "image/jpeg", jpeg); ok.status != 200 {
			t.Fatalf("after %s: a good request got %d %s", c.name, ok.status, ok.body)
		}
	}
	// A body declared larger than max_body_bytes is refused from its headers, before it is read.
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /predict/ HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n", 2<<20)
	conn.Write(jpeg)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(body), "max_body_bytes") {
		t.Fatalf("too large: %d %s", resp.StatusCode, body)
	}
	if ok := g.do("POST", "/predict/", "image/jpeg", jpeg); ok.status != 200 {
		t.Fatalf("after a too large body: %d %s", ok.status, ok.body)
	}
	if v := g.metric("gateway_request_failures_total", `reason="bad_input"`); v < float64(len(cases)-3) {
		t.Errorf("gateway_request_failures_total{reason=bad_input} = %v, want >= %d", v, len(cases)-3)
	}
}

func TestQueueFullAndTimeout(t *testing.T) {
	shared := sharedDir(t)
	jpeg, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_rocket.jpg"))
	// A long window keeps queued requests waiting, so the queue's capacity of 2 is reached.
	g := startGateway(t, "server: {queue_full_status: 429}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 8, max_queue_delay: 1500ms, max_queue_size: 2}"))
	var wg sync.WaitGroup
	results := make([]answer, 2)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = g.do("POST", "/predict/", "image/jpeg", jpeg) }()
	}
	waitFor(t, func() bool { return g.metric("gateway_queue_length", "") == 2 })
	full := g.do("POST", "/predict/", "image/jpeg", jpeg)
	if full.status != 429 || full.header.Get("Retry-After") == "" {
		t.Fatalf("full queue: %d %s, Retry-After %q", full.status, full.body, full.header.Get("Retry-After"))
	}
	wg.Wait()
	for i, a := range results {
		if a.status != 200 {
			t.Fatalf("queued request %d: %d %s", i, a.status, a.body)
		}
	}
	// A request whose deadline is shorter than the window is answered 504, not run. The
	// deadline leaves room for the decode admission's prediction with its headroom (half more
	// than predicted; a race-instrumented server predicts ~90 ms), so that the request is
	// admitted and expires in the batcher's queue.
	before := g.metric("gateway_batch_items_total", "")
	a := g.do("POST", "/predict/", "image/jpeg", jpeg, "X-Request-Timeout", "500")
	if a.status != 504 {
		t.Fatalf("short deadline: %d %s", a.status, a.body)
	}
	if after := g.metric("gateway_batch_items_total", ""); after != before {
		t.Fatalf("an expired request was run: items %v -> %v", before, after)
	}
	if v := g.metric("gateway_request_failures_total", `reason="timeout"`); v != 1 {
		t.Fatalf("timeout failures = %v", v)
	}
}

// exitsCleanly waits (30 s at most) for the gateway, signalled to drain, to exit 0.
func (g *gateway) exitsCleanly(t *testing.T) {
	t.Helper()
	select {
	case err := <-g.done:
		if err != nil {
			t.Fatalf("gateway exited with %v:\n%s", err, g.log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not exit 30 s after its signal:\n%s", g.log())
	}
}

func TestGracefulDrainAnswersAcceptedRequests(t *testing.T) {
	shared := sharedDir(t)
	jpeg, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_coffee.png"))
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 64, max_queue_delay: 10s}"))
	const n = 12
	var wg sync.WaitGroup
	results := make([]answer, n)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = g.do("POST", "/predict/", "image/png", jpeg) }()
	}
	waitFor(t, func() bool { return g.metric("gateway_queue_length", "") == n })
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, a := range results {
		if a.status != 200 {
			t.Fatalf("request %d accepted before SIGTERM: %d %s", i, a.status, a.body)
		}
	}
	g.exitsCleanly(t)
	if !strings.Contains(g.log(), "msg=stopped") {
		t.Fatalf("no stop log line:\n%s", g.log())
	}
}

// TestDrainSurvivesSignalsAndItsTimeout: signals during a drain (SIGHUP, a second SIGTERM,
// SIGINT) are logged and ignored, and a drain that runs past shutdown_timeout answers what it
// holds 503 and exits 0. A second signal used to kill the process with its requests unanswered,
// and a drain past its timeout exited 1.
func TestDrainSurvivesSignalsAndItsTimeout(t *testing.T) {
	shared := sharedDir(t)
	png, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_coffee.png"))
	g := startGateway(t, "server: {drain_delay: 500ms, shutdown_timeout: 1s}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 64, max_queue_delay: 20s}"))
	const n = 4
	var wg sync.WaitGroup
	results := make([]answer, n)
	for i := range results {
		wg.Go(func() { results[i] = g.do("POST", "/predict/", "image/png", png) })
	}
	waitFor(t, func() bool { return g.metric("gateway_queue_length", "") == n })
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		if err := g.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	for i, a := range results {
		if a.status != 503 || !strings.Contains(string(a.body), "shutting down") && !strings.Contains(string(a.body), "draining") {
			t.Fatalf("request %d, queued past shutdown_timeout: %d %s; want 503 draining", i, a.status, a.body)
		}
	}
	g.exitsCleanly(t)
	if strings.Count(g.log(), "signal ignored") != 3 {
		t.Fatalf("want 3 ignored signals logged:\n%s", g.log())
	}
}

func TestPretrainedImageNetModel(t *testing.T) {
	shared := sharedDir(t)
	dir := filepath.Join(shared, "models", "mobilenetv2-12-int8")
	g := startGateway(t, fmt.Sprintf(`models:
  - name: mobilenetv2
    path: %s/mobilenetv2-12-int8.onnx
    labels: %s/imagenet-simple-labels.json
    batching: {max_batch_size: 8, max_queue_delay: 2ms}
`, dir, dir))
	coffee, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_coffee.png"))
	p := decodePrediction(t, g.do("POST", "/predict/?top_k=3", "image/png", coffee))
	if p.Prediction != "espresso" {
		t.Fatalf("coffee: %+v", p)
	}
	cat, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_chelsea_cat.png"))
	p = decodePrediction(t, g.do("POST", "/models/mobilenetv2/predict?top_k=3", "image/png", cat))
	found := false
	for _, e := range p.TopK {
		if e.Index >= 281 && e.Index <= 285 { // tabby, tiger cat, Persian, Siamese, Egyptian Mau
			found = true
		}
	}
	if !found {
		t.Fatalf("chelsea cat: no cat class in the top 3: %+v", p)
	}
	// The Open Inference Protocol with an encoded image.
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{
		"name": "input", "shape": []int{1}, "datatype": "BYTES", "data": []string{base64.StdEncoding.EncodeToString(coffee)}}}})
	a := g.do("POST", "/v2/models/mobilenetv2/infer", "application/json", body)
	var r struct {
		Outputs []struct {
			Shape []int
			Data  []float32
		}
	}
	if a.status != 200 || json.Unmarshal(a.body, &r) != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 1000 {
		t.Fatalf("v2 infer: %d %.300s", a.status, a.body)
	}
	best := 0
	for i, v := range r.Outputs[0].Data {
		if v > r.Outputs[0].Data[best] {
			best = i
		}
	}
	if best != 967 {
		t.Fatalf("v2 infer: top-1 %d, want 967 (espresso)", best)
	}
	if a := g.do("GET", "/v2/models/mobilenetv2", "", nil); a.status != 200 || !strings.Contains(string(a.body), `"platform":"onnxruntime_onnx"`) {
		t.Fatalf("v2 metadata: %d %s", a.status, a.body)
	}
}

func TestCheckFlag(t *testing.T) {
	ortLib(t)
	bin := gatewayBin(t)
	out, err := exec.Command(bin, "-config", filepath.Join(repoRoot(t), "configs", "gateway.yaml"), "-check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is valid") {
		t.Fatalf("-check on the shipped config: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("models:\n  - name: m\n    path: /nonexistent.onnx\n    labels: /nonexistent.txt\n    batching: {max_batch_sise: 2}\n"), 0o644)
	out, err = exec.Command(bin, "-config", bad, "-check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "max_batch_sise") {
		t.Fatalf("-check on a bad config: %v\n%s", err, out)
	}
	// The model is checked against its configuration as the server would: 3 labels for 11 classes.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "labels.txt"), []byte("a\nb\nc\n"), 0o644)
	mismatch := filepath.Join(dir, "mismatch.yaml")
	os.WriteFile(mismatch, []byte("models:\n  - name: m\n    path: "+filepath.Join(repoRoot(t), "models", "mobilenet_v3_small", "model.onnx")+"\n    labels: labels.txt\n"), 0o644)
	out, err = exec.Command(bin, "-config", mismatch, "-check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "3 labels") || !strings.Contains(string(out), "models[0] (m).labels: ") {
		t.Fatalf("-check with 3 labels for 11 classes: %v\n%s", err, out)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	os.WriteFile(missing, []byte("models:\n  - name: m\n    path: /nonexistent.onnx\n    labels: "+filepath.Join(repoRoot(t), "models", "mobilenet_v3_small", "labels.txt")+"\n"), 0o644)
	out, err = exec.Command(bin, "-config", missing, "-check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nonexistent.onnx") {
		t.Fatalf("-check with a missing model: %v\n%s", err, out)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestClientGoneIsDroppedBeforeRunning(t *testing.T) {
	shared := sharedDir(t)
	jpeg, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_rocket.jpg"))
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 8, max_queue_delay: 3s}"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /predict/ HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n", len(jpeg))
	conn.Write(jpeg)
	waitFor(t, func() bool { return g.metric("gateway_queue_length", "") == 1 })
	conn.Close()
	waitFor(t, func() bool { return g.metric("gateway_queue_dropped_total", `reason="canceled"`) == 1 })
	if v := g.metric("gateway_batch_items_total", ""); v != 0 {
		t.Fatalf("the gone client's request ran: %v items", v)
	}
	waitFor(t, func() bool { return g.metric("gateway_request_failures_total", `reason="canceled"`) == 1 })
}

// NHWC and uint8 inputs, with tiny models that answer each image's per-channel means.
func TestInputLayoutsAndTypes(t *testing.T) {
	shared := sharedDir(t)
	td, _ := filepath.Abs("testdata")
	g := startGateway(t, fmt.Sprintf(`models:
  - name: u8
    path: %[1]s/channel_means_nhwc_u8.onnx
    labels: %[1]s/rgb_labels.txt
    input: {layout: NHWC, type: uint8}
  - name: raw
    path: %[1]s/channel_means_nhwc_f32.onnx
    labels: %[1]s/rgb_labels.txt
    input: {layout: NHWC}
    preprocess: {scale: raw}
  - name: norm
    path: %[1]s/channel_means_nhwc_f32.onnx
    labels: %[1]s/rgb_labels.txt
    input: {layout: NHWC, type: float32}
`, td))
	var red bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 300, 260))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+3] = 255, 255
	}
	png.Encode(&red, img)
	for _, m := range []string{"u8", "raw"} {
		p := decodePrediction(t, g.do("POST", "/models/"+m+"/predict", "image/png", red.Bytes()))
		if p.Prediction != "red" {
			t.Fatalf("%s: a red image is %+v", m, p)
		}
	}
	coffee, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_coffee.png"))
	infer := func(model string) []float32 {
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{
			"name": "input", "shape": []int{1}, "datatype": "BYTES", "data": []string{base64.StdEncoding.EncodeToString(coffee)}}}})
		a := g.do("POST", "/v2/models/"+model+"/infer", "application/json", body)
		var r struct{ Outputs []struct{ Data []float32 } }
		if a.status != 200 || json.Unmarshal(a.body, &r) != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 3 {
			t.Fatalf("%s infer: %d %s", model, a.status, a.body)
		}
		return r.Outputs[0].Data
	}
	u8, raw, norm := infer("u8"), infer("raw"), infer("norm")
	mean, std := []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}
	for c := 0; c < 3; c++ {
		if math.Abs(float64(u8[c]-raw[c])) > 1e-3 {
			t.Fatalf("channel %d: uint8 model mean %v, float raw model mean %v", c, u8[c], raw[c])
		}
		if want := (u8[c]/255 - mean[c]) / std[c]; math.Abs(float64(norm[c]-want)) > 1e-3 {
			t.Fatalf("channel %d: normalized mean %v, want %v", c, norm[c], want)
		}
	}
	// The v2 UINT8 tensor path: an all-7 image has means of 7.
	data := make([]int, 224*224*3)
	for i := range data {
		data[i] = 7
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1, 224, 224, 3}, "datatype": "UINT8", "data": data}}})
	a := g.do("POST", "/v2/models/u8/infer", "application/json", body)
	if a.status != 200 || !strings.Contains(string(a.body), `"data":[7,7,7]`) {
		t.Fatalf("UINT8 tensor infer: %d %.200s", a.status, a.body)
	}
	// A model given the wrong input.type is refused at load.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(fmt.Sprintf("models:\n  - name: m\n    path: %s/channel_means_nhwc_u8.onnx\n    labels: %s/rgb_labels.txt\n    input: {layout: NHWC, type: float32}\n", td, td)), 0o644)
	out, err := exec.Command(gatewayBin(t), "-config", bad, "-check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "input.type is float32") {
		t.Fatalf("-check with a wrong input.type: %v\n%s", err, out)
	}
}
