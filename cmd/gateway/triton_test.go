package main_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/imagegate/imagegate/api/inference"
)

// Triton model repositories served with -model-repository: the ImageNet classifier of
// ../shared configured by a config.pbtxt, the committed weather model without one, read back
// by a client built from Triton's schema, followed in poll mode and loaded in explicit mode.

// imagenetPbtxt configures the shared classifier as a Triton user would: labels, dynamic
// batching, instances, and a field the gateway does not honour (model_warmup).
const imagenetPbtxt = `name: "%s"
platform: "onnxruntime_onnx"
max_batch_size: %d
input [ { name: "input" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "imagenet.json" } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 default_queue_policy { max_queue_size: 64 } }
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { latest { num_versions: 1 } }
model_warmup [ { name: "zeros" batch_size: 1 inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] zero_data: true } } } ]
parameters { key: "preprocess.resize" value { string_value: "256" } }
`

// link makes new a symbolic link to old, with the folders it needs (the shared data is read
// where it lies, never copied).
func link(t *testing.T, old, new string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(new), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(old, new); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// imagenetFolder lays out the shared classifier as Triton model name under repo, with its
// config.pbtxt, at version.
func imagenetFolder(t *testing.T, repo, name string, version, maxBatch int) {
	shared := filepath.Join(sharedDir(t), "models", "mobilenetv2-12-int8")
	link(t, filepath.Join(shared, "mobilenetv2-12-int8.onnx"), filepath.Join(repo, name, fmt.Sprint(version), "model.onnx"))
	link(t, filepath.Join(shared, "imagenet-simple-labels.json"), filepath.Join(repo, name, "imagenet.json"))
	writeFile(t, filepath.Join(repo, name, "config.pbtxt"), fmt.Sprintf(imagenetPbtxt, name, maxBatch))
}

// weatherFolder lays out the committed model as a Triton model without a config.pbtxt.
func weatherFolder(t *testing.T, repo, name string) {
	m := filepath.Join(repoRoot(t), "models", "mobilenet_v3_small")
	link(t, filepath.Join(m, "model.onnx"), filepath.Join(repo, name, "1", "model.onnx"))
	link(t, filepath.Join(m, "labels.txt"), filepath.Join(repo, name, "labels.txt"))
}

// descriptorSet writes Triton's schema (model_config.proto and grpc_service.proto, as the
// gateway's generated code holds them) as a FileDescriptorSet, for the Python client.
func descriptorSet(t *testing.T) string {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(inference.File_model_config_proto),
		protodesc.ToFileDescriptorProto(inference.File_grpc_service_proto),
	}}
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "triton.desc")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// tritonClient reads a model's configuration back over gRPC and HTTP with Debian's Python
// (grpcio, protobuf), as tritonclient does, checking it against pbtxt when given; it returns
// the configuration as protobuf's JSON.
func tritonClient(t *testing.T, g *gateway, model, pbtxt string) map[string]any {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import grpc, google.protobuf").Run(); err != nil {
		t.Skip("Debian's /usr/bin/python3 with grpcio and protobuf (python3-grpcio) is needed for Triton's client:", err)
	}
	g.mu.Lock()
	addr := g.grpc
	g.mu.Unlock()
	args := []string{"testdata/triton_client.py", descriptorSet(t), g.url, addr, model}
	if pbtxt != "" {
		args = append(args, pbtxt)
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("Triton's client on %s: %v\n%s", model, err, out)
	}
	var c map[string]any
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("client output: %v\n%s", err, out)
	}
	return c
}

func startRepository(t *testing.T, args ...string) *gateway {
	t.Helper()
	return launch(t, nil, append(args, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-grpc-listen", "127.0.0.1:0")...)
}

// TestTritonRepositoryServedAsTriton: a repository of two models, one with a config.pbtxt
// (label_filename, dynamic_batching, instance_group), one without, is served with
// -model-repository alone; Triton's client reads back the configuration each describes; the
// field the gateway does not honour is named once.
func TestTritonRepositoryServedAsTriton(t *testing.T) {
	repo := t.TempDir()
	imagenetFolder(t, repo, "imagenet", 1, 8)
	weatherFolder(t, repo, "weather")
	g := startRepository(t, "--model-repository", repo)
	coffee := sharedPhotos(t, "skimage_coffee.png")[0]
	for _, path := range []string{"/models/imagenet/predict", "/predict/"} { // the first folder is the default model
		if p := decodePrediction(t, g.do("POST", path, "", coffee)); p.Prediction != "espresso" {
			t.Errorf("%s: %+v", path, p)
		}
	}
	weatherLabels := strings.Fields(mustRead(t, filepath.Join(repoRoot(t), "models", "mobilenet_v3_small", "labels.txt")))
	if p := decodePrediction(t, g.do("POST", "/models/weather/predict", "", coffee)); !slices.Contains(weatherLabels, p.Prediction) {
		t.Errorf("weather: %+v", p)
	}
	// The configuration as read, over gRPC and HTTP, field for field.
	c := tritonClient(t, g, "imagenet", filepath.Join(repo, "imagenet", "config.pbtxt"))
	if c["backend"] != "onnxruntime" || c["max_batch_size"] != 8.0 {
		t.Errorf("imagenet's configuration: %v", c)
	}
	// Without a config.pbtxt: what the model tells, completed as Triton's auto-complete does.
	// max_batch_size is what auto chose on this machine, as the start-up log says.
	chosen := regexp.MustCompile(`msg="batch size chosen" model=weather version=1 max_batch_size=(\d+) `).FindStringSubmatch(g.log())
	if chosen == nil {
		t.Fatalf("no batch size chosen for weather in the log:\n%s", g.log())
	}
	w := tritonClient(t, g, "weather", "")
	b, _ := json.Marshal(w)
	for _, s := range []string{`"platform":"onnxruntime_onnx"`, `"dims":["3","224","224"]`, `"format":"FORMAT_NCHW"`, `"dims":["11"]`, `"max_batch_size":` + chosen[1] + `,`, `"count":1`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("weather's configuration %s: no %s", b, s)
		}
	}
	// The settings' sources, and one warning naming the field not honoured, also after a reload.
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(g.log(), `msg=reloaded signal=SIGHUP`) })
	log := g.log()
	if n := strings.Count(log, "config.pbtxt fields not honoured"); n != 1 || !strings.Contains(log, "model imagenet: config.pbtxt fields not honoured: model_warmup (") {
		t.Errorf("%d warnings:\n%s", n, log)
	}
	if !strings.Contains(log, `from_config_pbtxt="input.name=input, input.type=float32, input.layout=NCHW, input.width=224, input.height=224, batching.max_batch_size=8`) {
		t.Errorf("no settings from config.pbtxt in the log:\n%s", log)
	}
	if status, body := g.adminPost("/v2/repository/index", ""); status != 200 || !strings.Contains(body, `{"name":"imagenet","version":"1","state":"READY"}`) ||
		!strings.Contains(body, `{"name":"weather","version":"1","state":"READY"}`) {
		t.Errorf("index: %d %s", status, body)
	}
}

// TestTritonRepositoryRefusals: a config.pbtxt that names another platform, or (strict) a
// field not honoured, stops the start naming the model and the field.
func TestTritonRepositoryRefusals(t *testing.T) {
	ortLib(t)
	for _, c := range []struct {
		name, pbtxt string
		args        []string
		want        string
	}{
		{"platform", `platform: "tensorrt_plan"`, nil, `model tensorrt: ` + "%s" + `: platform: "tensorrt_plan" is not served`},
		{"strict", `max_batch_size: 2 dynamic_batching {} response_cache { enable: true }`, []string{"--repository-strict"}, `fields the gateway does not honour (strict): response_cache (answers are not cached)`},
		{"dims", `max_batch_size: 2 output [{ name: "output" dims: [ 10 ] }]`, nil, `dims are [10], but the model's output has 11 classes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := t.TempDir()
			weatherFolder(t, repo, "tensorrt")
			pbtxt := filepath.Join(repo, "tensorrt", "config.pbtxt")
			writeFile(t, pbtxt, c.pbtxt)
			out, err := exec.Command(gatewayBin(t), append([]string{"--model-repository", repo, "-check"}, c.args...)...).CombinedOutput()
			want := c.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, pbtxt)
			}
			if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "tensorrt") {
				t.Errorf("%v, want %q:\n%s", err, want, out)
			}
		})
	}
}

// inferVersion sends a photo to model over the Open Inference Protocol and returns the
// version that answered ("" and the error when it failed).
func inferVersion(g *gateway, model string, body []byte) (string, string) {
	a := g.do("POST", "/v2/models/"+model+"/infer", "application/json", body)
	var r struct {
		ModelVersion string `json:"model_version"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &r) != nil {
		return "", fmt.Sprintf("%d %s", a.status, a.body)
	}
	return r.ModelVersion, ""
}

func photoRequest(img []byte) []byte {
	return []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + base64.StdEncoding.EncodeToString(img) + `"]}]}`)
}

// TestTritonPollFollowsTheRepository: in poll mode a new version folder copied in is served
// within the poll period (the next poll loads it, then the old version retires) while a
// closed loop of requests sees no error; a changed config.pbtxt is reloaded, a new model
// folder loaded and a removed one unloaded.
func TestTritonPollFollowsTheRepository(t *testing.T) {
	repo := t.TempDir()
	imagenetFolder(t, repo, "m", 1, 4)
	const poll = time.Second
	g := startRepository(t, "--model-repository", repo, "--model-control-mode", "poll", "--repository-poll-secs", "1")
	body := photoRequest(sharedPhotos(t, "skimage_coffee.png")[0])

	var sent, failed atomic.Int64
	var firstV2 atomic.Int64 // unix nanoseconds of the first answer by version 2
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // a closed loop: each client sends its next request once answered
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, e := inferVersion(g, "m", body)
				sent.Add(1)
				switch {
				case e != "":
					failed.Add(1)
					mu.Lock()
					failures = append(failures, e)
					mu.Unlock()
				case v == "2":
					firstV2.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		})
	}
	time.Sleep(poll) // the loop runs on version 1
	// Copied in as a user should, beside the model and renamed into place in one step (a
	// folder still being written is loaded at the next poll after it is complete).
	staged := filepath.Join(repo, "m", ".incoming")
	link(t, filepath.Join(sharedDir(t), "models", "mobilenetv2-12-int8", "mobilenetv2-12-int8.onnx"), filepath.Join(staged, "model.onnx"))
	copied := time.Now()
	if err := os.Rename(staged, filepath.Join(repo, "m", "2")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(poll + 30*time.Second) // the poll, then a load and a warm-up on a shared machine
	for firstV2.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if firstV2.Load() == 0 {
		t.Fatalf("version 2 not served:\n%s", g.log())
	}
	t.Logf("version 2 answered %v after it was copied in (poll period %v)", time.Unix(0, firstV2.Load()).Sub(copied).Round(time.Millisecond), poll)
	waitFor(t, func() bool {
		a := g.do("GET", "/v2/models/m", "", nil)
		return a.status == 200 && strings.Contains(string(a.body), `"versions":["2"]`)
	})
	time.Sleep(poll / 2)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || sent.Load() < 8 {
		t.Fatalf("%d of %d requests failed during the change: %q", failed.Load(), sent.Load(), failures)
	}
	if !strings.Contains(g.log(), `msg=reloaded by=repository.poll`) {
		t.Errorf("no reload by the poll:\n%s", g.log())
	}

	// A changed config.pbtxt is reloaded: .../config answers the new one.
	writeFile(t, filepath.Join(repo, "m", "config.pbtxt"), fmt.Sprintf(imagenetPbtxt, "m", 6))
	waitFor(t, func() bool {
		a := g.do("GET", "/v2/models/m/config", "", nil)
		return strings.Contains(string(a.body), `"max_batch_size":6`)
	})
	// A model folder added is loaded; removed, it is unloaded.
	weatherFolder(t, repo, "w")
	waitFor(t, func() bool { return g.do("GET", "/v2/models/w/ready", "", nil).status == 200 })
	if err := os.RemoveAll(filepath.Join(repo, "w")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.do("GET", "/v2/models/w/ready", "", nil).status == 404 })
	if v, e := inferVersion(g, "m", body); v != "2" || e != "" {
		t.Errorf("m after the changes: %q %s", v, e)
	}
}

// TestTritonExplicitModelControl: only -load-model's models are loaded at start; the
// repository API loads any model folder under the root, also one added since, and unloads;
// the index lists every folder's models with their state.
func TestTritonExplicitModelControl(t *testing.T) {
	repo := t.TempDir()
	imagenetFolder(t, repo, "a", 1, 4)
	weatherFolder(t, repo, "b")
	g := startRepository(t, "--model-repository", repo, "--model-control-mode=explicit", "--load-model=a")
	coffee := sharedPhotos(t, "skimage_coffee.png")[0]
	index := func() map[string]string {
		status, body := g.adminPost("/v2/repository/index", "")
		var rows []struct{ Name, State string }
		if status != 200 || json.Unmarshal([]byte(body), &rows) != nil {
			t.Fatalf("index: %d %s", status, body)
		}
		out := map[string]string{}
		for _, r := range rows {
			out[r.Name] = r.State
		}
		return out
	}
	if got := index(); got["a"] != "READY" || got["b"] != "UNAVAILABLE" || len(got) != 2 {
		t.Fatalf("index at start: %v", got)
	}
	if a := g.do("POST", "/models/b/predict", "", coffee); a.status != 404 {
		t.Errorf("b before its load: %d %s", a.status, a.body)
	}
	weatherFolder(t, repo, "c") // added after the start
	for _, m := range []string{"b", "c"} {
		if status, body := g.adminPost("/v2/repository/models/"+m+"/load", ""); status != 200 {
			t.Fatalf("load %s: %d %s", m, status, body)
		}
		if a := g.do("POST", "/models/"+m+"/predict", "", coffee); a.status != 200 {
			t.Errorf("%s after its load: %d %s", m, a.status, a.body)
		}
	}
	if status, body := g.adminPost("/v2/repository/models/a/unload", ""); status != 200 {
		t.Fatalf("unload a: %d %s", status, body)
	}
	if status, _ := g.adminPost("/v2/repository/models/nothere/load", ""); status != 404 {
		t.Errorf("load of a model not in the repository: %d", status)
	}
	// A reload (SIGHUP) keeps the choice: a stays unloaded, b and c loaded.
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(g.log(), `msg=reloaded signal=SIGHUP`) })
	if got := index(); got["a"] != "UNAVAILABLE" || got["b"] != "READY" || got["c"] != "READY" {
		t.Errorf("index after the unload and a reload: %v", got)
	}
	if a := g.do("POST", "/models/a/predict", "", coffee); a.status == 200 {
		t.Errorf("a after its unload: %d", a.status)
	}
}

// TestTritonCommandLine: tritonserver's flags as KServe's Triton runtime passes them start
// the gateway; flags that mean nothing together are refused, naming them.
func TestTritonCommandLine(t *testing.T) {
	repo := t.TempDir()
	weatherFolder(t, repo, "weather")
	g := startGatewayArgs(t, nil, "tritonserver", "--model-store="+repo, "--grpc-port=0", "--http-port=0",
		"--allow-grpc=true", "--allow-http=true", "--strict-model-config=false", "-admin-listen", "off")
	if a := g.do("GET", "/v2/models/weather/config", "", nil); a.status != 200 || !strings.Contains(string(a.body), `"name":"weather"`) {
		t.Errorf("config: %d %s", a.status, a.body)
	}
	if !strings.Contains(g.log(), "msg=grpc addr=[::]:") && !strings.Contains(g.log(), "msg=grpc addr=0.0.0.0:") {
		t.Errorf("gRPC is not served on every interface:\n%s", g.log())
	}
	// Flags of scripts written for tritonserver: accepted, and what is not honoured is said.
	// --exit-on-error=false serves the models that load when another one fails.
	weatherFolder(t, repo, "broken")
	writeFile(t, filepath.Join(repo, "broken", "config.pbtxt"), `platform: "pytorch_libtorch"`)
	g = launch(t, nil, "--model-repository="+repo, "--model-control-mode=POLL", "--exit-on-error=false", "--log-verbose=1",
		"--metrics-port=8002", "--allow-metrics=false", "--backend-config=onnxruntime,default-max-batch-size=8", "--strict-model-config=true",
		"-listen", "127.0.0.1:0", "-admin-listen", "off", "-grpc-listen", "off")
	log := g.log()
	for _, s := range []string{`msg="Triton's flags accepted and not honoured: --allow-metrics=false, --backend-config=onnxruntime,default-max-batch-size=8, --strict-model-config=true (a configuration is completed from the model), --metrics-port=8002 (metrics are at /metrics`,
		`msg="models failed to load: serving the others (--exit-on-error=false)"`, `platform: \"pytorch_libtorch\" is not served`, "level=DEBUG"} {
		if !strings.Contains(log, s) {
			t.Errorf("log: no %s:\n%s", s, log)
		}
	}
	if a := g.do("GET", "/v2/models/weather/ready", "", nil); a.status != 200 {
		t.Errorf("weather beside the broken model: %d", a.status)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-model", "x.onnx", "--model-repository", repo}, "give -model or the model repository's flags"},
		{[]string{"--load-model", "a"}, "go with -model-repository"},
		{[]string{"--model-repository", repo, "--model-control-mode", "sometimes"}, "-model-control-mode must be none, poll or explicit"},
		{[]string{"--model-repository", repo, "--allow-http=false"}, "always serves HTTP"},
		{[]string{"--model-repository", repo, "--grpc-port", "1", "-grpc-listen", ":2"}, "not both"},
		{[]string{"--model-repository", repo, "stray"}, `unexpected argument "stray"`},
		{[]string{"--model-repository", repo, "--load-model", "weather"}, "repository.load_models: loads models at start in model_control_mode explicit only"},
		{[]string{"--model-repository", repo + "/missing"}, "no such file or directory"},
		{[]string{"--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "nothere"}, `-load-model nothere: `},
	} {
		out, err := exec.Command(gatewayBin(t), append(c.args, "-check")...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%q: %v, want %q:\n%s", c.args, err, c.want, out)
		}
	}
}
