package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Models change without restarts: these tests reload, swap, unload and break models of the
// real binary under load and count every answer.

// versionRepo is a model repository directory (Triton's layout: <dir>/<version>/model.onnx)
// holding copies of the testdata models.
type versionRepo struct {
	t   *testing.T
	dir string
}

func newVersionRepo(t *testing.T) *versionRepo {
	r := &versionRepo{t: t, dir: filepath.Join(t.TempDir(), "m")}
	r.put("1", "scaled_means_nchw_x1.onnx")
	return r
}

// put writes testdata model src as version v (atomically: a rename).
func (r *versionRepo) put(v, src string) {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", src))
	if err != nil {
		r.t.Fatal(err)
	}
	r.putBytes(v, data)
}

func (r *versionRepo) putBytes(v string, data []byte) {
	r.t.Helper()
	dir := filepath.Join(r.dir, v)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".model.onnx.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "model.onnx")); err != nil {
		r.t.Fatal(err)
	}
}

// repoConfig is a config serving the repository as model "m" (raw 0..255 means, so that the
// x1 and x2 models answer 100 and 200 for a pixel of 100).
func repoConfig(t *testing.T, dir, batching, extra string) string {
	labels, _ := filepath.Abs("testdata/rgb_labels.txt")
	return fmt.Sprintf(`%smodels:
  - name: m
    path: %s
    labels: %s
    preprocess: {scale: raw}
    batching: %s
    runtime: {instances: 2}
`, extra, dir, labels, batching)
}

// colorPNG is a 64x48 PNG of one color.
func colorPNG(t *testing.T, c color.RGBA) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := range 48 {
		for x := range 64 {
			img.SetRGBA(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// inferMeans asks model m (optionally a version) for an image's outputs over the Open
// Inference Protocol and returns the status and the 3 values.
func (g *gateway) inferMeans(path string, img []byte) (int, []float32, string) {
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "input", "shape": []int{1}, "datatype": "BYTES",
		"data": []string{base64.StdEncoding.EncodeToString(img)}}}})
	resp, err := client.Post(g.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return -1, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct{ Outputs []struct{ Data []float32 } }
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != 3 {
		return resp.StatusCode, nil, string(b)
	}
	return 200, r.Outputs[0].Data, ""
}

// adminPost calls the admin API.
func (g *gateway) adminPost(path, body string, header ...string) (int, string) {
	g.mu.Lock()
	base := g.admin
	g.mu.Unlock()
	if base == "" {
		g.t.Fatal("the gateway logged no admin address")
	}
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// loadRecorder runs workers that infer in a loop and classify each answer by the model that
// gave it: scale 1 or 2 (or failure).
type loadRecorder struct {
	ok, x1, x2, failed atomic.Int64
	backwards          atomic.Int64 // a worker saw x1 after x2
	mu                 sync.Mutex
	failures           []string
	stop               atomic.Bool
	wg                 sync.WaitGroup
}

func startLoad(g *gateway, workers int, path string, img []byte) *loadRecorder {
	lr := &loadRecorder{}
	for range workers {
		lr.wg.Go(func() {
			sawX2 := false
			for !lr.stop.Load() {
				status, out, msg := g.inferMeans(path, img)
				if status != 200 {
					lr.failed.Add(1)
					lr.mu.Lock()
					if len(lr.failures) < 5 {
						lr.failures = append(lr.failures, fmt.Sprintf("%d %s", status, msg))
					}
					lr.mu.Unlock()
					continue
				}
				lr.ok.Add(1)
				switch {
				case out[0] > 150:
					lr.x2.Add(1)
					sawX2 = true
				default:
					lr.x1.Add(1)
					if sawX2 {
						lr.backwards.Add(1)
					}
				}
			}
		})
	}
	return lr
}

func (lr *loadRecorder) finish() {
	lr.stop.Store(true)
	lr.wg.Wait()
}

var pixel = color.RGBA{100, 50, 25, 255}

// TestReloadSwapsModelUnderLoad: under c=8, the model file is replaced and SIGHUP sent: no
// answer fails, and the answers switch to the new model's.
func TestReloadSwapsModelUnderLoad(t *testing.T) {
	ortLib(t)
	repo := newVersionRepo(t)
	g := startGateway(t, repoConfig(t, repo.dir, "{max_batch_size: 4, max_queue_delay: 2ms}", ""))
	img := colorPNG(t, pixel)
	if status, out, msg := g.inferMeans("/v2/models/m/infer", img); status != 200 || out[0] != 100 || out[1] != 50 {
		t.Fatalf("before: %d %v %s", status, out, msg)
	}
	lr := startLoad(g, 8, "/v2/models/m/infer", img)
	time.Sleep(time.Second)
	repo.put("1", "scaled_means_nchw_x2.onnx")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return lr.x2.Load() > 50 })
	lr.finish()
	t.Logf("answers: %d ok (%d by the old model, %d by the new), %d failed, %d went back to the old model", lr.ok.Load(), lr.x1.Load(), lr.x2.Load(), lr.failed.Load(), lr.backwards.Load())
	if lr.failed.Load() > 0 || lr.backwards.Load() > 0 || lr.x1.Load() == 0 {
		t.Fatalf("%d failed (%v), %d answered by the old model after the new one", lr.failed.Load(), lr.failures, lr.backwards.Load())
	}
	if v := g.metric("gateway_reloads_total", `result="ok"`); v < 2 { // the start and SIGHUP
		t.Errorf("gateway_reloads_total{ok} = %v", v)
	}
	if v := g.metric("gateway_model_instances", ""); v != 2 {
		t.Errorf("%v sessions alive after the swap, want the new model's 2", v)
	}
}

// TestUnloadAnswersQueued: requests queued on a model (a long window) when it is unloaded are
// all answered; then the model is gone (404) until it is loaded again.
func TestUnloadAnswersQueued(t *testing.T) {
	ortLib(t)
	repo := newVersionRepo(t)
	g := startGateway(t, repoConfig(t, repo.dir, "{max_batch_size: 64, max_queue_delay: 2s}", ""))
	img := colorPNG(t, pixel)
	const n = 10
	results := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], _, _ = g.inferMeans("/v2/models/m/infer", img) })
	}
	waitFor(t, func() bool { return g.metric("gateway_queue_length", `model="m"`) == n })
	// What the gateway cannot honour is refused before anything happens: Triton's load with a
	// configuration or model files of its own (a 200 told the client they were loaded while
	// the old model kept serving), and bodies that are not its JSON.
	for _, c := range []struct{ path, body string }{
		{"/v2/repository/models/m/load", `{"parameters":{"config":"{\"max_batch_size\":8}"}}`},
		{"/v2/repository/models/m/load", `{"parameters":{"file:1/model.onnx":"dGhpcyBpcyBub3QgYW4gb25ueCBtb2RlbA=="}}`},
		{"/v2/repository/models/m/load", `not json`},
		{"/v2/repository/models/m/unload", `{"parameters":{"unload_dependents":"yes"}}`},
		{"/v2/repository/models/m/unload", `{"parameters":{"bogus":1}}`},
		{"/v2/repository/models/m/unload", `[]`},
	} {
		if status, body := g.adminPost(c.path, c.body); status != 400 {
			t.Fatalf("%s %s: %d %s, want 400", c.path, c.body, status, body)
		}
	}
	if g.metric("gateway_queue_length", `model="m"`) != n {
		t.Fatalf("a refused repository request changed what is served")
	}
	if status, body := g.adminPost("/v2/repository/models/m/unload", `{"parameters":{"unload_dependents":false}}`); status != 200 {
		t.Fatalf("unload: %d %s", status, body)
	}
	if status, _, _ := g.inferMeans("/v2/models/m/infer", img); status != 404 {
		t.Fatalf("after unload: %d, want 404", status)
	}
	wg.Wait()
	for i, s := range results {
		if s != 200 {
			t.Fatalf("queued request %d: %d", i, s)
		}
	}
	_, idx := g.adminPost("/v2/repository/index", "")
	if !strings.Contains(idx, `"state":"UNAVAILABLE","reason":"unloaded"`) {
		t.Fatalf("index after unload: %s", idx)
	}
	waitFor(t, func() bool { return g.metric("gateway_model_instances", "") == 0 })
	if status, body := g.adminPost("/v2/repository/models/m/load", ""); status != 200 {
		t.Fatalf("load: %d %s", status, body)
	}
	if status, out, _ := g.inferMeans("/v2/models/m/infer", img); status != 200 || out[0] != 100 {
		t.Fatalf("after load: %d %v", status, out)
	}
	if status, body := g.adminPost("/v2/repository/models/nope/load", ""); status != 404 {
		t.Fatalf("loading an unknown model: %d %s", status, body)
	}
}

// TestBrokenModelKeepsOld: a new version that does not load leaves the old one serving, with
// the reason in the index, the API's answer and a metric; a repaired one then takes over.
func TestBrokenModelKeepsOld(t *testing.T) {
	ortLib(t)
	repo := newVersionRepo(t)
	g := startGateway(t, repoConfig(t, repo.dir, "{max_batch_size: 4, max_queue_delay: 2ms}", ""))
	img := colorPNG(t, pixel)
	lr := startLoad(g, 8, "/v2/models/m/infer", img)
	time.Sleep(500 * time.Millisecond)
	repo.putBytes("2", []byte("this is not an ONNX model"))
	status, body := g.adminPost("/v2/repository/reload", "")
	if status != 400 || !strings.Contains(body, "version 2") {
		t.Fatalf("reload with a broken model: %d %s", status, body)
	}
	time.Sleep(500 * time.Millisecond)
	if v := g.metric("gateway_model_load_failures_total", `model="m"`); v != 1 {
		t.Errorf("gateway_model_load_failures_total{m} = %v", v)
	}
	_, idx := g.adminPost("/v2/repository/index", "")
	var entries []struct{ Name, Version, State, Reason string }
	if err := json.Unmarshal([]byte(idx), &entries); err != nil {
		t.Fatalf("index: %s", idx)
	}
	states := map[string]string{}
	for _, e := range entries {
		states[e.Version] = e.State
		if e.Version == "2" && (e.State != "UNAVAILABLE" || !strings.Contains(e.Reason, "ort")) {
			t.Errorf("index entry of the broken version: %+v", e)
		}
	}
	if states["1"] != "READY" {
		t.Errorf("index: %s", idx)
	}
	// Repaired: version 2 loads, and (latest: 1) takes over from version 1.
	repo.put("2", "scaled_means_nchw_x2.onnx")
	if status, body := g.adminPost("/v2/repository/reload", ""); status != 200 {
		t.Fatalf("reload after the repair: %d %s", status, body)
	}
	waitFor(t, func() bool { return lr.x2.Load() > 20 })
	lr.finish()
	if lr.failed.Load() > 0 {
		t.Fatalf("%d requests failed (%v)", lr.failed.Load(), lr.failures)
	}
	if status, _, _ := g.inferMeans("/v2/models/m/versions/1/infer", img); status != 404 {
		t.Errorf("version 1 after version 2 took over: %d", status)
	}
}

// TestBrokenConfigIsReported: a configuration edited to invalid YAML, then to a label file that
// is gone, fails to reload; the served version keeps serving, and the failure shows: the index
// still lists what is served (it answered 500), a file gone counts as a load failure of its model
// (it was not counted), and once the configuration is repaired the index's reason clears (it
// kept the old failure).
func TestBrokenConfigIsReported(t *testing.T) {
	ortLib(t)
	repo := newVersionRepo(t)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	good := repoConfig(t, repo.dir, "{max_batch_size: 4, max_queue_delay: 2ms}", "")
	g := startGatewayFile(t, cfgPath, good)
	img := colorPNG(t, pixel)
	served := func(when string) {
		t.Helper()
		if status, _, _ := g.inferMeans("/v2/models/m/infer", img); status != 200 {
			t.Fatalf("%s: %d", when, status)
		}
	}
	index := func() string {
		t.Helper()
		status, idx := g.adminPost("/v2/repository/index", "")
		if status != 200 || !strings.Contains(idx, `"state":"READY"`) {
			t.Fatalf("index: %d %s", status, idx)
		}
		return idx
	}
	os.WriteFile(cfgPath, []byte("models: [\n"), 0o644)
	if status, body := g.adminPost("/v2/repository/reload", ""); status == 200 {
		t.Fatalf("reload of invalid YAML: %d %s", status, body)
	}
	if idx := index(); !strings.Contains(idx, "cannot be read") {
		t.Fatalf("index with an unreadable configuration: %s", idx)
	}
	served("invalid YAML")
	labels, _ := filepath.Abs("testdata/rgb_labels.txt")
	os.WriteFile(cfgPath, []byte(strings.Replace(good, labels, labels+".gone", 1)), 0o644)
	if status, body := g.adminPost("/v2/repository/reload", ""); status == 200 || !strings.Contains(body, "gone") {
		t.Fatalf("reload with a label file gone: %d %s", status, body)
	}
	if v := g.metric("gateway_model_load_failures_total", `model="m"`); v != 1 {
		t.Errorf("gateway_model_load_failures_total{m} = %v, want 1", v)
	}
	if idx := index(); !strings.Contains(idx, "gone") {
		t.Fatalf("index with a label file gone: %s", idx)
	}
	served("a label file gone")
	os.WriteFile(cfgPath, []byte(good+"  - name: other\n    path: /nonexistent/model.onnx\n    labels: "+labels+"\n"), 0o644)
	if status, body := g.adminPost("/v2/repository/reload", ""); status == 200 || !strings.Contains(body, "nonexistent") {
		t.Fatalf("reload with another model's file gone: %d %s", status, body)
	}
	if v := g.metric("gateway_model_load_failures_total", `model="other"`); v != 1 {
		t.Errorf("gateway_model_load_failures_total{other} = %v, want 1", v)
	}
	served("another model's file gone")
	os.WriteFile(cfgPath, []byte(good), 0o644)
	if status, body := g.adminPost("/v2/repository/reload", ""); status != 200 {
		t.Fatalf("reload after the repair: %d %s", status, body)
	}
	if idx := index(); strings.Contains(idx, "reason") {
		t.Fatalf("index after the repair: %s", idx)
	}
	served("repaired")
}

// TestReloadChangesBatchSize: a changed batching setting takes effect on reload, without a
// failed request.
func TestReloadChangesBatchSize(t *testing.T) {
	ortLib(t)
	repo := newVersionRepo(t)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	g := startGatewayFile(t, cfgPath, repoConfig(t, repo.dir, "{max_batch_size: 2, max_queue_delay: 5ms}", ""))
	img := colorPNG(t, pixel)
	lr := startLoad(g, 8, "/v2/models/m/infer", img)
	time.Sleep(500 * time.Millisecond)
	if v := g.metric("gateway_max_batch_size", `model="m"`); v != 2 {
		t.Fatalf("max batch size %v before", v)
	}
	// A window long enough for 8 clients to fill batches above 2 whatever the decode speed (a
	// race-instrumented server decodes an image in several milliseconds).
	os.WriteFile(cfgPath, []byte(repoConfig(t, repo.dir, "{max_batch_size: 8, max_queue_delay: 50ms}", "")), 0o644)
	g.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { return g.metric("gateway_max_batch_size", `model="m"`) == 8 })
	time.Sleep(500 * time.Millisecond)
	lr.finish()
	if lr.failed.Load() > 0 || lr.ok.Load() == 0 {
		t.Fatalf("%d ok, %d failed (%v)", lr.ok.Load(), lr.failed.Load(), lr.failures)
	}
	if le2 := g.metric("gateway_batch_size_bucket", `le="2"`); le2 >= g.metric("gateway_batch_size_count", `model="m"`) {
		t.Errorf("no batch above 2 after the reload")
	}
}

// TestManyReloadsLeakNothing: 50 reloads of the default model (a changed setting each time,
// so that every reload builds new sessions) leave no session, goroutine or memory behind.
func TestManyReloadsLeakNothing(t *testing.T) {
	ortLib(t)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := func(delay int) string {
		return "models:\n" + defaultModelYAML(t, fmt.Sprintf("{max_batch_size: 4, max_queue_delay: %dus}", 1000+delay))
	}
	g := startGatewayFile(t, cfgPath, cfg(0))
	jpeg := rocket(t)
	reload := func(i int) {
		os.WriteFile(cfgPath, []byte(cfg(i)), 0o644)
		if status, body := g.adminPost("/v2/repository/reload", ""); status != 200 {
			t.Fatalf("reload %d: %d %s", i, status, body)
		}
		if a := g.do("POST", "/predict/", "image/jpeg", jpeg); a.status != 200 {
			t.Fatalf("after reload %d: %d %s", i, a.status, a.body)
		}
	}
	pid := g.cmd.Process.Pid
	// RSS once the retired sessions are gone: the lowest of a few readings (the allocator
	// returns memory in steps).
	settled := func() int64 {
		waitFor(t, func() bool { return g.metric("gateway_model_instances", "") == 1 })
		low := int64(math.MaxInt64)
		for range 4 {
			time.Sleep(250 * time.Millisecond)
			r, _ := rss(pid)
			low = min(low, r)
		}
		return low
	}
	for i := 1; i <= 10; i++ { // warm: allocator arenas, caches
		reload(i)
	}
	rssBefore := settled()
	goBefore := g.metric("go_goroutines", "")
	for i := 11; i <= 60; i++ {
		reload(i)
	}
	rssAfter := settled()
	goAfter := g.metric("go_goroutines", "")
	t.Logf("50 reloads: RSS %s -> %s (%.2fx), goroutines %v -> %v", mib(rssBefore), mib(rssAfter), float64(rssAfter)/float64(rssBefore), goBefore, goAfter)
	if float64(rssAfter) > 1.2*float64(rssBefore) {
		// The allocators' footprint wanders: with no leak, settled RSS went up and down
		// between 72 and 92 MiB over 200 reloads of this config, and one CI run saw 1.25x
		// here. A leak grows without end: it grows again, by twice as much, over 100 more
		// reloads; the allocators' wander does not.
		for i := 61; i <= 160; i++ {
			reload(i)
		}
		rssLater := settled()
		t.Logf("100 more reloads: RSS %s -> %s", mib(rssAfter), mib(rssLater))
		if rssLater-rssAfter >= rssAfter-rssBefore {
			t.Errorf("RSS grew from %s to %s over 50 reloads and to %s over 100 more", mib(rssBefore), mib(rssAfter), mib(rssLater))
		}
	}
	if goAfter > goBefore+5 {
		t.Errorf("goroutines grew from %v to %v over 50 reloads", goBefore, goAfter)
	}
}

// TestAdminAPIAuth: the repository API is on the admin listener, not the public one; with a
// token, it needs the token everywhere and is also served on the public listener.
func TestAdminAPIAuth(t *testing.T) {
	ortLib(t)
	repo := newVersionRepo(t)
	g := startGateway(t, repoConfig(t, repo.dir, "{max_batch_size: 4}", ""))
	if a := g.do("POST", "/v2/repository/index", "", nil); a.status != 404 {
		t.Fatalf("public repository API without a token: %d %s", a.status, a.body)
	}
	if status, body := g.adminPost("/v2/repository/index", `{"ready": true}`); status != 200 || !strings.Contains(body, `"state":"READY"`) {
		t.Fatalf("admin index: %d %s", status, body)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte("s3cr3t-admin-token-0123456789\n"), 0o600)
	g2 := startGateway(t, repoConfig(t, repo.dir, "{max_batch_size: 4}", "server: {admin_token_file: "+tokFile+"}\n"))
	for _, c := range []struct {
		admin bool
		auth  string
		want  int
	}{
		{true, "", 401}, {true, "Bearer wrong-token-0123456789", 401}, {true, "Bearer s3cr3t-admin-token-0123456789", 200},
		{false, "", 401}, {false, "Bearer s3cr3t-admin-token-0123456789", 200},
	} {
		var status int
		if c.admin {
			status, _ = g2.adminPost("/v2/repository/index", "", "Authorization", c.auth)
		} else {
			status = g2.do("POST", "/v2/repository/index", "", nil, "Authorization", c.auth).status
		}
		if status != c.want {
			t.Errorf("admin=%v auth %q: %d, want %d", c.admin, c.auth, status, c.want)
		}
	}
}
