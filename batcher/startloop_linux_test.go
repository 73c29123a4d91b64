//go:build linux

package batcher

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStartLoopStartsEveryLoop: StartLoop is called once for each instance, and a loop it
// starts on a thread of its own runs every batch of its instance there; Close ends the loops.
func TestStartLoopStartsEveryLoop(t *testing.T) {
	var mu sync.Mutex
	startTids := map[int]int{} // tid -> loops started there
	runTids := map[int]map[int]bool{}
	var ended sync.WaitGroup
	start := func(loop func()) {
		ended.Add(1)
		go func() {
			defer ended.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			mu.Lock()
			startTids[unix.Gettid()]++
			mu.Unlock()
			loop()
		}()
	}
	b, err := New[int, int](Config{MaxBatchSize: 1, Instances: 2, StartLoop: start}, func(instance int, in []int, out []int) error {
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
	ended.Wait() // the loops returned
	mu.Lock()
	defer mu.Unlock()
	if len(startTids) != 2 {
		t.Fatalf("loops started on threads %v, want 2 threads once each", startTids)
	}
	for tid, n := range startTids {
		if n != 1 {
			t.Errorf("%d loops started on thread %d", n, tid)
		}
	}
	for inst, tids := range runTids {
		if len(tids) != 1 {
			t.Errorf("instance %d ran batches on threads %v, want one", inst, tids)
		}
		for tid := range tids {
			if startTids[tid] != 1 {
				t.Errorf("instance %d ran on thread %d, where no loop was started", inst, tid)
			}
		}
	}
}
