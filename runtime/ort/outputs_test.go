package ort

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/imagegate/imagegate/internal/onnxtest"
)

const ultraface = "../../../shared/models/ultraface-rfb-320/version-RFB-320.onnx"

func writeModel(t *testing.T, g onnxtest.Graph) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(path, g.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// drawRed fills row i of a raw NCHW input of h x w with zeros and a red rectangle
// [x1, x2) x [y1, y2).
func drawRed(in []float32, h, w, x1, y1, x2, y2 int) {
	clear(in)
	for y := y1; y < y2; y++ {
		for x := x1; x < x2; x++ {
			in[y*w+x] = 255
		}
	}
}

// TestRunOutputs: a session with several outputs of several element types runs batches of
// every size; each image's values are its own (Row), in the static outputs' buffers and in
// those ONNX Runtime allocates for a dynamic axis.
func TestRunOutputs(t *testing.T) {
	initORT(t)
	const h, w = 48, 64
	rects := [][4]int{{3, 4, 10, 20}, {0, 0, 64, 48}, {40, 30, 41, 31}}
	for _, c := range []struct {
		layout string
		outs   []string
		// check reads image i's box (x1, y1, x2, y2) from its outputs
		box func(t *testing.T, o []Output, i, n int) [4]float32
	}{
		{onnxtest.RedNMS, []string{"det_boxes", "det_scores", "det_classes", "num_dets"}, func(t *testing.T, o []Output, i, n int) [4]float32 {
			lo, hi := o[0].Row(i, n)
			b := o[0].F32[lo:hi]
			if l, _ := o[2].Row(i, n); o[2].I64[l] != 1 || o[3].I64[i] != 1 || o[1].F32[2*i] != 0.9 {
				t.Fatalf("image %d: class %d count %d score %v", i, o[2].I64[l], o[3].I64[i], o[1].F32[2*i])
			}
			return [4]float32(b[:4])
		}},
		{onnxtest.RedNMSPackedDyn, []string{"output"}, func(t *testing.T, o []Output, i, n int) [4]float32 {
			if !slices.Equal(o[0].Shape, []int64{int64(n), 2, 6}) {
				t.Fatalf("dynamic output's shape %v", o[0].Shape)
			}
			lo, _ := o[0].Row(i, n)
			return [4]float32(o[0].F32[lo : lo+4])
		}},
	} {
		path := writeModel(t, onnxtest.RedBox(h, w, c.layout))
		s, err := NewSession[float32](SessionConfig{ModelPath: path, InputName: "input", OutputNames: c.outs,
			InputShape: []int64{3, h, w}, MaxBatchSize: 3, IntraOp: 1, InterOp: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Run(1); err == nil {
			t.Fatal("Run on a session of several outputs")
		}
		dyn := c.layout == onnxtest.RedNMSPackedDyn
		if sp := s.Outputs(); len(sp) != len(c.outs) || sp[0].Dynamic != dyn || !sp[0].Batched {
			t.Fatalf("%s: outputs %+v", c.layout, sp)
		}
		for _, inst := range []*Session[float32]{s, s.Share()} {
			for n := 1; n <= 3; n++ {
				for i := range n {
					r := rects[(i+n)%3]
					drawRed(inst.Input(i), h, w, r[0], r[1], r[2], r[3])
				}
				out, err := inst.RunOutputs(n)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					r := rects[(i+n)%3]
					want := [4]float32{float32(r[0]), float32(r[1]), float32(r[2]), float32(r[3])}
					if got := c.box(t, out, i, n); got != want {
						t.Fatalf("%s batch %d image %d: box %v, want %v", c.layout, n, i, got, want)
					}
				}
			}
			if inst != s {
				inst.Close()
			}
		}
	}
}

// TestOutputErrors: what a model's outputs cannot give is a start-up error naming the output,
// its shape and the setting.
func TestOutputErrors(t *testing.T) {
	initORT(t)
	path := writeModel(t, onnxtest.RedBox(8, 8, onnxtest.RedNMS))
	cfg := SessionConfig{ModelPath: path, InputName: "input", InputShape: []int64{3, 8, 8}, MaxBatchSize: 2, IntraOp: 1, InterOp: 1}
	cfg.OutputNames = []string{"det_boxes", "nope"}
	if _, err := NewSession[float32](cfg); !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), `no output "nope"`) {
		t.Fatalf("unknown output: %v", err)
	}
	g := onnxtest.Planted(8, 8, onnxtest.Const{Name: "fixed", Dims: []any{int64(2)}, Sizes: []int64{2}, Values: []float32{1, 2}})
	g.Outputs[0].Shape[0] = int64(4) // a first axis that is not the batch
	cfg.ModelPath, cfg.OutputNames = writeModel(t, g), []string{"fixed"}
	if _, err := NewSession[float32](cfg); err == nil || !strings.Contains(err.Error(), "batching.max_batch_size: 1") || !strings.Contains(err.Error(), "fixed float32 [4 2]") {
		t.Fatalf("output without a batch axis: %v", err)
	}
}

// TestUltrafaceSession: the real face detector, an old-style file (initializers listed as
// inputs) with its batch fixed at 1: served with batches of one, its two outputs read.
func TestUltrafaceSession(t *testing.T) {
	initORT(t)
	if _, err := os.Stat(ultraface); err != nil {
		t.Skip("shared model absent: ", err)
	}
	cfg := SessionConfig{ModelPath: ultraface, InputName: "input", OutputNames: []string{"scores", "boxes"},
		InputShape: []int64{3, 240, 320}, MaxBatchSize: 2, IntraOp: 1, InterOp: 1}
	if _, err := NewSession[float32](cfg); err == nil || !strings.Contains(err.Error(), "fixed batch axis of 1") {
		t.Fatalf("batch 2 on a model fixed at 1: %v", err)
	}
	cfg.MaxBatchSize = 1
	s, err := NewSession[float32](cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, sp := range s.Outputs() {
		if !sp.Batched || sp.Dynamic || sp.Row != []int{4420 * 2, 4420 * 4}[i] {
			t.Fatalf("output %+v", sp)
		}
	}
	out, err := s.RunOutputs(1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out[0].Shape, []int64{1, 4420, 2}) || len(out[1].F32) != 4420*4 {
		t.Fatalf("outputs %v %v", out[0].Shape, out[1].Shape)
	}
	// Softmaxed: each anchor's two probabilities add up to 1.
	for a := 0; a < 4420; a += 97 {
		if p := out[0].F32[2*a] + out[0].F32[2*a+1]; p < 0.999 || p > 1.001 {
			t.Fatalf("anchor %d: probabilities add up to %v", a, p)
		}
	}
}

// TestRunOutputsAllocs: a run of outputs of fixed size allocates what onnxruntime_go does per
// call (its C argument arrays, and one per value passed), as a classifier's Run does, and
// nothing of its own.
func TestRunOutputsAllocs(t *testing.T) {
	initORT(t)
	path := writeModel(t, onnxtest.RedBox(16, 16, onnxtest.RedNMS))
	s, err := NewSession[float32](SessionConfig{ModelPath: path, InputName: "input", OutputNames: []string{"det_boxes", "det_scores", "det_classes", "num_dets"},
		InputShape: []int64{3, 16, 16}, MaxBatchSize: 2, IntraOp: 1, InterOp: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cls, err := NewSession[float32](SessionConfig{ModelPath: writeModel(t, onnxtest.Means("float32", "NCHW", int64(16), int64(16), false)),
		InputName: "input", OutputName: "output", InputShape: []int64{3, 16, 16}, MaxBatchSize: 2, IntraOp: 1, InterOp: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cls.Close()
	if _, err := s.RunOutputs(2); err != nil {
		t.Fatal(err)
	}
	if _, err := cls.Run(2); err != nil {
		t.Fatal(err)
	}
	multi := testing.AllocsPerRun(20, func() {
		if _, err := s.RunOutputs(2); err != nil {
			t.Fatal(err)
		}
	})
	single := testing.AllocsPerRun(20, func() {
		if _, err := cls.Run(2); err != nil {
			t.Fatal(err)
		}
	})
	// The library's: per call two arrays, per value passed one (the classifier passes 2 values,
	// this session 5).
	perValue := (single - 2) / 2
	if multi != 2+5*perValue {
		t.Fatalf("%v allocations per run of 5 values; a classifier's run of 2 makes %v", multi, single)
	}
}
