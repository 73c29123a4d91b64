package batcher

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// saturate runs `clients` closed-loop callers for d and returns the batches' sizes in order.
func saturate(t *testing.T, b *Batcher[int, int], r *recorder, clients int, d time.Duration) []int {
	t.Helper()
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				v := c*1_000_000 + i
				got, err := b.Submit(context.Background(), v, SubmitOptions{})
				if err != nil || got != 2*v {
					t.Errorf("Submit(%d) = %d, %v", v, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var sizes []int
	for _, bt := range r.snapshot() {
		sizes = append(sizes, len(bt))
	}
	return sizes
}

func meanSize(sizes []int) float64 {
	n := 0
	for _, s := range sizes {
		n += s
	}
	return float64(n) / float64(len(sizes))
}

// On hardware where a larger batch costs more per item (a small CPU: activations fall out of
// the caches), the adaptive mode learns to keep batches small under a saturating load.
func TestAdaptiveLearnsSmallBatchesWhenLargeOnesCostMorePerItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		// 1.9 ms per item alone, rising to 2.6 ms per item at 32 (as measured for
		// MobileNetV3-small on one CPU thread).
		r.service = func(n int) time.Duration {
			return time.Duration(float64(n) * (1900 + 700*float64(n-1)/31) * float64(time.Microsecond))
		}
		b := mustNew(t, Config{MaxBatchSize: 32, MaxQueueSize: 1024, Adaptive: &AdaptiveConfig{LatencyTarget: time.Second}}, r, Hooks{})
		sizes := saturate(t, b, r, 64, 20*time.Second)
		late := sizes[len(sizes)/2:]
		s := b.Stats()
		t.Logf("%d batches; mean size %.1f overall, %.1f in the second half; cap %d", len(sizes), meanSize(sizes), meanSize(late), s.AdaptiveCap)
		// Sizes 1, 2 and 4 cost within 5% per item of each other (capTolerance); 8 and up more.
		if s.AdaptiveCap > 4 {
			t.Errorf("adaptive cap %d, want 4 or less", s.AdaptiveCap)
		}
		if m := meanSize(late); m > 5 {
			t.Errorf("mean batch size %.1f in the second half, want small batches", m)
		}
	})
}

// Where a run has a large fixed cost (a GPU, a big model), batches stay as large as allowed.
func TestAdaptiveKeepsLargeBatchesWhenTheyAreCheaperPerItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(n int) time.Duration { return 10*time.Millisecond + time.Duration(n)*200*time.Microsecond }
		b := mustNew(t, Config{MaxBatchSize: 32, MaxQueueSize: 1024, Adaptive: &AdaptiveConfig{LatencyTarget: time.Second}}, r, Hooks{})
		sizes := saturate(t, b, r, 64, 20*time.Second)
		late := sizes[len(sizes)/2:]
		s := b.Stats()
		t.Logf("%d batches; mean size %.1f in the second half; cap %d", len(sizes), meanSize(late), s.AdaptiveCap)
		if s.AdaptiveCap != 32 {
			t.Errorf("adaptive cap %d, want 32", s.AdaptiveCap)
		}
		if m := meanSize(late); m < 28 {
			t.Errorf("mean batch size %.1f in the second half, want about 32", m)
		}
	})
}

// After the cost per item of large batches improves, the periodic exploration above the cap
// raises the cap again.
func TestAdaptiveCapRisesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		var mu sync.Mutex
		convex := true
		r.service = func(n int) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			if convex {
				return time.Duration(n*n) * time.Millisecond
			}
			return 10*time.Millisecond + time.Duration(n)*100*time.Microsecond
		}
		b := mustNew(t, Config{MaxBatchSize: 16, MaxQueueSize: 1024, Adaptive: &AdaptiveConfig{LatencyTarget: time.Second}}, r, Hooks{})
		saturate(t, b, r, 32, 10*time.Second)
		if c := b.Stats().AdaptiveCap; c != 1 {
			t.Fatalf("cap %d under a convex cost, want 1 (per item %v, samples %v)", c, b.eff.perItem, b.eff.samples)
		}
		mu.Lock()
		convex = false
		mu.Unlock()
		saturate(t, b, r, 32, 20*time.Second)
		if c := b.Stats().AdaptiveCap; c != 16 {
			t.Fatalf("cap %d after the cost became concave, want 16", c)
		}
	})
}

func TestSizeClass(t *testing.T) {
	for n, want := range map[int]int{1: 0, 2: 1, 3: 2, 4: 2, 5: 3, 8: 3, 9: 4, 16: 4, 17: 5, 32: 5, 33: 6} {
		if got := sizeClass(n); got != want {
			t.Errorf("sizeClass(%d) = %d, want %d", n, got, want)
		}
	}
	e := newEfficiency(24, 0.2)
	if len(e.samples) != 6 || e.classTop(5) != 24 || e.cap() != 24 {
		t.Fatalf("classes %d, top %d, cap %d", len(e.samples), e.classTop(5), e.cap())
	}
}
