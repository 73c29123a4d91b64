package ort

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	onnx "github.com/yalue/onnxruntime_go"
)

// ultrafaceWithout writes the shared ultraface model with its initializer inputs dropped, for a
// session made from it (its scan then finds none to drop) to compare with one from the file.
func ultrafaceWithout(t testing.TB) (string, int) {
	t.Helper()
	data, err := os.ReadFile(ultraface)
	if err != nil {
		t.Skip("shared model absent: ", err)
	}
	m, n, err := dropInitializerInputs(data)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "uf.onnx")
	if err := os.WriteFile(path, m, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, n
}

// TestInitializerInputsDropped: the face detector lists its 244 weights as inputs; the
// session drops them (scanModel counts them, the model cache keys on it) and answers what the
// model as it is answers, to float32 rounding (the constant weights are folded and fused).
func TestInitializerInputsDropped(t *testing.T) {
	initORT(t)
	path, n := ultrafaceWithout(t)
	if n != 244 {
		t.Fatalf("%d initializer inputs dropped, want 244", n)
	}
	s, err := scanModel(ultraface, false)
	if err != nil || s.initInputs != 244 || len(s.inputs) != 1 {
		t.Fatalf("scan: %d initializer inputs, inputs %v, %v", s.initInputs, s.inputs, err)
	}
	if again, err := scanModel(path, false); err != nil || again.initInputs != 0 || len(again.inputs) != 1 {
		t.Fatalf("rewritten: %+v %v", again, err)
	}
	if m, k, err := dropInitializerInputs(mustRead(t, path)); err != nil || k != 0 || len(m) != len(mustRead(t, path)) {
		t.Fatalf("a second drop: %d %v", k, err)
	}
	// The file as ONNX Runtime reads it, without the gateway's rewrite: its own session options.
	cfg := SessionConfig{ModelPath: ultraface, InputName: "input", OutputNames: []string{"scores", "boxes"},
		InputShape: []int64{3, 240, 320}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1, CacheDir: "off"}
	dropped, err := NewSession[float32](cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dropped.Close()
	asIs, err := newAsIs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer asIs.Close()
	for i := range dropped.Input(0) {
		v := float32(math.Sin(float64(i)*0.001)) * 0.9 // a smooth pattern in the normalized range
		dropped.Input(0)[i], asIs.Input(0)[i] = v, v
	}
	a, err := dropped.RunOutputs(1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := asIs.RunOutputs(1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range a {
		worst := 0.0
		for i := range a[k].F32 {
			worst = max(worst, math.Abs(float64(a[k].F32[i]-b[k].F32[i])))
		}
		t.Logf("%s: largest difference %.3g", a[k].Name, worst)
		if worst > 1e-4 {
			t.Errorf("%s: differs by %g from the model as it is", a[k].Name, worst)
		}
	}
}

func mustRead(t testing.TB, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newAsIs makes a session from cfg's file exactly as ONNX Runtime reads it: no rewrite.
func newAsIs(cfg SessionConfig) (*Session[float32], error) {
	opts, err := sessionOptions(cfg)
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	core, err := createSession(cfg, nil, opts)
	if err != nil {
		return nil, err
	}
	s := newInstance[float32](core, cfg.InputShape, 3*240*320, 0, 1)
	specs, err := outputSpecs(cfg, []TensorInfo{{Name: "scores", Type: "float32", Shape: []int64{1, 4420, 2}}, {Name: "boxes", Type: "float32", Shape: []int64{1, 4420, 4}}}, true)
	if err != nil {
		return nil, err
	}
	s.multi = newMultiOut(specs, 1)
	s.outputs = make([]onnx.Value, 2)
	return s, nil
}

// BenchmarkInitializerInputs: a face detector's run with its weights listed as inputs (as the
// file is) and dropped (as the gateway loads it).
func BenchmarkInitializerInputs(b *testing.B) {
	initORT(b)
	path, _ := ultrafaceWithout(b)
	for _, c := range []struct{ name, path string }{{"as_is", ultraface}, {"dropped", path}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := SessionConfig{ModelPath: c.path, InputName: "input", OutputNames: []string{"scores", "boxes"},
				InputShape: []int64{3, 240, 320}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1, CacheDir: "off"}
			var s *Session[float32]
			var err error
			if c.name == "as_is" {
				s, err = newAsIs(cfg)
			} else {
				s, err = NewSession[float32](cfg)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for b.Loop() {
				if _, err := s.RunOutputs(1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
