package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func facts(in []int64, outs ...TensorFacts) ModelFacts {
	return ModelFacts{Inputs: []TensorFacts{{Name: "images", Type: "float32", Shape: in}}, Outputs: outs}
}

func out(name, typ string, shape ...int64) TensorFacts {
	return TensorFacts{Name: name, Type: typ, Shape: shape}
}

// TestTaskInferred: the outputs of the common exports say their task and decoder; Complete
// fills the keys they tell and says so.
func TestTaskInferred(t *testing.T) {
	var b strings.Builder
	for i := range 80 {
		fmt.Fprintf(&b, "%d: 'c%d', ", i, i)
	}
	names80 := "{" + strings.TrimSuffix(b.String(), ", ") + "}"
	for _, c := range []struct {
		name  string
		yaml  string
		f     ModelFacts
		meta  map[string]string
		check func(t *testing.T, m *Model, c Completion)
	}{
		{"ultraface", "", facts([]int64{1, 3, 240, 320}, out("scores", "float32", 1, 4420, 2), out("boxes", "float32", 1, 4420, 4)), nil,
			func(t *testing.T, m *Model, c Completion) {
				d := m.Detect
				if m.Task != TaskDetect || d.Decoder != DecoderBoxesScores || d.Boxes != "boxes" || d.Scores != "scores" || d.BoxUnits != "normalized" ||
					d.BoxFormat != "xyxy" || d.Background != "on" || c.Detect != (DetectFacts{Anchors: 4420, Classes: 2}) ||
					m.Preprocess.Mode != "stretch" || m.Batching.MaxBatchSize != 1 || c.Classes != 2 {
					t.Errorf("%+v %+v %+v", m.Detect, c.Detect, m.Preprocess)
				}
			}},
		{"yolov8", "", facts([]int64{1, 3, 640, 640}, out("output0", "float32", 1, 84, 8400)), nil,
			func(t *testing.T, m *Model, c Completion) {
				if m.Detect.Decoder != DecoderYOLO || m.Detect.Objectness != "off" || c.Detect != (DetectFacts{Anchors: 8400, Classes: 80}) ||
					m.Preprocess.Mode != "letterbox" || m.Preprocess.Pad != 114 || !reflect.DeepEqual(m.Preprocess.Std, []float32{1, 1, 1}) ||
					!reflect.DeepEqual(m.Preprocess.Mean, []float32{0, 0, 0}) || m.Detect.BoxFormat != "cxcywh" || m.Detect.BoxUnits != "pixels" {
					t.Errorf("%+v %+v %+v", m.Detect, c.Detect, m.Preprocess)
				}
			}},
		{"yolov5", "", facts([]int64{-1, 3, 640, 640}, out("output", "float32", -1, 25200, 85)), nil,
			func(t *testing.T, m *Model, c Completion) {
				if m.Detect.Objectness != "on" || c.Detect != (DetectFacts{Anchors: 25200, Classes: 80, Transposed: true}) {
					t.Errorf("%+v %+v", m.Detect, c.Detect)
				}
			}},
		{"v5 values in v8's layout, told by the labels", "", facts([]int64{-1, 3, 640, 640}, out("output", "float32", -1, 85, 8400)),
			map[string]string{"names": names80},
			func(t *testing.T, m *Model, c Completion) {
				if m.Detect.Objectness != "on" || c.Detect.Classes != 80 || len(c.Labels) != 80 {
					t.Errorf("%+v %+v %d labels", m.Detect, c.Detect, len(c.Labels))
				}
			}},
		{"end2end", "", facts([]int64{1, 3, 640, 640}, out("num_dets", "int32", 1, 1), out("det_boxes", "float32", 1, 100, 4),
			out("det_scores", "float32", 1, 100), out("det_classes", "int32", 1, 100)), nil,
			func(t *testing.T, m *Model, c Completion) {
				d := m.Detect
				if d.Decoder != DecoderNMS || d.Boxes != "det_boxes" || d.Scores != "det_scores" || d.Classes != "det_classes" || d.Count != "num_dets" ||
					c.Detect.Anchors != 100 || m.Preprocess.Mode != "letterbox" || c.Labels != nil {
					t.Errorf("%+v %+v", d, c.Detect)
				}
			}},
		{"packed", "", facts([]int64{1, 3, 640, 640}, out("output0", "float32", 1, 300, 6)), map[string]string{"author": "Ultralytics", "task": "detect"},
			func(t *testing.T, m *Model, c Completion) {
				if m.Detect.Decoder != DecoderNMS || !c.Detect.Packed || c.Detect.Anchors != 300 || m.Detect.Boxes != "output0" {
					t.Errorf("%+v %+v", m.Detect, c.Detect)
				}
			}},
		{"features", "", facts([]int64{-1, 3, 224, 224}, out("features", "float32", -1, 1280)), nil,
			func(t *testing.T, m *Model, c Completion) {
				if m.Task != TaskEmbed || m.Embed.Output != "features" || c.Embed.Dim != 1280 || m.Preprocess.Mode != "shorter_side" || !m.Preprocess.FullDecode {
					t.Errorf("%+v %+v", m.Embed, c.Embed)
				}
			}},
		{"pooled of two", ", task: embed", facts([]int64{-1, 3, 224, 224}, out("logits", "float32", -1, 1000), out("pooled", "float32", -1, 1280, 1, 1)), nil,
			func(t *testing.T, m *Model, c Completion) {
				if m.Embed.Output != "pooled" || c.Embed.Dim != 1280 {
					t.Errorf("%+v %+v", m.Embed, c.Embed)
				}
			}},
		{"explicit output", ", task: embed, embed: {output: logits, normalize: true}, preprocess: {full_decode: false}", facts([]int64{-1, 3, 224, 224}, out("logits", "float32", -1, 1000), out("pooled", "float32", -1, 1280, 1, 1)), nil,
			func(t *testing.T, m *Model, c Completion) {
				if m.Embed.Output != "logits" || c.Embed.Dim != 1000 || !m.Embed.Normalize || m.Preprocess.FullDecode {
					t.Errorf("%+v %+v", m.Embed, c.Embed)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, m := parseModel(t, c.yaml)
			c.f.Metadata = c.meta
			comp, err := m.Complete(c.f, cfg.Server)
			if err != nil {
				t.Fatal(err)
			}
			if s := settings(comp); !strings.Contains(s["task"], m.Task) {
				t.Errorf("task %s noted as %q", m.Task, s["task"])
			}
			t.Logf("%s: outputs %v", c.name, m.OutputNames())
			c.check(t, m, comp)
		})
	}
}

// TestTaskErrorsNameTheKey: a model that does not fit its task stops the start with an error
// naming the key and the output's shape.
func TestTaskErrorsNameTheKey(t *testing.T) {
	cls := facts([]int64{-1, 3, 224, 224}, out("logits", "float32", -1, 1000))
	for _, c := range []struct {
		yaml string
		f    ModelFacts
		want string
	}{
		{", task: embed", facts([]int64{-1, 3, 224, 224}, out("grid", "float32", -1, 7, 7, 512)), "embed.output: the model's output grid float32 [? 7 7 512] is not a float32 vector"},
		{", task: embed", facts([]int64{-1, 3, 224, 224}, out("a", "float32", -1, 10), out("b", "float32", -1, 10)), "embed.output: the model has 2 outputs (a float32 [? 10], b float32 [? 10]): set embed.output"},
		{", task: embed, embed: {output: nope}", cls, `embed.output: the model has no output "nope"`},
		{", task: detect", cls, "detect.decoder: the model's outputs (logits float32 [? 1000]) fit no detector layout"},
		{", task: detect, detect: {decoder: yolo}", facts([]int64{-1, 3, 640, 640}, out("o", "float32", -1, 84, 84)), "detect.boxes: the model's output o float32 [? 84 84] is not YOLO's"},
		{", task: detect, detect: {decoder: boxes_scores}", facts([]int64{1, 3, 240, 320}, out("boxes", "float32", 1, 10, 4), out("scores", "float32", 1, 11, 2)), "boxes_scores needs boxes [batch, N, 4] and scores [batch, N, classes]"},
		{", task: detect, detect: {decoder: boxes_scores, scores: s}", facts([]int64{1, 3, 240, 320}, out("boxes", "float32", 1, 10, 4), out("s", "int64", 1, 10, 2)), "detect.scores: the model's output s int64 [1 10 2] is not a float32 output"},
		{", task: detect, detect: {decoder: nms}", facts([]int64{1, 3, 64, 64}, out("x", "float32", 1, 10, 4), out("y", "float32", 1, 10)), "detect.boxes: no output of"},
		{"", facts([]int64{-1, 3, 224, 224}, out("a", "float32", -1, 10), out("b", "float32", -1, 10)), "or task: embed or detect"},
	} {
		cfg, m := parseModel(t, c.yaml)
		_, err := m.Complete(c.f, cfg.Server)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: err = %v, want %q", c.yaml, c.f.Outputs, err, c.want)
		}
	}
}

// TestTaskKeysValidated: the new keys are parsed strictly and checked, each error naming its
// key; an explicit 0 threshold is kept.
func TestTaskKeysValidated(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{", task: segment", `task: must be classify, embed, detect, got "segment"`},
		{", detect: {decoder: ssd}", `detect.decoder: must be boxes_scores, yolo, nms, got "ssd"`},
		{", detect: {score_threshold: 1.5}", "detect.score_threshold: must be in [0, 1]"},
		{", detect: {iou_threshold: 0}", "detect.iou_threshold: must be in (0, 1]"},
		{", detect: {max_detections: 0}", "detect.max_detections: must be positive"},
		{", detect: {box_units: inches}", `detect.box_units: must be normalized, pixels, got "inches"`},
		{", detect: {decoder: yolo, box_format: xyxy}", "a YOLO output's boxes are cxcywh"},
		{", preprocess: {pad: 256}", "preprocess.pad: must be in [0, 255]"},
		{", preprocess: {mode: fit}", "must be shorter_side, stretch or letterbox"},
		{", detect: {treshold: 0.5}", "field treshold not found"},
	} {
		_, err := Parse([]byte("models:\n  - {name: m, path: m.onnx"+c.yaml+"}\n"), "/x")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.yaml, err, c.want)
		}
	}
	_, m := parseModel(t, ", detect: {score_threshold: 0}, preprocess: {pad: 0, mode: letterbox}")
	if m.Detect.ScoreThreshold != 0 || m.Preprocess.Pad != 0 || m.Detect.IOUThreshold != 0.45 || m.Detect.MaxDetections != 100 {
		t.Fatalf("explicit zeros: %+v %+v", m.Detect, m.Preprocess)
	}
	_, m = parseModel(t, "")
	if m.Detect.ScoreThreshold != 0.25 || m.Preprocess.Pad != 114 || m.Detect.Background != "auto" {
		t.Fatalf("defaults: %+v %+v", m.Detect, m.Preprocess)
	}
}

// TestYOLOObjectnessFromLabelFile: the labels' count in a label file tells a YOLO output's
// objectness column.
func TestYOLOObjectnessFromLabelFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "labels.txt")
	if err := os.WriteFile(path, []byte("cat\ndog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse([]byte("models:\n  - {name: m, path: m.onnx, labels: labels.txt}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	m := &cfg.Models[0]
	c, err := m.Complete(facts([]int64{1, 3, 64, 64}, out("output", "float32", 1, 7, 100)), cfg.Server)
	if err != nil {
		t.Fatal(err)
	}
	if m.Detect.Objectness != "on" || c.Detect.Classes != 2 {
		t.Fatalf("%+v %+v", m.Detect, c.Detect)
	}
}

func TestOutputNames(t *testing.T) {
	for _, c := range []struct {
		m    Model
		want []string
	}{
		{Model{Output: Output{Name: "logits"}}, []string{"logits"}},
		{Model{Task: TaskEmbed, Embed: Embed{Output: "features"}}, []string{"features"}},
		{Model{Task: TaskDetect, Detect: Detect{Decoder: DecoderYOLO, Boxes: "output0"}}, []string{"output0"}},
		{Model{Task: TaskDetect, Detect: Detect{Decoder: DecoderBoxesScores, Boxes: "boxes", Scores: "scores"}}, []string{"boxes", "scores"}},
		{Model{Task: TaskDetect, Detect: Detect{Decoder: DecoderNMS, Boxes: "b", Scores: "s", Count: "n"}}, []string{"b", "s", "n"}},
	} {
		if got := c.m.OutputNames(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.m, got, c.want)
		}
	}
}
