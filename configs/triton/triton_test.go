package triton

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
)

// A config.pbtxt as Triton's documentation and model repositories write them: list syntax,
// comments, maps, enums by name, fields the gateway does not honour.
const resnetPbtxt = `
# ResNet-50 from the ONNX Model Zoo
name: "resnet50"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "data"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }
]
output [
  {
    name: "resnetv17_dense0_fwd"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    label_filename: "labels.txt"
  }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 500
  preserve_ordering: true
  default_queue_policy {
    max_queue_size: 64
    default_timeout_microseconds: 2000000
    allow_timeout_override: true
  }
}
instance_group [ { count: 2, kind: KIND_CPU } ]
version_policy: { latest: { num_versions: 2 } }
model_warmup [ { name: "w", batch_size: 1, inputs { key: "data" value: { data_type: TYPE_FP32, dims: [3, 224, 224], zero_data: true } } } ]
parameters: { key: "preprocess.mean" value: { string_value: "[0.5, 0.5, 0.5]" } }
parameters: { key: "intra_op_thread_count" value: { string_value: "2" } }
parameters: { key: "cudnn_conv_algo_search" value: { string_value: "1" } }
`

func modelKey(k string) bool {
	return slices.Contains([]string{"preprocess.mean", "preprocess", "task", "batching.max_batch_size", "runtime.execution_provider"}, k)
}

func parse(t *testing.T, text string) *inference.ModelConfig {
	t.Helper()
	c, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseTritonText(t *testing.T) {
	c := parse(t, resnetPbtxt)
	if c.Name != "resnet50" || c.MaxBatchSize != 8 || len(c.Input) != 1 || !slices.Equal(c.Input[0].Dims, []int64{3, 224, 224}) ||
		c.Input[0].Format != inference.ModelInput_FORMAT_NCHW || c.Output[0].LabelFilename != "labels.txt" ||
		c.GetDynamicBatching().GetDefaultQueuePolicy().GetMaxQueueSize() != 64 || c.InstanceGroup[0].Count != 2 ||
		c.Parameters["preprocess.mean"].GetStringValue() != "[0.5, 0.5, 0.5]" {
		t.Fatalf("parsed %v", c)
	}
	// Triton's parser refuses unknown fields and bad enums, naming where: so does this one.
	for _, bad := range []string{"max_batch_sizes: 8", "input [ { data_type: TYPE_FLOAT } ]", "name: ", "dims: [3,"} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "ModelConfig") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestMapHonouredFields(t *testing.T) {
	got, err := Map(parse(t, resnetPbtxt), "/repo/resnet50", Options{ModelKey: modelKey})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"input":  map[string]any{"name": "data", "type": "float32", "layout": "NCHW", "width": 224, "height": 224},
		"output": map[string]any{"name": "resnetv17_dense0_fwd"},
		"labels": "/repo/resnet50/labels.txt",
		"batching": map[string]any{"max_batch_size": 8, "preferred_batch_sizes": []int{4, 8}, "max_queue_delay": "500us",
			"max_queue_size": 64, "default_timeout": "2000000us"},
		"version_policy": map[string]any{"latest": 2},
		"runtime":        map[string]any{"instances": 2, "intra_op_threads": 2},
		"preprocess":     map[string]any{"mean": []any{0.5, 0.5, 0.5}},
	}
	if !reflect.DeepEqual(got.Keys, want) {
		t.Errorf("keys\n%#v\nwant\n%#v", got.Keys, want)
	}
	if got.From["preprocess.mean"] != "parameters[preprocess.mean]" || got.From["batching.max_queue_size"] != "dynamic_batching.default_queue_policy.max_queue_size" {
		t.Errorf("from %v", got.From)
	}
	// Every field set and not honoured is named, with what the gateway does instead.
	w := strings.Join(got.Unhonoured, "\n")
	for _, s := range []string{"dynamic_batching.preserve_ordering (each request", "model_warmup (each instance is warmed", "parameters[cudnn_conv_algo_search]"} {
		if !strings.Contains(w, s) {
			t.Errorf("unhonoured %q: missing %q", w, s)
		}
	}
	if len(got.Unhonoured) != 3 {
		t.Errorf("unhonoured: %q", got.Unhonoured)
	}
	// Strict: the same fields are an error.
	if _, err := Map(parse(t, resnetPbtxt), "/repo/resnet50", Options{ModelKey: modelKey, Strict: true}); err == nil ||
		!strings.Contains(err.Error(), "strict") || !strings.Contains(err.Error(), "model_warmup") {
		t.Errorf("strict: %v", err)
	}
}

func TestMapRefusesWhatChangesTheModel(t *testing.T) {
	for text, want := range map[string]string{
		`platform: "tensorrt_plan"`:                    `platform: "tensorrt_plan" is not served`,
		`backend: "python"`:                            `backend: "python" is not served`,
		`name: "other"`:                                `name: "other" is not the model's folder name "m"`,
		`sequence_batching {}`:                         "sequence_batching:",
		`ensemble_scheduling {}`:                       "ensemble_scheduling:",
		`input [{name: "a"}, {name: "b"}]`:             "input: 2 inputs (a, b)",
		`input [{data_type: TYPE_FP16}]`:               "input[0].data_type: TYPE_FP16",
		`input [{dims: [1, 224, 224]}]`:                "channels",
		`input [{dims: [224, 224]}]`:                   "input[0].dims: [224 224] is not an image's",
		`model_transaction_policy { decoupled: true }`: "model_transaction_policy.decoupled",
		`batch_input [{kind: BATCH_ELEMENT_COUNT}]`:    "batch_input",
		`parameters { key: "intra_op_thread_count" value { string_value: "x" } }`: "parameters[intra_op_thread_count]",
		`dynamic_batching { priority_levels: 20 }`:                                "priority_levels: 20",
	} {
		_, err := Map(parse(t, text), "/repo/m", Options{ModelKey: modelKey})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
	// What the folder says is what the gateway serves: an empty config is honoured whole,
	// but for Triton's default scheduler (each request alone), which is named.
	got, err := Map(parse(t, ""), "/repo/m", Options{})
	if err != nil || len(got.Keys) != 0 || len(got.Unhonoured) != 1 || !strings.Contains(got.Unhonoured[0], "no dynamic_batching") {
		t.Errorf("empty config: %v %v", got, err)
	}
}

func TestMapLayoutsAndParameters(t *testing.T) {
	for text, want := range map[string]map[string]any{
		// No format: the dims tell the layout.
		`max_batch_size: 4 input [{dims: [299, 299, 3]}]`: {"input": map[string]any{"layout": "NHWC", "width": 299, "height": 299}, "batching": map[string]any{"max_batch_size": 4}},
		// Dynamic sizes are the model's (or a parameter's) to tell.
		`max_batch_size: 4 input [{format: FORMAT_NCHW, dims: [3, -1, -1]}]`: {"input": map[string]any{"layout": "NCHW"}, "batching": map[string]any{"max_batch_size": 4}},
		// max_batch_size 0: the dims hold the batch axis, fixed at 1 here.
		`input [{data_type: TYPE_UINT8, dims: [1, 3, 32, 48]}]`: {"input": map[string]any{"type": "uint8", "layout": "NCHW", "width": 48, "height": 32}, "batching": map[string]any{"max_batch_size": 1}},
		// A parameter naming a key sets it, its value read as YAML; a mapping sets several.
		`parameters { key: "task" value { string_value: "detect" } }`:                            {"task": "detect"},
		`parameters { key: "preprocess" value { string_value: "{mode: stretch, scale: raw}" } }`: {"preprocess": map[string]any{"mode": "stretch", "scale": "raw"}},
		// A parameter wins over the field it overrides.
		`max_batch_size: 8 parameters { key: "batching.max_batch_size" value { string_value: "auto" } }`: {"batching": map[string]any{"max_batch_size": "auto"}},
		`instance_group [{count: 2}, {kind: KIND_CPU}]`:                                                  {"runtime": map[string]any{"instances": 3}},
		`version_policy { specific { versions: [1, 3] } }`:                                               {"version_policy": map[string]any{"specific": []int{1, 3}}},
		`version_policy { all {} }`:                                                                      {"version_policy": map[string]any{"all": true}},
		`dynamic_batching {}`:                                                                            {"batching": map[string]any{"max_queue_delay": "0us"}},
	} {
		got, err := Map(parse(t, text), "/repo/m", Options{ModelKey: modelKey})
		if err != nil {
			t.Errorf("%s: %v", text, err)
			continue
		}
		if !reflect.DeepEqual(got.Keys, want) {
			t.Errorf("%s:\n%#v\nwant\n%#v", text, got.Keys, want)
		}
	}
	got, err := Map(parse(t, `instance_group [{kind: KIND_GPU, gpus: [0]}] dynamic_batching { priority_levels: 2 default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100 } }`), "/repo/m", Options{ModelKey: modelKey})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(got.Unhonoured, "\n")
	for _, s := range []string{"instance_group[0].kind KIND_GPU", "instance_group[0].gpus", "priority_levels (served as 2 levels", "timeout_action DELAY", "allow_timeout_override false"} {
		if !strings.Contains(w, s) {
			t.Errorf("unhonoured %q: missing %q", w, s)
		}
	}
}

func TestAnswerCompletesWhatWasRead(t *testing.T) {
	served := Served{Name: "m", InputName: "input", OutputName: "output", InputType: "float32", Layout: "NCHW",
		Width: 224, Height: 224, Classes: 1000, MaxBatchSize: 4, Instances: 2}
	// No config.pbtxt: Triton's auto-complete.
	a, err := Answer(nil, served)
	if err != nil {
		t.Fatal(err)
	}
	want := &inference.ModelConfig{Name: "m", Platform: Platform, Backend: Backend, MaxBatchSize: 4,
		Input:         []*inference.ModelInput{{Name: "input", DataType: inference.DataType_TYPE_FP32, Format: inference.ModelInput_FORMAT_NCHW, Dims: []int64{3, 224, 224}}},
		Output:        []*inference.ModelOutput{{Name: "output", DataType: inference.DataType_TYPE_FP32, Dims: []int64{1000}}},
		InstanceGroup: []*inference.ModelInstanceGroup{{Name: "m", Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 2}},
		VersionPolicy: &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}}},
	}
	if !proto.Equal(a, want) {
		t.Errorf("answer\n%v\nwant\n%v", a, want)
	}
	// What was read stays as read (the caller's message untouched); gaps are filled.
	read := parse(t, resnetPbtxt)
	before := proto.Clone(read)
	served.InputName, served.OutputName, served.MaxBatchSize = "data", "resnetv17_dense0_fwd", 8
	a, err = Answer(read, served)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(read, before) {
		t.Error("Answer changed what was read")
	}
	if a.Backend != Backend || a.MaxBatchSize != 8 || a.InstanceGroup[0].Count != 2 || a.GetVersionPolicy().GetLatest().GetNumVersions() != 2 ||
		a.GetDynamicBatching().GetDefaultQueuePolicy().GetMaxQueueSize() != 64 || len(a.ModelWarmup) != 1 || a.Output[0].LabelFilename != "labels.txt" {
		t.Errorf("answer %v", a)
	}
	// max_batch_size 0: answered with the batch the gateway serves, dims per sample.
	a, err = Answer(parse(t, `input [{dims: [-1, 3, 224, 224]}] output [{name: "output", dims: [-1, 1000]}]`), served)
	if err != nil || a.MaxBatchSize != 8 || !slices.Equal(a.Input[0].Dims, []int64{3, 224, 224}) || !slices.Equal(a.Output[0].Dims, []int64{1000}) {
		t.Errorf("batchless: %v %v", a, err)
	}
	// Dims or types the model contradicts are refused, naming the output.
	for text, want := range map[string]string{
		`output [{name: "output", dims: [1001]}]`:                      "dims are [1001], but the model's output has 1000 classes",
		`output [{name: "output", data_type: TYPE_INT64}]`:             "data_type is TYPE_INT64",
		`max_batch_size: 2 output [{name: "output", dims: [1, 1000]}]`: "dims are [1 1000]",
	} {
		served.OutputName = "output"
		if _, err := Answer(parse(t, text), served); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}
