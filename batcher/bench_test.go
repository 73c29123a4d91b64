package batcher

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func noop(int, []int, []int) error { return nil }

func TestSubmitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates and sync.Pool drops items under -race")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hooks := Hooks{
		QueueWait: func(time.Duration) {},
		Batch:     func(int, int, time.Duration, error) {},
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		ctx  context.Context
	}{
		{"background", Config{MaxBatchSize: 8}, context.Background()},
		{"cancelable", Config{MaxBatchSize: 8, Priorities: 2}, ctx},
		{"default-timeout", Config{MaxBatchSize: 8, DefaultTimeout: time.Minute}, ctx},
		{"adaptive", Config{MaxBatchSize: 8, Adaptive: &AdaptiveConfig{LatencyTarget: time.Millisecond}}, ctx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.cfg, noop, hooks)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(context.Background())
			for range 10 { // warm the pool and the lazy timer
				if _, err := b.Submit(tc.ctx, 1, SubmitOptions{Priority: 1}); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(1000, func() {
				if _, err := b.Submit(tc.ctx, 1, SubmitOptions{Priority: 1}); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("Submit allocates %v times per call, want 0", allocs)
			}
		})
	}
}

// BenchmarkSubmit measures batcher overhead per request with a no-op run.
func BenchmarkSubmit(b *testing.B) {
	for _, inst := range []int{1, 2} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("instances=%d/goroutines-per-proc=%d", inst, par), func(b *testing.B) {
				bt, err := New(Config{MaxBatchSize: 32, MaxQueueSize: 4096, Instances: inst}, noop, Hooks{})
				if err != nil {
					b.Fatal(err)
				}
				defer bt.Close(context.Background())
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := bt.Submit(ctx, 1, SubmitOptions{}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				s := bt.Stats()
				if s.Batches > 0 {
					b.ReportMetric(float64(s.Completed)/float64(s.Batches), "items/batch")
				}
			})
		}
	}
}
