package gateway

import (
	"sync"
	"testing"
	"time"
)

// curveRepo serves model m, version 1, whose options (and fingerprint) a test changes.
type curveRepo struct {
	mu    sync.Mutex
	fp    string
	curve []BatchCost
}

func (r *curveRepo) Specs() ([]ModelSpec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	curve := r.curve
	return []ModelSpec{{Name: "m", Version: "1", Fingerprint: r.fp, Load: func() (ModelOptions, error) {
		o := modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
		o.BatchCurve = curve
		return o, nil
	}}}, nil
}

// A model's measured batch curve is a gauge per batch size, of the generation serving: a
// reload that measured other sizes adds theirs and reads 0 for those it did not measure; the
// series go with the model.
func TestBatchCurveMetrics(t *testing.T) {
	repo := &curveRepo{fp: "a", curve: []BatchCost{{1, 2 * time.Millisecond}, {2, 1500 * time.Microsecond}}}
	s, err := New(testOptions(), repo)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, s)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	series := func(b string) string {
		return `gateway_batch_run_per_image_seconds{model="m",version="1",batch="` + b + `"}`
	}
	if a, b := ts.metric(series("1")), ts.metric(series("2")); a != 0.002 || b != 0.0015 || ts.metric(series("4")) != -1 {
		t.Fatalf("first generation: %v %v %v", a, b, ts.metric(series("4")))
	}
	repo.mu.Lock()
	repo.fp, repo.curve = "b", []BatchCost{{1, 3 * time.Millisecond}, {4, time.Millisecond}}
	repo.mu.Unlock()
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if a, b, c := ts.metric(series("1")), ts.metric(series("2")), ts.metric(series("4")); a != 0.003 || b != 0 || c != 0.001 {
		t.Fatalf("second generation: %v %v %v", a, b, c)
	}
	if err := s.UnloadModel("m"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return ts.metric(series("1")) == -1 && ts.metric(series("4")) == -1 })
}
