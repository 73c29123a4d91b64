package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/internal/onnxtest"
)

// Serving a model with -model alone: what the model tells (its input, output, size, layout,
// element type, metadata) replaces the YAML.

// photos are the shared test photos (not the hostile inputs).
func photos(t *testing.T, shared string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, pat := range []string{"*.png", "*.jpg", "*.jpeg"} {
		files, _ := filepath.Glob(filepath.Join(shared, "images", pat))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(f)] = b
		}
	}
	if len(out) < 5 {
		t.Fatalf("only %d photos in %s/images", len(out), shared)
	}
	return out
}

// logits asks /v2 for a photo's scores.
func (g *gateway) logits(model string, img []byte) []float32 {
	g.t.Helper()
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{
		"name": "input", "shape": []int{1}, "datatype": "BYTES", "data": []string{base64.StdEncoding.EncodeToString(img)}}}})
	a := g.do("POST", "/v2/models/"+model+"/infer", "application/json", body)
	var r struct{ Outputs []struct{ Data []float32 } }
	if a.status != 200 || json.Unmarshal(a.body, &r) != nil || len(r.Outputs) != 1 {
		g.t.Fatalf("%s infer: %d %.300s", model, a.status, a.body)
	}
	return r.Outputs[0].Data
}

// TestModelFlagMatchesSpelledOutYAML: the shared MobileNetV2 served with -model alone gives
// every shared photo the same top-1 (and the same scores) as a YAML that spells out every
// setting, both computed here.
func TestModelFlagMatchesSpelledOutYAML(t *testing.T) {
	shared := sharedDir(t)
	dir := filepath.Join(shared, "models", "mobilenetv2-12-int8")
	model := filepath.Join(dir, "mobilenetv2-12-int8.onnx")
	zero := launch(t, nil, "-model", model, "-listen", "127.0.0.1:0", "-admin-listen", "off")
	yaml := startGateway(t, fmt.Sprintf(`models:
  - name: mobilenetv2-12-int8
    path: %s
    labels: %s/synset.txt
    input: {name: input, type: float32, layout: NCHW, width: 224, height: 224}
    output: {name: output}
    preprocess: {mode: shorter_side, resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], scale: normalized}
    batching: {max_batch_size: 2, max_queue_size: 256, adaptive: {latency_target: 50ms}}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, model, dir))
	const name = "mobilenetv2-12-int8"
	for file, img := range photos(t, shared) {
		a, b := zero.logits(name, img), yaml.logits(name, img)
		if len(a) != 1000 || len(b) != 1000 {
			t.Fatalf("%s: %d and %d scores", file, len(a), len(b))
		}
		if argmax(a) != argmax(b) {
			t.Errorf("%s: top-1 %d with -model, %d with the YAML", file, argmax(a), argmax(b))
		}
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-4 {
				t.Fatalf("%s: score %d is %v with -model, %v with the YAML", file, i, a[i], b[i])
			}
		}
		ct := "image/png"
		if !strings.HasSuffix(file, ".png") {
			ct = "image/jpeg"
		}
		pa := decodePrediction(t, zero.do("POST", "/predict/", ct, img))
		pb := decodePrediction(t, yaml.do("POST", "/predict/", ct, img))
		if pa.Prediction == "" || pa.Prediction != pb.Prediction {
			t.Errorf("%s: %q with -model, %q with the YAML", file, pa.Prediction, pb.Prediction)
		}
	}
	if p := decodePrediction(t, zero.do("POST", "/predict/", "image/png", photos(t, shared)["skimage_coffee.png"])); p.Prediction != "espresso" {
		t.Errorf("coffee: %+v (the synset.txt beside the model names the classes)", p)
	}
	// Where each setting came from: logged once, and shown by /v2/models/{m}/config.
	log := zero.log()
	for _, want := range []string{
		`from_model="input.name=input, input.type=float32, input.layout=NCHW, input.width=224, input.height=224, output.name=output, classes=1000"`,
		`from_file="labels=` + filepath.Join(dir, "synset.txt") + `"`,
		`defaults="batching.max_batch_size=auto, preprocess.mode=shorter_side, preprocess.crop=224 (input.width), preprocess.resize=256 (crop x 256/224)`,
		`msg="batch size chosen" model=` + name + ` version=1 max_batch_size=`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %s:\n%s", want, log)
		}
	}
	if n := strings.Count(log, `msg="model settings"`); n != 1 {
		t.Errorf("%d settings lines, want 1", n)
	}
	var cfg struct {
		MaxBatchSize int `json:"max_batch_size"`
		Parameters   map[string]struct {
			StringValue string `json:"string_value"`
		} `json:"parameters"`
	}
	if a := zero.do("GET", "/v2/models/"+name+"/config", "", nil); a.status != 200 || json.Unmarshal(a.body, &cfg) != nil {
		t.Fatalf("config: %d %s", a.status, a.body)
	}
	for k, v := range map[string]string{"input.width": "224 (model)", "input.layout": "NCHW (model)", "classes": "1000 (model)",
		"preprocess.mean": "[0.485, 0.456, 0.406] (default)"} {
		if got := cfg.Parameters[k].StringValue; got != v {
			t.Errorf("config parameter %s: %q, want %q", k, got, v)
		}
	}
	if got := cfg.Parameters["batching.max_batch_size"].StringValue; !regexp.MustCompile(`^\d+ \(default: auto, measured `).MatchString(got) || cfg.Parameters["batching.batch_curve"].StringValue == "" {
		t.Errorf("config parameter batching.max_batch_size: %q (max_batch_size: auto)", got)
	}
	if a := yaml.do("GET", "/v2/models/"+name+"/config", "", nil); !strings.Contains(string(a.body), `"input.width":{"string_value":"224 (yaml)"}`) {
		t.Errorf("the YAML's config: %s", a.body)
	}
}

// writeModel writes g to dir/name and returns its path.
func writeModel(t *testing.T, dir, name string, g onnxtest.Graph) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, g.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func redPNG(t *testing.T) []byte {
	var b bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 300, 260))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+3] = 255, 255
	}
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestZeroConfigLayoutsTypesAndMetadata: models with NHWC and uint8 inputs, a batch axis fixed
// at 1, and a preprocessing contract and labels in their metadata, each served with -model
// alone. The models answer each image's per-channel means, so what preprocessing did shows.
func TestZeroConfigLayoutsTypesAndMetadata(t *testing.T) {
	dir := t.TempDir()
	red := redPNG(t)

	// uint8 NHWC, labels in a labels.txt beside it: raw pixels, so the means are 255, 0, 0.
	u8 := filepath.Join(dir, "u8")
	os.Mkdir(u8, 0o755)
	os.WriteFile(filepath.Join(u8, "labels.txt"), []byte("red\ngreen\nblue\n"), 0o644)
	g := launch(t, nil, "-model", writeModel(t, u8, "model.onnx", onnxtest.Means("uint8", "NHWC", int64(56), int64(56), false)),
		"-listen", "127.0.0.1:0", "-admin-listen", "off")
	if p := decodePrediction(t, g.do("POST", "/models/u8/predict", "image/png", red)); p.Prediction != "red" {
		t.Fatalf("uint8 NHWC: %+v\n%s", p, g.log())
	}
	if v := g.logits("u8", red); len(v) != 3 || math.Abs(float64(v[0])-255) > 1e-3 || v[1] != 0 || v[2] != 0 {
		t.Errorf("uint8 means %v, want [255 0 0]", v)
	}
	if l := g.log(); !strings.Contains(l, "input.type=uint8, input.layout=NHWC, input.width=56, input.height=56") ||
		!strings.Contains(l, `from_file="labels=`) {
		t.Errorf("settings:\n%s", l)
	}

	// float32 NCHW with ONNX's image metadata (0..255 values) and its labels in the metadata;
	// a batch axis fixed at 1 gives max_batch_size 1.
	meta := onnxtest.Means("float32", "NCHW", int64(32), int64(32), false)
	meta.Inputs[0].Shape[0] = int64(1)
	meta.Metadata = map[string]string{"Image.NominalPixelRange": "NominalRange_0_255", "labels": `["rouge", "vert", "bleu"]`}
	g = launch(t, nil, "-model", writeModel(t, dir, "raw.onnx", meta), "-listen", "127.0.0.1:0", "-admin-listen", "off")
	if p := decodePrediction(t, g.do("POST", "/predict/", "image/png", red)); p.Prediction != "rouge" {
		t.Fatalf("metadata labels: %+v\n%s", p, g.log())
	}
	if v := g.logits("raw", red); len(v) != 3 || math.Abs(float64(v[0])-255) > 1e-3 || v[1] != 0 {
		t.Errorf("raw scale from the metadata: means %v, want [255 0 0]", v)
	}
	if l := g.log(); !strings.Contains(l, `from_metadata="labels=3 labels (labels), preprocess.scale=raw (Image.NominalPixelRange)"`) ||
		!strings.Contains(l, "batching.max_batch_size=1") {
		t.Errorf("settings:\n%s", l)
	}

	// Normalized_1_1: (x/255 - 0.5)/0.5, so red is 1, -1, -1.
	norm := onnxtest.Means("float32", "NHWC", int64(40), int64(40), false)
	norm.Metadata = map[string]string{"Image.NominalPixelRange": "Normalized_1_1"}
	g = launch(t, nil, "-model", writeModel(t, dir, "norm.onnx", norm), "-listen", "127.0.0.1:0", "-admin-listen", "off")
	if v := g.logits("norm", red); len(v) != 3 || math.Abs(float64(v[0])-1) > 1e-5 || math.Abs(float64(v[1])+1) > 1e-5 {
		t.Errorf("mean and std from the metadata: means %v, want [1 -1 -1]", v)
	}
	if p := decodePrediction(t, g.do("POST", "/predict/", "image/png", red)); p.Prediction != "0" {
		t.Errorf("no labels anywhere: %+v, want the class index", p)
	}
}

// runCheck runs bin/gateway ARGS -check.
func runCheck(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ortLib(t)
	out, err := exec.Command(gatewayBin(t), append(args, "-check")...).CombinedOutput()
	return string(out), err
}

// TestZeroConfigRefusals: what cannot be inferred is a start-up error naming the key to set;
// a YAML that sets it serves the model.
func TestZeroConfigRefusals(t *testing.T) {
	dir := t.TempDir()
	two := onnxtest.Means("float32", "NCHW", int64(32), int64(32), false)
	two.Inputs = append(two.Inputs, onnxtest.Tensor{Name: "mask", Type: "float32", Shape: []any{"N", int64(1), int64(32), int64(32)}})
	dynamic := writeModel(t, dir, "dynamic.onnx", onnxtest.Means("float32", "NCHW", "H", "W", false))
	for _, c := range []struct {
		name string
		g    onnxtest.Graph
		want string
	}{
		{"two", two, "models[0] (two).input.name: the model has 2 inputs (input float32 [? 3 32 32], mask float32 [? 1 32 32]); the gateway serves models with a single image input"},
		{"dynamic", onnxtest.Means("float32", "NCHW", "H", "W", false), "models[0] (dynamic).input.width: the model's input input float32 [? 3 ? ?] has a dynamic width: set input.width and input.height"},
		{"not_scores", onnxtest.Means("float32", "NCHW", int64(32), int64(32), true), "models[0] (not_scores).output: the model's output output float32 [? 3 1 1] is not [batch, classes]"},
	} {
		path := dynamic
		if c.name != "dynamic" {
			path = writeModel(t, dir, c.name+".onnx", c.g)
		}
		out, err := runCheck(t, "-model", path)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %v, want %q:\n%s", c.name, err, c.want, out)
		}
	}
	// The dynamic size given in the YAML: served.
	cfg := filepath.Join(dir, "dynamic.yaml")
	os.WriteFile(cfg, []byte("models:\n  - {name: d, path: dynamic.onnx, input: {width: 64, height: 48}, preprocess: {mode: stretch}}\n"), 0o644)
	if out, err := runCheck(t, "-config", cfg); err != nil || !strings.Contains(out, "input.width=64 (yaml)") && !strings.Contains(out, "from_yaml=\"input.width=64, input.height=48") {
		t.Errorf("a dynamic size set in the YAML: %v\n%s", err, out)
	}
	// ... or by the exporter's metadata (Ultralytics' imgsz).
	ultra := onnxtest.Means("float32", "NCHW", "H", "W", false)
	ultra.Metadata = map[string]string{"imgsz": "[96, 96]", "author": "Ultralytics", "task": "classify", "names": "{0: 'r', 1: 'g', 2: 'b'}"}
	if out, err := runCheck(t, "-model", writeModel(t, dir, "ultra.onnx", ultra)); err != nil ||
		!strings.Contains(out, "input.width=96 (imgsz), input.height=96 (imgsz)") || !strings.Contains(out, "preprocess.mean=[0, 0, 0] (author/task: an Ultralytics classifier)") {
		t.Errorf("an Ultralytics classifier: %v\n%s", err, out)
	}
	// Flags that mean nothing together.
	for _, args := range [][]string{{"-model", dynamic, "-config", cfg}, {"-labels", "x.txt"}, {"-model", dynamic, "-model_dir", dir}} {
		if out, err := runCheck(t, args...); err == nil || !regexp.MustCompile(`not both|go with -model`).MatchString(out) {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}

// runPrintConfig runs bin/gateway ARGS -print-config.
func runPrintConfig(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ortLib(t)
	cmd := exec.Command(gatewayBin(t), append(args, "-print-config")...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v -print-config: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// withoutComments drops the comment lines -print-config starts with.
func withoutComments(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestPrintConfigRoundTrips: the effective configuration, printed, is a configuration that
// gives the same values and prints the same; the environment and flags apply in order.
func TestPrintConfigRoundTrips(t *testing.T) {
	shared := sharedDir(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"-model", nil, []string{"-model", filepath.Join(shared, "models", "mobilenetv2-12-int8", "mobilenetv2-12-int8.onnx"), "-log-format", "json"}},
		{"shipped", []string{"IMAGEGATE_LISTEN=0.0.0.0:9999"}, []string{"-config", filepath.Join(repoRoot(t), "configs", "gateway.yaml"), "-admin-listen", "off"}},
	} {
		first := runPrintConfig(t, c.env, c.args...)
		path := filepath.Join(dir, c.name+".yaml")
		os.WriteFile(path, []byte(first), 0o644)
		second := runPrintConfig(t, nil, "-config", path)
		if withoutComments(first) != withoutComments(second) {
			t.Errorf("%s: printed again differently:\n%s\n----\n%s", c.name, first, second)
		}
		a, err := configs.Parse([]byte(first), "/")
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, first)
		}
		b, _ := configs.Parse([]byte(second), "/")
		if !reflect.DeepEqual(a.Server, b.Server) || len(a.Models) != 1 || !reflect.DeepEqual(a.Models[0].Preprocess, b.Models[0].Preprocess) ||
			a.Models[0].Input != b.Models[0].Input || a.Log != b.Log {
			t.Errorf("%s: different values", c.name)
		}
		if _, err := runCheck(t, "-config", path); err != nil {
			t.Errorf("%s: the printed configuration does not serve: %v", c.name, err)
		}
		if c.name == "shipped" && (a.Server.Listen != "0.0.0.0:9999" || a.Server.AdminListen != "off" || a.Models[0].Input.Width != 224 || a.Models[0].Input.Name != "input") {
			t.Errorf("shipped: listen %s, admin %s, input %+v", a.Server.Listen, a.Server.AdminListen, a.Models[0].Input)
		}
		if c.name == "-model" && (a.Log.Format != "json" || a.Models[0].Batching.Adaptive.LatencyTarget.D().String() != "50ms") {
			t.Errorf("-model: log %+v, batching %+v", a.Log, a.Models[0].Batching)
		}
	}
	// Without ONNX Runtime the keys a model tells are left empty, and a comment says so.
	out := runPrintConfig(t, []string{"ONNXRUNTIME_LIB=/nonexistent/libonnxruntime.so"}, "-config", filepath.Join(repoRoot(t), "configs", "gateway.yaml"))
	if !strings.Contains(out, "# models[0] (mobilenet_v3_small): the keys its model tells are left empty: ") || !strings.Contains(out, "width: 0") {
		t.Errorf("without ONNX Runtime:\n%s", out)
	}
	// KServe's model directory mode.
	out = runPrintConfig(t, []string{"PORT="}, "-model_dir", modelRepo(t, ""), "-model_name", "w")
	if !strings.Contains(out, "listen: 0.0.0.0:8080") || !strings.Contains(out, "drain_delay: 5s") || !strings.Contains(out, "name: w") || !strings.Contains(out, "width: 224") ||
		!strings.Contains(out, "latency_target: 50ms") { // KServe's mode without a YAML batches
		t.Errorf("-model_dir:\n%s", out)
	}
}

// TestListenPrecedence: -listen, then $IMAGEGATE_LISTEN, then server.listen.
func TestListenPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(cfg, []byte("server: {listen: \"127.0.0.3:0\"}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 2}")), 0o644)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, nil, "127.0.0.3:"},
		{[]string{"IMAGEGATE_LISTEN=127.0.0.2:0"}, nil, "127.0.0.2:"},
		{[]string{"IMAGEGATE_LISTEN=127.0.0.2:0"}, []string{"-listen", "127.0.0.1:0"}, "127.0.0.1:"},
	} {
		g := launch(t, c.env, append([]string{"-config", cfg, "-admin-listen", "off"}, c.args...)...)
		if !strings.Contains(g.url, "//"+c.want) {
			t.Errorf("%v %v: serving on %s, want %s", c.env, c.args, g.url, c.want)
		}
		if a := g.do("GET", "/v2/health/ready", "", nil); a.status != 200 {
			t.Errorf("%s: ready %d", g.url, a.status)
		}
	}
	cmd := exec.Command(gatewayBin(t), "-config", cfg, "-check")
	cmd.Env = append(os.Environ(), "IMAGEGATE_LISTEN=nowhere")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "$IMAGEGATE_LISTEN: server.listen: \"nowhere\" is not HOST:PORT") {
		t.Errorf("a bad $IMAGEGATE_LISTEN: %v\n%s", err, out)
	}
}

// TestLogFlagsAndVersion: -log-format and -log-level override the log section; -version.
func TestLogFlagsAndVersion(t *testing.T) {
	ortLib(t)
	cfg := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(cfg, []byte("log: {format: json}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 2}")), 0o644)
	out, err := runCheck(t, "-config", cfg)
	if err != nil || !strings.Contains(out, `{"time":`) || !strings.Contains(out, `"msg":"model settings"`) {
		t.Errorf("log.format json: %v\n%s", err, out)
	}
	out, err = runCheck(t, "-config", cfg, "-log-format", "text")
	if err != nil || !strings.Contains(out, `msg="model settings"`) || strings.Contains(out, `{"time":`) {
		t.Errorf("-log-format text over log.format json: %v\n%s", err, out)
	}
	out, err = runCheck(t, "-config", cfg, "-log-level", "warn")
	if err != nil || strings.Contains(out, "model settings") || !strings.Contains(out, "ok: model") {
		t.Errorf("-log-level warn: %v\n%s", err, out)
	}
	if out, err := runCheck(t, "-config", cfg, "-log-level", "loud"); err == nil || !strings.Contains(out, "-log-level: must be debug, info, warn or error") {
		t.Errorf("-log-level loud: %v\n%s", err, out)
	}
	v, err := exec.Command(gatewayBin(t), "-version").CombinedOutput()
	for _, re := range []string{`(?m)^imagegate \S+$`, `(?m)^go: +go1\.`, `(?m)^onnxruntime: +1\.\d+\.\d+ \(`, `(?m)^cpu features: `,
		`(?m)^resampler kernels: `, `(?m)^hardswish rewrite: `} {
		if !regexp.MustCompile(re).Match(v) {
			t.Errorf("-version lacks %s: %v\n%s", re, err, v)
		}
	}
}
