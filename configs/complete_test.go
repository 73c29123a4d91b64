package configs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The model facts here are written by hand: these tests check Complete's logic. cmd/gateway's
// tests run it on real models through ONNX Runtime.

func parseModel(t *testing.T, yaml string) (*Config, *Model) {
	t.Helper()
	cfg, err := Parse([]byte("models:\n  - {name: m, path: m.onnx"+yaml+"}\n"), "/x")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, &cfg.Models[0]
}

func imageModel(in string, shape ...int64) ModelFacts {
	return ModelFacts{
		Inputs:  []TensorFacts{{Name: "pixels", Type: in, Shape: shape}},
		Outputs: []TensorFacts{{Name: "logits", Type: "float32", Shape: []int64{-1, 5}}},
	}
}

func settings(c Completion) map[string]string {
	out := map[string]string{}
	for _, s := range c.Settings {
		out[s.Key] = s.Value + " (" + s.Source + ")"
	}
	return out
}

func TestCompleteFromModel(t *testing.T) {
	cfg, m := parseModel(t, "")
	c, err := m.Complete(imageModel("float32", -1, 3, 299, 299), cfg.Server)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"input.name": "pixels (model)", "input.type": "float32 (model)", "input.layout": "NCHW (model)",
		"input.width": "299 (model)", "input.height": "299 (model)", "output.name": "logits (model)", "classes": "5 (model)",
		"batching.max_batch_size": "auto (default)", "labels": "class indices (default)", "preprocess.mode": "shorter_side (default)",
		"preprocess.crop": "299 (default: input.width)", "preprocess.resize": "341 (default: crop x 256/224)",
		"preprocess.scale": "normalized (default)", "preprocess.mean": "[0.485, 0.456, 0.406] (default)", "preprocess.std": "[0.229, 0.224, 0.225] (default)",
	}
	if got := settings(c); !reflect.DeepEqual(got, want) {
		t.Errorf("settings:\n got %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(c.Labels, []string{"0", "1", "2", "3", "4"}) || c.Classes != 5 || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "labels.txt") {
		t.Errorf("labels %v, classes %d, warnings %v", c.Labels, c.Classes, c.Warnings)
	}
	if m.Input != (Input{Name: "pixels", Width: 299, Height: 299, Layout: "NCHW", Type: "float32"}) || m.Output.Name != "logits" || m.Preprocess.Resize != 341 {
		t.Errorf("model: %+v %+v %+v", m.Input, m.Output, m.Preprocess)
	}
}

func TestCompleteNHWCUint8FixedBatch(t *testing.T) {
	cfg, m := parseModel(t, "")
	c, err := m.Complete(imageModel("uint8", 1, 192, 160, 3), cfg.Server)
	if err == nil {
		t.Fatal("a 192x160 input with the default square crop was accepted")
	}
	if !strings.Contains(err.Error(), "models[0] (m).preprocess.crop: must equal input.width and input.height (160x192)") {
		t.Fatal(err)
	}
	cfg, m = parseModel(t, ", preprocess: {mode: stretch}")
	c, err = m.Complete(imageModel("uint8", 1, 192, 160, 3), cfg.Server)
	if err != nil {
		t.Fatal(err)
	}
	got := settings(c)
	for k, v := range map[string]string{"input.layout": "NHWC (model)", "input.type": "uint8 (model)", "input.width": "160 (model)",
		"input.height": "192 (model)", "batching.max_batch_size": "1 (model)", "preprocess.mode": "stretch (yaml)"} {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if m.Batching.MaxBatchSize != 1 {
		t.Errorf("max_batch_size %d for a batch axis fixed at 1", m.Batching.MaxBatchSize)
	}
}

// TestCompleteErrorsNameTheKey: what cannot be inferred, or contradicts the model, is an error
// naming the key to set.
func TestCompleteErrorsNameTheKey(t *testing.T) {
	two := imageModel("float32", -1, 3, 224, 224)
	two.Inputs = append(two.Inputs, TensorFacts{Name: "mask", Type: "float32", Shape: []int64{-1, 1, 224, 224}})
	twoOut := imageModel("float32", -1, 3, 224, 224)
	twoOut.Outputs = append(twoOut.Outputs, TensorFacts{Name: "features", Type: "float32", Shape: []int64{-1, 7}})
	notScores := imageModel("float32", -1, 3, 224, 224)
	notScores.Outputs[0].Shape = []int64{-1, 1000, 1, 1}
	dynClasses := imageModel("float32", -1, 3, 224, 224)
	dynClasses.Outputs[0].Shape = []int64{-1, -1}
	for _, c := range []struct {
		yaml  string
		facts ModelFacts
		want  string
	}{
		{"", two, "models[0] (m).input.name: the model has 2 inputs (pixels float32 [? 3 224 224], mask float32 [? 1 224 224]); the gateway serves models with a single image input"},
		{"", imageModel("float32", -1, 3, -1, -1), "models[0] (m).input.width: the model's input pixels float32 [? 3 ? ?] has a dynamic width: set input.width and input.height"},
		{"", imageModel("float32", -1, 3, 3, 3), "input.layout: the model's input pixels float32 [? 3 3 3] may be NCHW or NHWC: set input.layout"},
		{"", imageModel("float32", -1, 1, 28, 28), "input: the model's input pixels float32 [? 1 28 28] has no axis of 3 channels"},
		{"", imageModel("int64", -1, 3, 224, 224), "the model's input pixels is int64; float32 and uint8 image inputs are served"},
		{"", imageModel("float32", -1, 224, 224), "an image input is [batch, 3, height, width] (NCHW) or [batch, height, width, 3] (NHWC)"},
		{"", imageModel("float32", 8, 3, 224, 224), "has a batch axis fixed at 8: export the model with a dynamic batch axis"},
		{", batching: {max_batch_size: 4}", imageModel("float32", 1, 3, 224, 224), "batching.max_batch_size: is 4, but the model's input pixels float32 [1 3 224 224] has a batch axis fixed at 1"},
		{"", twoOut, "output.name: the model has 2 outputs"},
		{"", notScores, "output: the model's output logits float32 [? 1000 1 1] is not [batch, classes]"},
		{"", dynClasses, "is not [batch, classes] with a fixed class count"},
		{", input: {name: image}", imageModel("float32", -1, 3, 224, 224), `input.name: the model has no input "image" (its input: pixels float32 [? 3 224 224]): omit input.name`},
		{", output: {name: probs}", imageModel("float32", -1, 3, 224, 224), `output.name: the model has no output "probs"`},
		{", input: {type: float32}", imageModel("uint8", -1, 224, 224, 3), "input.type: input.type is float32, but the model's input pixels is uint8: omit input.type"},
		{", input: {layout: NHWC}", imageModel("float32", -1, 3, 224, 224), "input.layout: is NHWC, but the model's input pixels float32 [? 3 224 224] has 224 channels there"},
		{", input: {width: 256}", imageModel("float32", -1, 3, 224, 224), "input.width: is 256, but the model's input pixels float32 [? 3 224 224] has width 224: omit input.width"},
	} {
		cfg, m := parseModel(t, c.yaml)
		_, err := m.Complete(c.facts, cfg.Server)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: err = %v, want %q", c.yaml, c.facts.Inputs, err, c.want)
		}
	}
}

// TestCompleteYAMLWins: what the YAML sets is served, the model only fills the rest; a
// dynamic size set in the YAML is taken.
func TestCompleteYAMLWins(t *testing.T) {
	cfg, m := parseModel(t, `, labels: l.txt, input: {width: 320, height: 240}, output: {name: logits},
      preprocess: {mode: stretch, mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25], scale: raw}, batching: {max_batch_size: 8}`)
	f := imageModel("float32", -1, 3, -1, -1)
	f.Metadata = map[string]string{"mean": "[0, 0, 0]", "labels": `["a","b","c","d","e"]`}
	c, err := m.Complete(f, cfg.Server)
	if err != nil {
		t.Fatal(err)
	}
	got := settings(c)
	for k, v := range map[string]string{"input.width": "320 (yaml)", "input.height": "240 (yaml)", "output.name": "logits (yaml)",
		"labels": "/x/l.txt (yaml)", "preprocess.mean": "[0.5, 0.5, 0.5] (yaml)", "preprocess.scale": "raw (yaml)", "batching.max_batch_size": "8 (yaml)"} {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if c.Labels != nil {
		t.Errorf("labels from the metadata beside a configured label file: %v", c.Labels)
	}
}

// TestCompleteFromMetadata: the preprocessing contract and labels from metadata_props, in the
// forms exporters write them.
func TestCompleteFromMetadata(t *testing.T) {
	for _, c := range []struct {
		name   string
		shape  []int64
		meta   map[string]string
		want   map[string]string
		labels []string
	}{
		{"own keys, 0..255 units", []int64{-1, 3, 224, 224}, map[string]string{
			"mean": "123.675, 116.28, 103.53", "std": "[58.395, 57.12, 57.375]", "resize_size": "232", "Labels": `["a","b","c","d","e"]`},
			map[string]string{"preprocess.mean": "[0.485, 0.456, 0.406] (metadata mean)", "preprocess.std": "[0.229, 0.224, 0.225] (metadata std)",
				"preprocess.resize": "232 (metadata resize_size)", "labels": "5 labels (metadata Labels)"}, []string{"a", "b", "c", "d", "e"}},
		{"ONNX image metadata, 0..255", []int64{-1, 3, 224, 224}, map[string]string{"Image.NominalPixelRange": "NominalRange_0_255", "Image.BitmapPixelFormat": "Rgb8"},
			map[string]string{"preprocess.scale": "raw (metadata Image.NominalPixelRange)"}, nil},
		{"ONNX image metadata, -1..1", []int64{-1, 3, 224, 224}, map[string]string{"Image.NominalPixelRange": "Normalized_1_1"},
			map[string]string{"preprocess.mean": "[0.5, 0.5, 0.5] (metadata Image.NominalPixelRange)", "preprocess.scale": "normalized (default)"}, nil},
		{"Ultralytics classifier, dynamic size", []int64{-1, 3, -1, -1}, map[string]string{
			"author": "Ultralytics", "task": "classify", "imgsz": "[256, 256]", "names": `{0: 'cat', 1: "dog's", 2: 'a\'b', 3: 'x', 4: 'y'}`},
			map[string]string{"input.width": "256 (metadata imgsz)", "input.height": "256 (metadata imgsz)", "preprocess.resize": "256 (metadata author/task: an Ultralytics classifier)",
				"preprocess.mean": "[0, 0, 0] (metadata author/task: an Ultralytics classifier)", "preprocess.std": "[1, 1, 1] (metadata author/task: an Ultralytics classifier)",
				"labels": "5 labels (metadata names)"}, []string{"cat", "dog's", "a'b", "x", "y"}},
		{"labels that do not name every class", []int64{-1, 3, 224, 224}, map[string]string{"classes": "a\nb\n"},
			map[string]string{"labels": "class indices (default)"}, []string{"0", "1", "2", "3", "4"}},
	} {
		cfg, m := parseModel(t, "")
		f := imageModel("float32", c.shape...)
		f.Metadata = c.meta
		res, err := m.Complete(f, cfg.Server)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := settings(res)
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s: %q, want %q", c.name, k, got[k], v)
			}
		}
		if c.labels != nil && !reflect.DeepEqual(res.Labels, c.labels) {
			t.Errorf("%s: labels %q, want %q", c.name, res.Labels, c.labels)
		}
	}
	// What the gateway cannot honor is said.
	cfg, m := parseModel(t, "")
	f := imageModel("float32", -1, 3, 224, 224)
	f.Metadata = map[string]string{"Image.BitmapPixelFormat": "Bgr8", "crop": "two hundred"}
	res, err := m.Complete(f, cfg.Server)
	if err == nil || !strings.Contains(err.Error(), `preprocess.crop: the model's metadata crop is "two hundred", not a positive integer: set preprocess.crop`) {
		t.Errorf("a bad crop in the metadata: %v", err)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "Image.BitmapPixelFormat is Bgr8: the gateway feeds the model RGB pixels") {
		t.Errorf("warnings: %v", res.Warnings)
	}
}

func TestParseLabelList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{`["a", "b \"c\""]`, []string{"a", `b "c"`}, ""},
		{`{"1": "b", "0": "a"}`, []string{"a", "b"}, ""},
		{`{0: 'tench', 1: "goldfish", 2: 'caf\xe9',}`, []string{"tench", "goldfish", "café"}, ""},
		{`['a', 'b']`, []string{"a", "b"}, ""},
		{"a\nb\r\nc\n", []string{"a", "b", "c"}, ""},
		{`{0: 'a', 2: 'c'}`, nil, "not numbered 0 to 1"},
		{`{0: 'a', 0: 'b'}`, nil, "named twice"},
		{`['a' 'b']`, nil, "want , or ]"},
		{`['a`, nil, "not closed"},
		{"just one", nil, "want a list"},
		{`["a"] x`, nil, "after the labels"},
	} {
		got, err := parseLabelList(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
}

// TestLabelsBesideTheModel: labels.txt, labels.json or synset.txt beside a model file (a
// version folder's own first) when the configuration names none; a synset.txt gives names.
func TestLabelsBesideTheModel(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "flat", "net.onnx"), "x")
	write(filepath.Join(dir, "flat", "synset.txt"), "n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n")
	m := Model{Name: "m", Path: filepath.Join(dir, "flat", "net.onnx")}
	vs, err := m.Versions()
	if err != nil || len(vs) != 1 || vs[0].Labels != filepath.Join(dir, "flat", "synset.txt") || !vs[0].LabelsFound {
		t.Fatalf("flat: %+v %v", vs, err)
	}
	if l, err := LoadLabels(vs[0].Labels); err != nil || !reflect.DeepEqual(l, []string{"tench", "goldfish"}) {
		t.Fatalf("synset labels: %q %v", l, err)
	}
	mv := m.ForVersion(vs[0])
	if mv.Labels != vs[0].Labels || !mv.labelsFound {
		t.Fatalf("ForVersion: %+v", mv)
	}
	os.Remove(filepath.Join(dir, "flat", "synset.txt"))
	if vs, err := m.Versions(); err != nil || vs[0].Labels != "" {
		t.Fatalf("no labels: %+v %v", vs, err)
	}
	// A repository: version 2 has its own labels.json, version 1 takes the configured file.
	write(filepath.Join(dir, "repo", "1", "model.onnx"), "x")
	write(filepath.Join(dir, "repo", "2", "model.onnx"), "x")
	write(filepath.Join(dir, "repo", "2", "labels.json"), `["a"]`)
	m = Model{Name: "m", Path: filepath.Join(dir, "repo"), Labels: "/l.txt", VersionPolicy: VersionPolicy{All: true}}
	vs, err = m.Versions()
	if err != nil || len(vs) != 2 || vs[0].Labels != "/l.txt" || vs[0].LabelsFound || vs[1].Labels != filepath.Join(dir, "repo", "2", "labels.json") || !vs[1].LabelsFound {
		t.Fatalf("repository: %+v %v", vs, err)
	}
}

func TestForModel(t *testing.T) {
	for _, c := range []struct{ path, name, want, err string }{
		{"/m/resnet50-v1-12.onnx", "", "resnet50-v1-12", ""},
		{"/m/mobilenetv2/model.onnx", "", "mobilenetv2", ""},
		{"/m/x/1/model.onnx", "", "1", ""},
		{"/m/my model.onnx", "", "", "give -name"},
		{"/m/my model.onnx", "mine", "mine", ""},
	} {
		cfg, err := ForModel(c.path, "", c.name)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.path, err, c.err)
			}
			continue
		}
		if err != nil || cfg.Models[0].Name != c.want || cfg.Models[0].Path != c.path || cfg.Models[0].origin != "flag" {
			t.Errorf("%s: %+v %v, want the name %s", c.path, cfg, err, c.want)
		}
	}
	cfg, err := ForModel("m.onnx", "l.txt", "")
	wd, _ := os.Getwd()
	if err != nil || cfg.Models[0].Path != filepath.Join(wd, "m.onnx") || cfg.Models[0].Labels != filepath.Join(wd, "l.txt") || cfg.Server.Listen != "127.0.0.1:8080" {
		t.Fatalf("relative paths: %+v %v", cfg, err)
	}
}

// TestMarshalRoundTrip: a configuration written by Marshal (what -print-config prints) parses
// back to the same values, before and after Complete.
func TestMarshalRoundTrip(t *testing.T) {
	cfg, err := Parse([]byte(`server: {listen: "0.0.0.0:9000", max_body_bytes: 3MiB, drain_delay: 5s, decode_workers: 3}
log: {level: debug, format: json}
models:
  - {name: a, path: a.onnx, batching: {preferred_batch_sizes: [1, 2], adaptive: {latency_target: 0s}, max_queue_delay: 2ms}}
  - {name: b, path: repo, version_policy: {specific: [1, 3]}, preprocess: {max_pixels: 1000000, full_decode: true}}
`), "/x")
	if err != nil {
		t.Fatal(err)
	}
	check := func(cfg *Config) {
		t.Helper()
		out, err := cfg.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out, "/elsewhere")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for i := range cfg.Models {
			a, b := cfg.Models[i], back.Models[i]
			a.set, b.set, a.field, b.field = nil, nil, "", ""
			if !reflect.DeepEqual(a, b) {
				t.Errorf("model %d:\n%+v\n%+v", i, a, b)
			}
		}
		if !reflect.DeepEqual(cfg.Server, back.Server) || cfg.Log != back.Log || !reflect.DeepEqual(cfg.Repository, back.Repository) || cfg.ONNXRuntime != back.ONNXRuntime {
			t.Errorf("round trip:\n%s", out)
		}
	}
	check(cfg)
	if _, err := cfg.Models[0].Complete(imageModel("float32", -1, 3, 224, 224), cfg.Server); err != nil {
		t.Fatal(err)
	}
	check(cfg)
}
