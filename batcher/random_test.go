package batcher

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRandomized hammers a batcher with concurrent submits, random
// priorities, cancellations, deadlines, run failures and a Close in the
// middle, and checks that every caller gets exactly its own result or its
// own error, and that no dropped item was ever run.
func TestRandomized(t *testing.T) {
	defer goleak.VerifyNone(t)
	const (
		workers = 24
		perG    = 150
		total   = workers * perG
	)
	type runInfo struct {
		count  int
		failed bool
	}
	var mu sync.Mutex
	runs := map[int]*runInfo{}
	errRun := errors.New("injected")
	run := func(_ int, in []int, out []int) error {
		fail := in[0]%13 == 0
		mu.Lock()
		for _, v := range in {
			ri := runs[v]
			if ri == nil {
				ri = &runInfo{}
				runs[v] = ri
			}
			ri.count++
			ri.failed = fail
		}
		mu.Unlock()
		if in[0]%5 == 0 {
			runtime.Gosched()
		}
		if fail {
			return errRun
		}
		for i, v := range in {
			out[i] = 2 * v
		}
		return nil
	}
	b, err := New(Config{
		MaxBatchSize:        8,
		MaxQueueDelay:       100 * time.Microsecond,
		MaxQueueSize:        48,
		PreferredBatchSizes: []int{4},
		Instances:           2,
		Priorities:          3,
		DefaultTimeout:      20 * time.Millisecond,
	}, run, Hooks{})
	if err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		in, out int
		err     error
	}
	results := make([]outcome, total)
	var submitted atomic.Int64
	closeAt := int64(total / 2)
	closeErr := make(chan error, 1)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := range perG {
				id := g*perG + i + 1
				ctx := context.Background()
				var cancel context.CancelFunc
				switch rng.IntN(4) {
				case 0:
					ctx, cancel = context.WithCancel(ctx)
					if rng.IntN(2) == 0 {
						cancel()
					} else {
						go func() { runtime.Gosched(); cancel() }()
					}
				case 1:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(300))*time.Microsecond)
				}
				if submitted.Add(1) == closeAt {
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						closeErr <- b.Close(ctx)
					}()
				}
				out, err := b.Submit(ctx, id, SubmitOptions{Priority: rng.IntN(3)})
				results[id-1] = outcome{id, out, err}
				if cancel != nil {
					cancel()
				}
				if rng.IntN(3) == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	if err := <-closeErr; err != nil {
		t.Fatalf("Close: %v", err)
	}

	counts := map[string]int{}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range results {
		ri := runs[r.in]
		var re *RunError
		switch {
		case r.err == nil:
			counts["ok"]++
			if r.out != 2*r.in || ri == nil || ri.count != 1 || ri.failed {
				t.Fatalf("item %d: got %d, run info %+v", r.in, r.out, ri)
			}
		case errors.As(r.err, &re):
			counts["run error"]++
			if !errors.Is(r.err, errRun) || ri == nil || ri.count != 1 || !ri.failed || r.out != 0 {
				t.Fatalf("item %d: got %v, run info %+v", r.in, r.err, ri)
			}
		case errors.Is(r.err, context.Canceled), errors.Is(r.err, context.DeadlineExceeded),
			errors.Is(r.err, ErrClosed), errors.Is(r.err, ErrQueueFull), errors.Is(r.err, ErrWouldMissDeadline):
			counts[r.err.Error()]++
			if ri != nil {
				t.Fatalf("item %d answered %v but was run %d times", r.in, r.err, ri.count)
			}
		default:
			t.Fatalf("item %d: unexpected error %v", r.in, r.err)
		}
	}
	if len(runs) != counts["ok"]+counts["run error"] {
		t.Fatalf("%d items run, %d answered from a run", len(runs), counts["ok"]+counts["run error"])
	}
	s := b.Stats()
	if s.Queued != 0 || s.Completed != uint64(counts["ok"]) || s.Failed != uint64(counts["run error"]) {
		t.Fatalf("stats %+v disagree with outcomes %v", s, counts)
	}
	t.Logf("outcomes: %v; batches %d", counts, s.Batches)
}
