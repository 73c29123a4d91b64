package configs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeFiles writes files (path relative to dir: contents) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tritonRepo is a model repository as Triton's users keep them: a model with a config.pbtxt,
// one without, and models that cannot be served as they stand.
func tritonRepo(t *testing.T) string {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"classifier/config.pbtxt": `
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "input", data_type: TYPE_FP32, format: FORMAT_NCHW, dims: [3, 224, 224] }]
output [{ name: "output", data_type: TYPE_FP32, dims: [1000], label_filename: "imagenet.txt" }]
dynamic_batching { max_queue_delay_microseconds: 2000 default_queue_policy { max_queue_size: 32 } }
instance_group [{ count: 2, kind: KIND_CPU }]
parameters { key: "preprocess.resize" value { string_value: "232" } }
`,
		"classifier/imagenet.txt":    "tench\ngoldfish\n",
		"classifier/1/model.onnx":    "",
		"classifier/2/model.onnx":    "",
		"plain/3/model.onnx":         "",
		"tensorrt/config.pbtxt":      `platform: "tensorrt_plan"`,
		"tensorrt/1/model.plan":      "",
		"badparam/config.pbtxt":      `parameters { key: "batching.max_batch_size" value { string_value: "many" } }`,
		"badparam/1/model.onnx":      "",
		"badvalue/config.pbtxt":      `parameters { key: "preprocess.mode" value { string_value: "squash" } }`,
		"badvalue/1/model.onnx":      "",
		"noversion/config.pbtxt":     ``,
		"typo/config.pbtxt":          `max_batch_sise: 4`,
		"typo/1/model.onnx":          "",
		".git/config":                "",
		"README.md":                  "models",
		"renamed/config.pbtxt":       `default_model_filename: "resnet.onnx"`,
		"renamed/1/resnet.onnx":      "",
		"wrongfile/config.pbtxt":     `default_model_filename: "resnet.onnx"`,
		"wrongfile/1/model.onnx":     "",
		"wrongfile/1/resnet.onnx":    "",
		"bad name/1/model.onnx":      "",
		"strict_ok/config.pbtxt":     `max_batch_size: 2 dynamic_batching {}`,
		"strict_ok/1/model.onnx":     "",
		"unhonoured/config.pbtxt":    `response_cache { enable: true }`,
		"unhonoured/1/model.onnx":    "",
		"unhonoured/labels.json":     `["a"]`,
		"named/config.pbtxt":         `name: "named" backend: "onnxruntime"`,
		"named/1/model.onnx":         "",
		"named/1/labels.txt":         "x",
		"classifier/ignored/file.md": "",
	})
	return dir
}

func TestTritonRepository(t *testing.T) {
	dir := tritonRepo(t)
	cfg, err := ForRepository(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Model{}
	var names []string
	for _, m := range cfg.Models {
		byName[m.Name] = m
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if want := []string{"classifier", "named", "plain", "renamed", "strict_ok", "unhonoured"}; !slices.Equal(names, want) {
		t.Errorf("models %v, want %v", names, want)
	}
	c := byName["classifier"]
	b := c.Batching
	if c.Path != filepath.Join(dir, "classifier") || c.Labels != filepath.Join(dir, "classifier", "imagenet.txt") ||
		c.Input.Name != "input" || c.Input.Layout != "NCHW" || c.Input.Width != 224 || c.Input.Type != "float32" || c.Output.Name != "output" ||
		b.MaxBatchSize != 8 || b.MaxQueueDelay.D() != 2*time.Millisecond || b.MaxQueueSize != 32 || b.Adaptive.LatencyTarget != 0 ||
		c.Runtime.Instances != 2 || c.Preprocess.Resize != 232 || c.origin != "config.pbtxt" || !c.set["batching.max_batch_size"] || c.set["preprocess.mean"] {
		t.Errorf("classifier: %+v (set %v)", c, c.set)
	}
	if c.Triton == nil || c.Triton.ConfigFile != filepath.Join(dir, "classifier", "config.pbtxt") || c.Triton.Config.GetMaxBatchSize() != 8 ||
		c.Triton.From["preprocess.resize"] != "parameters[preprocess.resize]" {
		t.Errorf("classifier's source: %+v", c.Triton)
	}
	// Without a config.pbtxt: configured from the model, as -model is, its newest version.
	p := byName["plain"]
	if vs, err := p.Versions(); err != nil || len(vs) != 1 || vs[0].Version != "3" || p.Triton.Config != nil || !p.Batching.MaxBatchSize.Auto() {
		t.Errorf("plain: %+v %v %v", p, vs, err)
	}
	if u := byName["unhonoured"].Triton.Unhonoured; len(u) != 2 || !strings.Contains(u[0], "no dynamic_batching") || !strings.Contains(u[1], "response_cache") {
		t.Errorf("unhonoured: %q", u)
	}
	// The models that cannot be served are named, with the field and why.
	failed := map[string]string{}
	for _, f := range cfg.FailedModels {
		failed[f.Name] = f.Version + ": " + f.Err.Error()
	}
	for name, want := range map[string]string{
		"tensorrt":  `1: model repository ` + dir + `, model tensorrt: ` + filepath.Join(dir, "tensorrt", "config.pbtxt") + `: platform: "tensorrt_plan" is not served`,
		"badparam":  `parameters[batching.max_batch_size] (sets batching.max_batch_size): cannot parse max_batch_size "many"`,
		"badvalue":  `badvalue (` + filepath.Join(dir, "badvalue", "config.pbtxt") + `).preprocess.mode: must be shorter_side, stretch or letterbox`,
		"noversion": "has no version folder",
		"typo":      `(line 1:1): unknown field: max_batch_sise`,
		"wrongfile": `default_model_filename: "resnet.onnx", but version 1 serves model.onnx`,
		"bad name":  "may hold only letters",
	} {
		if got, ok := failed[name]; !ok || !strings.Contains(got, want) {
			t.Errorf("failed model %s: %q, want %q", name, got, want)
		}
	}
	if len(failed) != 7 {
		t.Errorf("failed: %v", failed)
	}
	// Strict: a field not honoured fails its model; the others are served.
	strict, err := ForRepository(dir, func(c *Config) { c.Repository.Strict = true })
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(strict.Models, func(m Model) bool { return m.Name == "unhonoured" || m.Name == "named" }) ||
		!slices.ContainsFunc(strict.Models, func(m Model) bool { return m.Name == "strict_ok" }) ||
		!slices.ContainsFunc(strict.Models, func(m Model) bool { return m.Name == "classifier" }) {
		t.Errorf("strict: %d models, %v", len(strict.Models), strict.FailedModels)
	}
	// Marshal leaves the repository's models to the repository.
	out, err := cfg.Marshal()
	if err != nil || strings.Contains(string(out), "classifier") || !strings.Contains(string(out), "path: "+dir) {
		t.Errorf("marshal: %v\n%s", err, out)
	}
	back, err := Parse(out, "/")
	if err != nil || len(back.Models) != len(cfg.Models) {
		t.Errorf("read back: %v", err)
	}
}

func TestTritonRepositoryBesideFileModels(t *testing.T) {
	dir := tritonRepo(t)
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFiles(t, filepath.Dir(file), map[string]string{"gateway.yaml": "models:\n  - {name: plain, path: " + dir + "/classifier/1/model.onnx}\nrepository: {path: " + dir + "}\n", "x.onnx": ""})
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Models[0].Name != "plain" || cfg.Models[0].Triton != nil {
		t.Errorf("first model %+v", cfg.Models[0])
	}
	if !slices.ContainsFunc(cfg.FailedModels, func(f FailedModel) bool {
		return f.Name == "plain" && strings.Contains(f.Err.Error(), "a model of the configuration file (models) has the name")
	}) {
		t.Errorf("the folder named like a listed model: %v", cfg.FailedModels)
	}
}

func TestRepositoryModesValidated(t *testing.T) {
	dir := t.TempDir()
	for yml, want := range map[string]string{
		"repository: {path: " + dir + ", model_control_mode: sometimes}":                   "repository.model_control_mode: must be none, poll or explicit",
		"repository: {path: " + dir + ", model_control_mode: none, poll: 1s}":              "repository.poll: polls in model_control_mode poll only",
		"repository: {path: " + dir + ", load_models: [a]}":                                "repository.load_models: loads models at start in model_control_mode explicit only",
		"repository: {path: " + dir + ", model_control_mode: poll, poll: 1ms}":             "repository.poll: must be at least 100ms",
		"repository: {path: " + dir + "/missing}":                                          "no such file",
		"repository: {path: " + dir + ", model_control_mode: explicit, load_models: ['']}": "repository.load_models[0]: is empty",
		"server: {listen: ':1'}": "at least one model is required (or a Triton model repository",
	} {
		if _, err := Parse([]byte(yml), "/"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yml, err, want)
		}
	}
	for yml, want := range map[string]Repository{
		"repository: {path: " + dir + "}":                                              {Path: dir, ModelControlMode: "none"},
		"repository: {path: " + dir + ", poll: 2s}":                                    {Path: dir, ModelControlMode: "poll", Poll: Duration(2 * time.Second)},
		"repository: {path: " + dir + ", model_control_mode: poll}":                    {Path: dir, ModelControlMode: "poll", Poll: DefaultPoll},
		"repository: {path: rel, model_control_mode: explicit, load_models: [a, '*']}": {Path: filepath.Join(filepath.Dir(dir), "rel"), ModelControlMode: "explicit", LoadModels: []string{"a", "*"}},
	} {
		if strings.Contains(yml, "rel") {
			if err := os.Mkdir(filepath.Join(filepath.Dir(dir), "rel"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cfg, err := Parse([]byte(yml), filepath.Dir(dir))
		if err != nil {
			t.Errorf("%s: %v", yml, err)
			continue
		}
		if got := cfg.Repository; got.Path != want.Path || got.ModelControlMode != want.ModelControlMode || got.Poll != want.Poll || !slices.Equal(got.LoadModels, want.LoadModels) {
			t.Errorf("%s: %+v, want %+v", yml, got, want)
		}
	}
}

func TestIsModelKey(t *testing.T) {
	for key, want := range map[string]bool{
		"preprocess.mean": true, "preprocess": true, "batching.max_batch_size": true, "runtime.instances": true,
		"labels": true, "input.width": true, "version_policy.latest": true, "batching.adaptive.latency_target": true,
		"name": false, "path": false, "preprocess.colour": false, "batching.max_queue_delay.x": false, "": false, "intra_op_thread_count": false,
	} {
		if IsModelKey(key) != want {
			t.Errorf("IsModelKey(%q) = %v", key, !want)
		}
	}
}
