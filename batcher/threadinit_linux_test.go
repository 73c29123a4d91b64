//go:build linux

package batcher

import (
	"context"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestThreadInitOwnsTheLoopThread: ThreadInit runs once on each batch loop's own OS thread,
// and every batch of that loop runs on that same thread (it is locked to it for good).
func TestThreadInitOwnsTheLoopThread(t *testing.T) {
	var mu sync.Mutex
	initTids := map[int]int{} // tid -> ThreadInit calls
	runTids := map[int]map[int]bool{}
	b, err := New[int, int](Config{MaxBatchSize: 1, Instances: 2, ThreadInit: func() {
		mu.Lock()
		initTids[unix.Gettid()]++
		mu.Unlock()
	}}, func(instance int, in []int, out []int) error {
		mu.Lock()
		if runTids[instance] == nil {
			runTids[instance] = map[int]bool{}
		}
		runTids[instance][unix.Gettid()] = true
		mu.Unlock()
		copy(out, in)
		return nil
	}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if out, err := b.Submit(context.Background(), i, SubmitOptions{}); err != nil || out != i {
				t.Errorf("item %d: %d, %v", i, out, err)
			}
		})
	}
	wg.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(initTids) != 2 {
		t.Fatalf("ThreadInit ran on threads %v, want 2 threads once each", initTids)
	}
	for tid, n := range initTids {
		if n != 1 {
			t.Errorf("ThreadInit ran %d times on thread %d", n, tid)
		}
	}
	for inst, tids := range runTids {
		if len(tids) != 1 {
			t.Errorf("instance %d ran batches on threads %v, want one", inst, tids)
		}
		for tid := range tids {
			if initTids[tid] != 1 {
				t.Errorf("instance %d ran on thread %d, which ThreadInit did not see", inst, tid)
			}
		}
	}
}
