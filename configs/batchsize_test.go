package configs

import (
	"strings"
	"testing"
)

// max_batch_size: a number or auto; omitted is auto; 0 and other words are errors naming the
// key; auto marshals back as auto.
func TestMaxBatchSizeAuto(t *testing.T) {
	for yaml, want := range map[string]BatchSize{
		"":                                    AutoBatchSize,
		", batching: {max_batch_size: auto}":  AutoBatchSize,
		", batching: {max_batch_size: 8}":     8,
		", batching: {max_batch_size: 4096}":  4096,
		", batching: {max_batch_size: \"1\"}": 1,
	} {
		cfg, m := parseModel(t, yaml)
		if m.Batching.MaxBatchSize != want {
			t.Errorf("%q: max_batch_size %v, want %v", yaml, m.Batching.MaxBatchSize, want)
		}
		out, err := cfg.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out, "/x")
		if err != nil || back.Models[0].Batching.MaxBatchSize != want {
			t.Errorf("%q: marshalled and parsed back: %v, %v\n%s", yaml, back.Models[0].Batching.MaxBatchSize, err, out)
		}
		if want.Auto() && !strings.Contains(string(out), "max_batch_size: auto") {
			t.Errorf("%q: marshalled without max_batch_size: auto:\n%s", yaml, out)
		}
	}
	for yaml, msg := range map[string]string{
		"{max_batch_size: 0}":                                "max_batch_size: must be positive",
		"{max_batch_size: -1}":                               "must be in [1, 4096] or auto",
		"{max_batch_size: 4097}":                             "must be in [1, 4096] or auto",
		"{max_batch_size: automatic}":                        "want a number of images or auto",
		"{max_batch_size: 2.5}":                              "want a number of images or auto",
		"{max_batch_size: [2]}":                              "want a number of images or auto",
		"{max_batch_size: auto, preferred_batch_sizes: [0]}": "preferred_batch_sizes[0]: must be in [1, 4096]",
		"{max_batch_size: 4, preferred_batch_sizes: [8]}":    "must be in [1, max_batch_size=4], got 8",
	} {
		_, err := Parse([]byte("models: [{name: m, path: m.onnx, batching: "+yaml+"}]\n"), "/x")
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: err = %v, want %q", yaml, err, msg)
		}
	}
	if _, err := Parse([]byte("models: [{name: m, path: m.onnx, batching: {max_batch_size: auto, preferred_batch_sizes: [4, 16]}}]\n"), "/x"); err != nil {
		t.Errorf("preferred sizes with auto: %v", err)
	}
}

// A model whose batch axis is fixed at 1 gets 1 under auto, whether auto was written or left
// to the default; a dynamic axis leaves auto to the model's load.
func TestCompleteBatchAxisAuto(t *testing.T) {
	for _, yaml := range []string{"", ", batching: {max_batch_size: auto}"} {
		cfg, m := parseModel(t, yaml)
		c, err := m.Complete(imageModel("float32", 1, 3, 224, 224), cfg.Server)
		if err != nil {
			t.Fatal(err)
		}
		if m.Batching.MaxBatchSize != 1 || settings(c)["batching.max_batch_size"] != "1 (model)" {
			t.Errorf("%q: batch axis fixed at 1: %v, %q", yaml, m.Batching.MaxBatchSize, settings(c)["batching.max_batch_size"])
		}
		cfg, m = parseModel(t, yaml)
		c, err = m.Complete(imageModel("float32", -1, 3, 224, 224), cfg.Server)
		if err != nil {
			t.Fatal(err)
		}
		src := "default"
		if yaml != "" {
			src = "yaml"
		}
		if !m.Batching.MaxBatchSize.Auto() || settings(c)["batching.max_batch_size"] != "auto ("+src+")" {
			t.Errorf("%q: dynamic batch axis: %v, %q", yaml, m.Batching.MaxBatchSize, settings(c)["batching.max_batch_size"])
		}
	}
}
