package stats

import (
	"sync"
	"testing"
	"time"
)

func TestCounts(t *testing.T) {
	m := New(4)
	t0 := time.UnixMilli(1_700_000_000_000)
	m.Request(Request{Start: t0, Total: 10, Queue: 1, Input: 2, Infer: 3, Output: 4}, true)
	m.Request(Request{Start: t0.Add(-time.Second), Total: 20, Queue: 1, Input: 2, Infer: 3, Output: 4}, true)
	m.Request(Request{Start: t0.Add(-time.Second), Total: 7, Queue: 100}, false) // stages of a failure are not counted
	m.Batch(2, 5, 6, 7)
	m.Batch(2, 1, 1, 1)
	m.Batch(4, 1, 2, 3)
	m.Batch(5, 1, 1, 1) // out of range: a sample count only
	s := m.Snapshot()
	if s.LastInference != uint64(t0.UnixMilli()) {
		t.Errorf("last_inference %d, want %d (the latest arrival)", s.LastInference, t0.UnixMilli())
	}
	st := s.InferenceStats
	want := Infer{Success: Duration{2, 30}, Fail: Duration{1, 7}, Queue: Duration{2, 2},
		ComputeInput: Duration{2, 4}, ComputeInfer: Duration{2, 6}, ComputeOutput: Duration{2, 8}}
	if st != want {
		t.Errorf("inference_stats %+v, want %+v", st, want)
	}
	if s.InferenceCount != 13 || s.ExecutionCount != 3 {
		t.Errorf("inference_count %d, execution_count %d; want 13, 3", s.InferenceCount, s.ExecutionCount)
	}
	wantB := []Batch{
		{BatchSize: 2, ComputeInput: Duration{2, 6}, ComputeInfer: Duration{2, 7}, ComputeOutput: Duration{2, 8}},
		{BatchSize: 4, ComputeInput: Duration{1, 1}, ComputeInfer: Duration{1, 2}, ComputeOutput: Duration{1, 3}},
	}
	if len(s.BatchStats) != len(wantB) {
		t.Fatalf("batch_stats %+v, want %+v", s.BatchStats, wantB)
	}
	for i := range wantB {
		if s.BatchStats[i] != wantB[i] {
			t.Errorf("batch_stats[%d] %+v, want %+v", i, s.BatchStats[i], wantB[i])
		}
	}
}

func TestEmpty(t *testing.T) {
	s := New(8).Snapshot()
	if s.LastInference != 0 || s.InferenceCount != 0 || s.BatchStats == nil || len(s.BatchStats) != 0 {
		t.Errorf("a new model's snapshot: %+v (batch_stats must be empty, not nil: JSON [])", s)
	}
}

func TestConcurrent(t *testing.T) {
	m := New(8)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				m.Request(Request{Start: time.Now(), Total: 3, Queue: 1}, i%5 != 0)
				m.Batch(g%8+1, 1, 1, 1)
				if i%50 == 0 {
					m.Snapshot()
				}
			}
		})
	}
	wg.Wait()
	s := m.Snapshot()
	st := s.InferenceStats
	if st.Success.Count+st.Fail.Count != goroutines*each || st.Fail.Count != goroutines*each/5 {
		t.Errorf("success %d, fail %d", st.Success.Count, st.Fail.Count)
	}
	var samples uint64
	for _, b := range s.BatchStats {
		samples += b.BatchSize * b.ComputeInfer.Count
	}
	if s.ExecutionCount != goroutines*each || samples != s.InferenceCount {
		t.Errorf("execution_count %d, inference_count %d, samples in batch_stats %d", s.ExecutionCount, s.InferenceCount, samples)
	}
}

// TestNoAllocs: counting is on every request's path.
func TestNoAllocs(t *testing.T) {
	m := New(8)
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		m.Request(Request{Start: now, Total: 3}, true)
		m.Request(Request{Start: now, Total: 3}, false)
		m.Batch(3, 1, 2, 3)
	}); n != 0 {
		t.Errorf("%v allocations per request and batch", n)
	}
}

// BenchmarkRequest: what a request and its share of a batch run cost, from every core at once.
func BenchmarkRequest(b *testing.B) {
	m := New(8)
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Request(Request{Start: now, Total: 3, Queue: 1, Input: 1, Infer: 1}, true)
			m.Batch(4, 1, 1, 1)
		}
	})
}
