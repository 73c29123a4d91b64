package gateway

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/imagegate/imagegate/api/inference"
)

// idleRepo is a repository whose models are Idle (Triton's explicit model control), each
// loaded with a fresh fake runner and, for "cfg", a Triton configuration.
type idleRepo struct {
	mu    sync.Mutex
	names []string
	idle  bool
}

func (r *idleRepo) Specs() ([]ModelSpec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ModelSpec
	for _, n := range r.names {
		out = append(out, ModelSpec{Name: n, Version: "1", Fingerprint: n, Idle: r.idle, Load: func() (ModelOptions, error) {
			o := modelOpts(n, RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
			if n == "cfg" {
				o.Config = &inference.ModelConfig{Name: "cfg", Platform: "onnxruntime_onnx", MaxBatchSize: 4,
					Input: []*inference.ModelInput{{Name: "input", DataType: inference.DataType_TYPE_FP32, Dims: []int64{3, side, side}}}}
			}
			return o, nil
		}})
	}
	return out, nil
}

func (ts *testServer) servedNames() []string {
	var names []string
	for n := range ts.s.models.Load().byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// TestIdleModelsServedOnceLoaded: Idle versions are listed by the index and served only
// between a LoadModel and an UnloadModel of their model; reloads keep that choice.
func TestIdleModelsServedOnceLoaded(t *testing.T) {
	repo := &idleRepo{names: []string{"a", "cfg"}, idle: true}
	s, err := New(testOptions(), repo)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, s)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := ts.servedNames(); len(got) != 0 || s.ready() {
		t.Fatalf("served at start: %v (ready %v)", got, s.ready())
	}
	idx, _ := s.index()
	if len(idx) != 2 || idx[0].State != StateUnavailable || idx[1].State != StateUnavailable {
		t.Fatalf("index: %+v", idx)
	}
	if err := s.LoadModel("cfg"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil { // SIGHUP, a poll: what was loaded stays, nothing more
		t.Fatal(err)
	}
	if got := ts.servedNames(); !slices.Equal(got, []string{"cfg"}) || !s.ready() {
		t.Fatalf("served after loading cfg: %v", got)
	}
	// A configuration in Triton's schema is what .../config answers.
	r := ts.do("GET", "/v2/models/cfg/config", "", nil)
	var c map[string]any
	if r.status != 200 || json.Unmarshal(r.body, &c) != nil || c["platform"] != "onnxruntime_onnx" || c["max_batch_size"] != 4.0 ||
		!strings.Contains(string(r.body), `"dims":[3,8,8]`) || strings.Contains(string(r.body), "TYPE_STRING") {
		t.Errorf("config: %d %s", r.status, r.body)
	}
	if r := ts.do("POST", "/models/cfg/predict", "image/png", solidPNG(t, 20, 10, 100)); r.status != 200 {
		t.Errorf("predict: %d %s", r.status, r.body)
	}
	if err := s.LoadModel("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.UnloadModel("cfg"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := ts.servedNames(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("served after unloading cfg: %v", got)
	}
	idx, _ = s.index()
	for _, e := range idx {
		if want := map[string]string{"a": StateReady, "cfg": StateUnavailable}[e.Name]; e.State != want {
			t.Errorf("index %+v, want %s", e, want)
		}
	}
	if err := s.LoadModel("nope"); err == nil {
		t.Error("loading a model the repository does not hold succeeded")
	}
	// Without Idle, a reload serves every model, as before.
	repo.mu.Lock()
	repo.idle = false
	repo.mu.Unlock()
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := ts.servedNames(); !slices.Equal(got, []string{"a", "cfg"}) {
		t.Fatalf("served without Idle: %v", got)
	}
}
