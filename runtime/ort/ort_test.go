package ort

import (
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func initORT(t testing.TB) {
	t.Helper()
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		lib, _ = filepath.Abs("../../.deps/onnxruntime/libonnxruntime.so")
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skip("ONNX Runtime is not installed (run scripts/setup-onnxruntime.sh or set ONNXRUNTIME_LIB):", err)
	}
	if err := Init(lib); err != nil {
		t.Fatal(err)
	}
}

const defaultModel = "../../models/mobilenet_v3_small/model.onnx"

func newDefault(t testing.TB, maxBatch int) *Session[float32] {
	t.Helper()
	s, err := NewSession[float32](SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, MaxBatchSize: maxBatch, IntraOp: 1, InterOp: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestInspectDefaultModel(t *testing.T) {
	initORT(t)
	in, out, err := Inspect(defaultModel)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 1 || in[0].Name != "input" || in[0].Type != "float32" || len(in[0].Shape) != 4 || in[0].Shape[0] != -1 || in[0].Shape[1] != 3 {
		t.Fatalf("inputs %v", in)
	}
	if len(out) != 1 || out[0].Name != "output" || len(out[0].Shape) != 2 || out[0].Shape[1] != 11 {
		t.Fatalf("outputs %v", out)
	}
}

// A row's scores do not depend on the batch it runs in, nor on the rows around it.
func TestBatchRowsMatchSingleRuns(t *testing.T) {
	initORT(t)
	s := newDefault(t, 8)
	if s.Classes() != 11 || s.RowLen() != 3*224*224 {
		t.Fatalf("classes %d rowlen %d", s.Classes(), s.RowLen())
	}
	rng := rand.New(rand.NewSource(1))
	rows := make([][]float32, 5)
	for i := range rows {
		rows[i] = make([]float32, s.RowLen())
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64())
		}
	}
	single := make([][]float32, len(rows))
	for i, r := range rows {
		copy(s.Input(0), r)
		out, err := s.Run(1)
		if err != nil {
			t.Fatal(err)
		}
		single[i] = append([]float32(nil), out...)
	}
	for i, r := range rows {
		copy(s.Input(i), r)
	}
	out, err := s.Run(len(rows))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		for k := 0; k < 11; k++ {
			if d := math.Abs(float64(out[i*11+k] - single[i][k])); d > 1e-4 {
				t.Fatalf("row %d class %d: %v in a batch, %v alone", i, k, out[i*11+k], single[i][k])
			}
		}
	}
	if _, err := s.Run(9); err == nil {
		t.Fatal("Run(9) on a session of 8 rows succeeded")
	}
}

func TestModelMismatchErrors(t *testing.T) {
	initORT(t)
	for name, cfg := range map[string]SessionConfig{
		"input name":  {InputName: "x", OutputName: "output", InputShape: []int64{3, 224, 224}},
		"output name": {InputName: "input", OutputName: "y", InputShape: []int64{3, 224, 224}},
		"shape":       {InputName: "input", OutputName: "output", InputShape: []int64{3, 224}},
	} {
		cfg.ModelPath, cfg.MaxBatchSize = defaultModel, 4
		if _, err := NewSession[float32](cfg); !errors.Is(err, ErrModel) {
			t.Errorf("%s: err = %v, want ErrModel", name, err)
		}
	}
	if _, err := NewSession[uint8](SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, MaxBatchSize: 1}); !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), "is float32, not uint8") {
		t.Errorf("a float32 model as uint8: err = %v", err)
	}
	if _, err := NewSession[float32](SessionConfig{ModelPath: "/nonexistent.onnx", InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, MaxBatchSize: 1}); err == nil {
		t.Error("missing model file accepted")
	}
}

func BenchmarkRun(b *testing.B) {
	initORT(b)
	for _, n := range []int{1, 8, 32} {
		b.Run("batch"+itoa(n), func(b *testing.B) {
			s := newDefault(b, n)
			for i := 0; i < n; i++ {
				in := s.Input(i)
				for j := range in {
					in[j] = float32(j%255) / 255
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Run(n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/image")
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Sessions made with Share run concurrently on one ONNX Runtime session, each with its own
// buffers: every goroutine gets its own rows' scores (as the original session alone computes
// them, on this machine), and the session outlives the Close of the one it was shared from.
func TestShareConcurrentRuns(t *testing.T) {
	initORT(t)
	s := newDefault(t, 2)
	rng := rand.New(rand.NewSource(2))
	const instances = 3
	rows := make([][]float32, instances)
	want := make([][]float32, instances)
	for i := range rows {
		rows[i] = make([]float32, s.RowLen())
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64())
		}
		copy(s.Input(0), rows[i])
		out, err := s.Run(1)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = append([]float32(nil), out...)
	}
	shared := []*Session[float32]{s}
	for range instances - 1 {
		shared = append(shared, s.Share())
	}
	errs := make(chan error, instances)
	for i, sh := range shared {
		go func() {
			for range 20 {
				copy(sh.Input(0), rows[i])
				copy(sh.Input(1), rows[(i+1)%instances])
				out, err := sh.Run(2)
				if err != nil {
					errs <- err
					return
				}
				for k := range 11 {
					if math.Abs(float64(out[k]-want[i][k])) > 1e-4 || math.Abs(float64(out[11+k]-want[(i+1)%instances][k])) > 1e-4 {
						errs <- errors.New("instance " + itoa(i) + ": scores of another instance's rows")
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range instances {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	last := shared[instances-1]
	copy(last.Input(0), rows[0])
	if _, err := last.Run(1); err != nil {
		t.Fatalf("a shared session after the original's Close: %v", err)
	}
	for _, sh := range shared[1:] {
		if err := sh.Close(); err != nil {
			t.Fatal(err)
		}
		if err := sh.Close(); err != nil { // a second Close is a no-op
			t.Fatal(err)
		}
	}
}
