package batcher

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is an injected run function that doubles its inputs, records
// every batch, optionally sleeps (fake clock) and optionally blocks on gate.
type recorder struct {
	mu        sync.Mutex
	batches   [][]int
	instances []int
	started   []time.Duration
	active    int
	maxActive int
	start     time.Time
	service   func(n int) time.Duration
	gate      chan struct{} // when not nil, each run waits for one value
	fail      func(in []int) error
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) run(instance int, in []int, out []int) error {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(in))
	r.instances = append(r.instances, instance)
	r.started = append(r.started, time.Since(r.start))
	r.active++
	r.maxActive = max(r.maxActive, r.active)
	r.mu.Unlock()
	if r.gate != nil {
		<-r.gate
	}
	if r.service != nil {
		time.Sleep(r.service(len(in)))
	}
	r.mu.Lock()
	r.active--
	r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(in); err != nil {
			return err
		}
	}
	for i, v := range in {
		out[i] = 2 * v
	}
	return nil
}

func (r *recorder) snapshot() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]int, len(r.batches))
	for i, b := range r.batches {
		out[i] = slices.Clone(b)
		slices.Sort(out[i])
	}
	return out
}

func (r *recorder) ran(v int) bool {
	for _, b := range r.snapshot() {
		if slices.Contains(b, v) {
			return true
		}
	}
	return false
}

type result struct {
	v   int
	err error
	at  time.Duration // since the recorder's start
}

// submit runs Submit in a goroutine and returns its result channel.
func submit(b *Batcher[int, int], r *recorder, ctx context.Context, v, prio int) <-chan result {
	ch := make(chan result, 1)
	go func() {
		out, err := b.Submit(ctx, v, SubmitOptions{Priority: prio})
		ch <- result{out, err, time.Since(r.start)}
	}()
	return ch
}

func mustNew(t *testing.T, cfg Config, r *recorder, hooks Hooks) *Batcher[int, int] {
	t.Helper()
	b, err := New(cfg, r.run, hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// ready reports whether ch has a result, without blocking.
func ready(ch <-chan result) (result, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return result{}, false
	}
}

func wantOK(t *testing.T, ch <-chan result, in int, at time.Duration) {
	t.Helper()
	r, ok := ready(ch)
	if !ok {
		t.Fatalf("item %d: no result yet", in)
	}
	if r.err != nil || r.v != 2*in || r.at != at {
		t.Fatalf("item %d: got (%d, %v) at %v, want (%d, nil) at %v", in, r.v, r.err, r.at, 2*in, at)
	}
}

func wantErr(t *testing.T, ch <-chan result, target error, at time.Duration) {
	t.Helper()
	r, ok := ready(ch)
	if !ok {
		t.Fatalf("no result yet, want %v", target)
	}
	if !errors.Is(r.err, target) || r.at != at {
		t.Fatalf("got (%d, %v) at %v, want %v at %v", r.v, r.err, r.at, target, at)
	}
}

func wantPending(t *testing.T, chs ...<-chan result) {
	t.Helper()
	for i, ch := range chs {
		if r, ok := ready(ch); ok {
			t.Fatalf("submit %d: unexpected result %+v", i, r)
		}
	}
}

func wantBatches(t *testing.T, r *recorder, want ...[]int) {
	t.Helper()
	got := r.snapshot()
	if len(got) != len(want) {
		t.Fatalf("batches = %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("batches = %v, want %v", got, want)
		}
	}
}

// drops counts Dropped hook calls.
type drops struct {
	mu sync.Mutex
	n  map[DropReason]int
}

func (d *drops) hook(r DropReason) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[DropReason]int{}
	}
	d.n[r]++
}

func (d *drops) get(r DropReason) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[r]
}

func TestNewValidates(t *testing.T) {
	r := newRecorder()
	bad := []Config{
		{MaxBatchSize: 0},
		{MaxBatchSize: 4, MaxQueueDelay: -1},
		{MaxBatchSize: 4, MaxQueueSize: -1},
		{MaxBatchSize: 4, Instances: -1},
		{MaxBatchSize: 4, Priorities: -1},
		{MaxBatchSize: 4, DefaultTimeout: -1},
		{MaxBatchSize: 4, PreferredBatchSizes: []int{5}},
		{MaxBatchSize: 4, PreferredBatchSizes: []int{0}},
		{MaxBatchSize: 4, Adaptive: &AdaptiveConfig{}},
		{MaxBatchSize: 4, Adaptive: &AdaptiveConfig{LatencyTarget: time.Second, Smoothing: 2}},
	}
	for _, cfg := range bad {
		if b, err := New(cfg, r.run, Hooks{}); err == nil {
			b.Close(context.Background())
			t.Errorf("New(%+v) succeeded, want error", cfg)
		}
	}
	if _, err := New[int, int](Config{MaxBatchSize: 1}, nil, Hooks{}); err == nil {
		t.Error("New with nil run succeeded")
	}
	b, err := New(Config{MaxBatchSize: 8, Instances: 2}, r.run, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.QueueCap(); got != 1024 {
		t.Errorf("default QueueCap = %d, want 1024", got)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFlushBySize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		b := mustNew(t, Config{MaxBatchSize: 3, MaxQueueDelay: time.Hour}, r, Hooks{})
		c1 := submit(b, r, context.Background(), 1, 0)
		c2 := submit(b, r, context.Background(), 2, 0)
		synctest.Wait()
		wantPending(t, c1, c2)
		if got := b.QueueLen(); got != 2 {
			t.Fatalf("QueueLen = %d, want 2", got)
		}
		c3 := submit(b, r, context.Background(), 3, 0)
		synctest.Wait()
		wantOK(t, c1, 1, 0)
		wantOK(t, c2, 2, 0)
		wantOK(t, c3, 3, 0)
		wantBatches(t, r, []int{1, 2, 3})
	})
}

func TestFlushByTimeFromOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		var waits []time.Duration
		var mu sync.Mutex
		b := mustNew(t, Config{MaxBatchSize: 10, MaxQueueDelay: 10 * time.Millisecond}, r, Hooks{
			QueueWait: func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() },
		})
		c1 := submit(b, r, context.Background(), 1, 0)
		time.Sleep(6 * time.Millisecond)
		c2 := submit(b, r, context.Background(), 2, 0)
		time.Sleep(3 * time.Millisecond) // t=9ms
		synctest.Wait()
		wantPending(t, c1, c2)
		time.Sleep(time.Millisecond) // t=10ms: window of the oldest ends
		synctest.Wait()
		wantOK(t, c1, 1, 10*time.Millisecond)
		wantOK(t, c2, 2, 10*time.Millisecond)
		wantBatches(t, r, []int{1, 2})
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(waits)
		if !slices.Equal(waits, []time.Duration{4 * time.Millisecond, 10 * time.Millisecond}) {
			t.Fatalf("queue waits = %v, want [4ms 10ms]", waits)
		}
	})
}

func TestZeroDelayDispatchesImmediately(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		b := mustNew(t, Config{MaxBatchSize: 8}, r, Hooks{})
		c := submit(b, r, context.Background(), 7, 0)
		synctest.Wait()
		wantOK(t, c, 7, 0)
	})
}

func TestPreferredBatchSizes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.gate = make(chan struct{})
		b := mustNew(t, Config{MaxBatchSize: 8, MaxQueueDelay: 100 * time.Millisecond, PreferredBatchSizes: []int{4, 2, 4}}, r, Hooks{})
		c1 := submit(b, r, context.Background(), 1, 0)
		synctest.Wait()
		wantPending(t, c1)
		c2 := submit(b, r, context.Background(), 2, 0)
		synctest.Wait()
		wantBatches(t, r, []int{1, 2}) // preferred size 2 reached: dispatched at once
		// While that batch runs, 5 items queue up.
		var cs []<-chan result
		for v := 10; v < 15; v++ {
			cs = append(cs, submit(b, r, context.Background(), v, 0))
			synctest.Wait()
		}
		r.gate <- struct{}{} // finish batch 1
		synctest.Wait()
		wantOK(t, c1, 1, 0)
		wantOK(t, c2, 2, 0)
		if got := r.snapshot(); len(got) != 2 || len(got[1]) != 4 {
			t.Fatalf("batches = %v, want second batch of the largest preferred size 4", got)
		}
		r.gate <- struct{}{}
		synctest.Wait()
		if got := b.QueueLen(); got != 1 {
			t.Fatalf("QueueLen = %d, want 1 (waiting for its window)", got)
		}
		time.Sleep(100 * time.Millisecond)
		r.gate <- struct{}{}
		synctest.Wait()
		for i, c := range cs {
			if res, ok := ready(c); !ok || res.err != nil || res.v != 2*(10+i) {
				t.Fatalf("item %d: %+v, %v", 10+i, res, ok)
			}
		}
		if got := r.snapshot(); len(got) != 3 || len(got[2]) != 1 {
			t.Fatalf("batches = %v", got)
		}
	})
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.gate = make(chan struct{})
		var d drops
		b := mustNew(t, Config{MaxBatchSize: 1, MaxQueueSize: 2}, r, Hooks{Dropped: d.hook})
		c1 := submit(b, r, context.Background(), 1, 0)
		synctest.Wait() // 1 is running
		c2 := submit(b, r, context.Background(), 2, 0)
		c3 := submit(b, r, context.Background(), 3, 0)
		synctest.Wait()
		c4 := submit(b, r, context.Background(), 4, 0)
		synctest.Wait()
		wantErr(t, c4, ErrQueueFull, 0)
		wantPending(t, c1, c2, c3)
		if d.get(DropQueueFull) != 1 || b.Stats().QueueFull != 1 {
			t.Fatalf("queue-full not counted: %+v", b.Stats())
		}
		for range 3 {
			r.gate <- struct{}{}
		}
		synctest.Wait()
		wantOK(t, c1, 1, 0)
		wantOK(t, c2, 2, 0)
		wantOK(t, c3, 3, 0)
	})
}

func TestCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		var d drops
		b := mustNew(t, Config{MaxBatchSize: 3, MaxQueueDelay: time.Hour}, r, Hooks{Dropped: d.hook})
		ctx, cancel := context.WithCancel(context.Background())
		ca := submit(b, r, ctx, 1, 0)
		cb := submit(b, r, context.Background(), 2, 0)
		time.Sleep(time.Millisecond)
		cancel()
		synctest.Wait()
		wantErr(t, ca, context.Canceled, time.Millisecond) // answered at once
		wantPending(t, cb)
		if got := b.QueueLen(); got != 1 {
			t.Fatalf("QueueLen = %d, want 1", got)
		}
		// Two more fill the batch: the cancelled item takes no slot.
		cc := submit(b, r, context.Background(), 3, 0)
		synctest.Wait()
		wantPending(t, cb, cc)
		cd := submit(b, r, context.Background(), 4, 0)
		synctest.Wait()
		wantOK(t, cb, 2, time.Millisecond)
		wantOK(t, cc, 3, time.Millisecond)
		wantOK(t, cd, 4, time.Millisecond)
		wantBatches(t, r, []int{2, 3, 4})
		if d.get(DropCanceled) != 1 || b.Stats().Canceled != 1 {
			t.Fatalf("cancel not counted: %+v", b.Stats())
		}
	})
}

func TestCancelWhileRunningWaitsForResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 5 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 2}, r, Hooks{})
		ctx, cancel := context.WithCancel(context.Background())
		c := submit(b, r, ctx, 1, 0)
		time.Sleep(time.Millisecond) // running now
		cancel()
		synctest.Wait()
		wantPending(t, c)
		time.Sleep(4 * time.Millisecond)
		synctest.Wait()
		wantOK(t, c, 1, 5*time.Millisecond)
	})
}

func TestDeadlineExpiresWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		var d drops
		b := mustNew(t, Config{MaxBatchSize: 4, MaxQueueDelay: 100 * time.Millisecond}, r, Hooks{Dropped: d.hook})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		ca := submit(b, r, ctx, 1, 0)
		time.Sleep(5 * time.Millisecond)
		cb := submit(b, r, context.Background(), 2, 0)
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		wantErr(t, ca, context.DeadlineExceeded, 10*time.Millisecond)
		// The window now counts from b, the oldest remaining item.
		time.Sleep(94 * time.Millisecond) // t=104ms
		synctest.Wait()
		wantPending(t, cb)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		wantOK(t, cb, 2, 105*time.Millisecond)
		wantBatches(t, r, []int{2})
		if d.get(DropExpired) != 1 || b.Stats().Expired != 1 {
			t.Fatalf("expiry not counted: %+v", b.Stats())
		}
	})
}

func TestExpiredItemNeverTakesSlot(t *testing.T) {
	// Items expire while the only instance is busy; when it frees, the
	// next batch is formed of live items only.
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 20 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 2, DisableShedding: true}, r, Hooks{})
		c0 := submit(b, r, context.Background(), 100, 0)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		ce := submit(b, r, ctx, 1, 0)
		synctest.Wait()
		c2 := submit(b, r, context.Background(), 2, 0)
		c3 := submit(b, r, context.Background(), 3, 0)
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		wantOK(t, c0, 100, 20*time.Millisecond)
		wantErr(t, ce, context.DeadlineExceeded, 20*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		wantOK(t, c2, 2, 40*time.Millisecond)
		wantOK(t, c3, 3, 40*time.Millisecond)
		wantBatches(t, r, []int{100}, []int{2, 3})
	})
}

func TestDefaultTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		b := mustNew(t, Config{MaxBatchSize: 8, MaxQueueDelay: time.Hour, DefaultTimeout: 20 * time.Millisecond}, r, Hooks{})
		ca := submit(b, r, context.Background(), 1, 0)
		early, c1 := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer c1()
		cb := submit(b, r, early, 2, 0)
		late, c2 := context.WithTimeout(context.Background(), time.Hour)
		defer c2()
		cc := submit(b, r, late, 3, 0)
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		wantErr(t, cb, context.DeadlineExceeded, 5*time.Millisecond)
		wantPending(t, ca, cc)
		time.Sleep(15 * time.Millisecond)
		synctest.Wait()
		wantErr(t, ca, context.DeadlineExceeded, 20*time.Millisecond)
		wantErr(t, cc, context.DeadlineExceeded, 20*time.Millisecond)
		wantBatches(t, r)
		if got := b.Stats().Expired; got != 3 {
			t.Fatalf("Expired = %d, want 3", got)
		}
		// The pooled timer is reused correctly for the next item.
		cd := submit(b, r, context.Background(), 4, 0)
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		wantErr(t, cd, context.DeadlineExceeded, 40*time.Millisecond)
	})
}

func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.gate = make(chan struct{})
		b := mustNew(t, Config{MaxBatchSize: 2, Priorities: 3}, r, Hooks{})
		c0 := submit(b, r, context.Background(), 100, 0)
		synctest.Wait() // running, blocked on gate
		order := []struct{ v, prio int }{{1, 0}, {2, 0}, {3, 2}, {4, 1}, {5, 9}, {6, -1}}
		var cs []<-chan result
		for _, o := range order {
			cs = append(cs, submit(b, r, context.Background(), o.v, o.prio))
			synctest.Wait()
		}
		for range 4 {
			r.gate <- struct{}{}
			synctest.Wait()
		}
		wantOK(t, c0, 100, 0)
		for i, o := range order {
			wantOK(t, cs[i], o.v, 0)
		}
		// 5 (clamped to 2) and 3 (level 2, FIFO) first, then 4, then level 0 FIFO.
		got := r.snapshot()
		want := [][]int{{100}, {3, 5}, {1, 4}, {2, 6}}
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("batches = %v, want %v", got, want)
			}
		}
	})
}

func TestInstancesOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 10 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 2, MaxQueueDelay: time.Hour, Instances: 2}, r, Hooks{})
		c1 := submit(b, r, context.Background(), 1, 0)
		c2 := submit(b, r, context.Background(), 2, 0)
		time.Sleep(time.Millisecond)
		c3 := submit(b, r, context.Background(), 3, 0)
		c4 := submit(b, r, context.Background(), 4, 0)
		synctest.Wait()
		time.Sleep(9 * time.Millisecond)
		synctest.Wait()
		wantOK(t, c1, 1, 10*time.Millisecond)
		wantOK(t, c2, 2, 10*time.Millisecond)
		wantPending(t, c3, c4)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		wantOK(t, c3, 3, 11*time.Millisecond) // ran concurrently, not at 20ms
		wantOK(t, c4, 4, 11*time.Millisecond)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.maxActive != 2 || r.instances[0] == r.instances[1] {
			t.Fatalf("maxActive = %d, instances = %v", r.maxActive, r.instances)
		}
	})
}

func TestCloseDrainsAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 5 * time.Millisecond }
		b, err := New(Config{MaxBatchSize: 2, MaxQueueDelay: time.Hour}, r.run, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		var cs []<-chan result
		for v := range 5 {
			cs = append(cs, submit(b, r, context.Background(), v, 0))
		}
		synctest.Wait()
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(r.start); got != 15*time.Millisecond {
			t.Fatalf("Close returned after %v, want 15ms", got)
		}
		synctest.Wait()
		for v, c := range cs {
			if res, ok := ready(c); !ok || res.err != nil || res.v != 2*v {
				t.Fatalf("item %d: %+v %v", v, res, ok)
			}
		}
		if _, err := b.Submit(context.Background(), 9, SubmitOptions{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Submit after Close: %v, want ErrClosed", err)
		}
		if err := b.Close(context.Background()); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if s := b.Stats(); s.Completed != 5 || s.Batches != 3 || s.Queued != 0 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

func TestCloseWithExpiredContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.gate = make(chan struct{})
		var d drops
		b, err := New(Config{MaxBatchSize: 1}, r.run, Hooks{Dropped: d.hook})
		if err != nil {
			t.Fatal(err)
		}
		c1 := submit(b, r, context.Background(), 1, 0)
		synctest.Wait() // running
		c2 := submit(b, r, context.Background(), 2, 0)
		c3 := submit(b, r, context.Background(), 3, 0)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want DeadlineExceeded", err)
		}
		synctest.Wait()
		wantErr(t, c2, ErrClosed, 10*time.Millisecond)
		wantErr(t, c3, ErrClosed, 10*time.Millisecond)
		wantPending(t, c1)
		if d.get(DropClosed) != 2 {
			t.Fatalf("DropClosed = %d, want 2", d.get(DropClosed))
		}
		r.gate <- struct{}{} // the running batch still completes
		synctest.Wait()
		wantOK(t, c1, 1, 10*time.Millisecond)
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRunErrorDeliveredToBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		boom := errors.New("boom")
		r.fail = func(in []int) error {
			if slices.Contains(in, 1) {
				return boom
			}
			return nil
		}
		var batchErrs []error
		var mu sync.Mutex
		b := mustNew(t, Config{MaxBatchSize: 2, MaxQueueDelay: time.Hour}, r, Hooks{
			Batch: func(_, _ int, _ time.Duration, err error) { mu.Lock(); batchErrs = append(batchErrs, err); mu.Unlock() },
		})
		c1 := submit(b, r, context.Background(), 1, 0)
		c2 := submit(b, r, context.Background(), 2, 0)
		synctest.Wait()
		c3 := submit(b, r, context.Background(), 3, 0)
		c4 := submit(b, r, context.Background(), 4, 0)
		synctest.Wait()
		for _, c := range []<-chan result{c1, c2} {
			res := <-c
			var re *RunError
			if !errors.Is(res.err, boom) || !errors.As(res.err, &re) || re.Size != 2 || res.v != 0 {
				t.Fatalf("got %+v, want *RunError wrapping boom", res)
			}
		}
		wantOK(t, c3, 3, 0)
		wantOK(t, c4, 4, 0)
		if s := b.Stats(); s.Failed != 2 || s.Completed != 2 {
			t.Fatalf("stats = %+v", s)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(batchErrs) != 2 || !errors.Is(batchErrs[0], boom) || batchErrs[1] != nil {
			t.Fatalf("Batch hook errors = %v", batchErrs)
		}
	})
}

func TestAdaptiveLowLoadDispatchesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(n int) time.Duration { return 2*time.Millisecond + time.Duration(n)*500*time.Microsecond }
		b := mustNew(t, Config{MaxBatchSize: 16, Adaptive: &AdaptiveConfig{LatencyTarget: 20 * time.Millisecond}}, r, Hooks{})
		for i := range 10 {
			start := time.Since(r.start)
			c := submit(b, r, context.Background(), i, 0)
			time.Sleep(2500 * time.Microsecond)
			synctest.Wait()
			wantOK(t, c, i, start+2500*time.Microsecond) // no waiting: only the run time
			time.Sleep(100 * time.Millisecond)           // sparse arrivals
		}
	})
}

func TestAdaptiveGrowsBatchesWithinTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		const target = 20 * time.Millisecond
		r.service = func(n int) time.Duration { return 2*time.Millisecond + time.Duration(n)*500*time.Microsecond }
		b := mustNew(t, Config{MaxBatchSize: 32, Adaptive: &AdaptiveConfig{LatencyTarget: target}}, r, Hooks{})
		const n = 300
		var cs []<-chan result
		var sent []time.Duration
		for i := range n {
			sent = append(sent, time.Since(r.start))
			cs = append(cs, submit(b, r, context.Background(), i, 0))
			time.Sleep(time.Millisecond) // 1000 items/s
		}
		time.Sleep(time.Second)
		synctest.Wait()
		var worst time.Duration
		for i, c := range cs {
			res, ok := ready(c)
			if !ok || res.err != nil || res.v != 2*i {
				t.Fatalf("item %d: %+v %v", i, res, ok)
			}
			if i >= 50 { // after warm-up
				worst = max(worst, res.at-sent[i])
			}
		}
		batches := r.snapshot()
		late := batches[len(batches)/2:]
		items := 0
		for _, bt := range late {
			items += len(bt)
		}
		mean := float64(items) / float64(len(late))
		s := b.Stats()
		t.Logf("batches=%d mean size (2nd half)=%.1f worst latency=%v model a=%v b=%v gap=%v", len(batches), mean, worst, s.ServiceBase, s.ServicePerItem, s.ArrivalGap)
		if worst > target {
			t.Errorf("worst latency %v exceeds target %v", worst, target)
		}
		if mean < 4 {
			t.Errorf("mean batch size %.1f, want batches to grow under load", mean)
		}
		if d := s.ServicePerItem - 500*time.Microsecond; d < -50*time.Microsecond || d > 50*time.Microsecond {
			t.Errorf("fitted per-item time %v, want about 500µs", s.ServicePerItem)
		}
		if d := s.ServiceBase - 2*time.Millisecond; d < -200*time.Microsecond || d > 200*time.Microsecond {
			t.Errorf("fitted base time %v, want about 2ms", s.ServiceBase)
		}
	})
}

func TestAdaptiveWindowCappedByMaxQueueDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 10 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 64, Instances: 2, MaxQueueDelay: 3 * time.Millisecond, Adaptive: &AdaptiveConfig{LatencyTarget: time.Second}}, r, Hooks{})
		// Steady arrivals (gap 400µs) make the batcher want to wait up to
		// the 1s target; the 3ms cap counted from the oldest item stops it.
		c0 := submit(b, r, context.Background(), 1000, 0) // idle: dispatched at once, runs 10ms
		var cs []<-chan result
		for i := range 12 {
			time.Sleep(400 * time.Microsecond)
			cs = append(cs, submit(b, r, context.Background(), i, 0))
			if i == 6 { // t=2.8ms
				synctest.Wait()
				wantPending(t, cs...)
			}
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		wantOK(t, c0, 1000, 10*time.Millisecond)
		// oldest at 0.4ms, so latest = 3.4ms; when item 7 arrives at 3.2ms
		// the next one (3.6ms) is expected too late: dispatch 8 items.
		for i, c := range cs[:8] {
			wantOK(t, c, i, 13200*time.Microsecond)
		}
		if got := r.snapshot(); len(got) < 2 || len(got[1]) != 8 {
			t.Fatalf("batches = %v", got)
		}
	})
}

func TestAdaptiveDispatchesWhenArrivalsPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 10 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 8, Instances: 2, Adaptive: &AdaptiveConfig{LatencyTarget: time.Second}}, r, Hooks{})
		// Arrivals every 1ms while instance 0 is busy, then a pause: the
		// batch leaves 2 gaps after the last arrival instead of waiting for
		// the 1s target.
		var cs []<-chan result
		for i := range 4 {
			cs = append(cs, submit(b, r, context.Background(), i, 0))
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		wantOK(t, cs[0], 0, 10*time.Millisecond) // idle batcher: dispatched at once
		for i := 1; i < 4; i++ {
			wantOK(t, cs[i], i, 15*time.Millisecond) // last arrival 3ms + 2·1ms, then 10ms run
		}
	})
}

// warmUp runs batches of sizes 1 and 2 so that the model fits S(n) exactly.
func warmUp(t *testing.T, b *Batcher[int, int], r *recorder) {
	t.Helper()
	for i := range 4 {
		var cs []<-chan result
		for j := 0; j <= i%2; j++ {
			cs = append(cs, submit(b, r, context.Background(), -1-i*2-j, 0))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		for _, c := range cs {
			if res := <-c; res.err != nil {
				t.Fatal(res.err)
			}
		}
	}
}

func TestShedding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 10 * time.Millisecond }
		var d drops
		b := mustNew(t, Config{MaxBatchSize: 2, MaxQueueDelay: time.Millisecond, Priorities: 2}, r, Hooks{Dropped: d.hook})

		// Cold model: nothing is shed, even with a tight deadline.
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		c := submit(b, r, ctx, 1, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		if res := <-c; errors.Is(res.err, ErrWouldMissDeadline) {
			t.Fatal("shed before the model was warm")
		}
		cancel()
		warmUp(t, b, r)
		if s := b.Stats(); (s.ServiceBase-10*time.Millisecond).Abs() > time.Microsecond || s.ServicePerItem.Abs() > time.Microsecond {
			t.Fatalf("model a=%v b=%v, want 10ms, 0", s.ServiceBase, s.ServicePerItem)
		}

		t0 := time.Since(r.start)
		busy := submit(b, r, context.Background(), 100, 0) // runs [t0+1ms, t0+11ms)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		var queued []<-chan result
		for v := range 4 { // two full batches ahead
			queued = append(queued, submit(b, r, context.Background(), 200+v, 0))
		}
		synctest.Wait()
		// q = 5 → 3 batches → 30ms predicted: a 25ms deadline cannot be met.
		tight, c1 := context.WithTimeout(context.Background(), 25*time.Millisecond)
		defer c1()
		cs := submit(b, r, tight, 300, 0)
		synctest.Wait()
		wantErr(t, cs, ErrWouldMissDeadline, t0+time.Millisecond)
		// Higher priority jumps the queue: q = 1 → 10ms predicted.
		ch := submit(b, r, tight, 301, 1)
		// DefaultTimeout-free deadline long enough is accepted.
		loose, c2 := context.WithTimeout(context.Background(), time.Second)
		defer c2()
		cl := submit(b, r, loose, 302, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		for _, q := range append(queued, busy, ch, cl) {
			if res := <-q; res.err != nil {
				t.Fatalf("unexpected %v", res.err)
			}
		}
		if d.get(DropShed) != 1 || b.Stats().Shed != 1 {
			t.Fatalf("shed not counted: %+v", b.Stats())
		}
		if r.ran(300) {
			t.Fatal("shed item was run")
		}
	})
}

func TestSheddingDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 10 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 2, MaxQueueDelay: time.Millisecond, DisableShedding: true}, r, Hooks{})
		warmUp(t, b, r)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		start := time.Since(r.start)
		c := submit(b, r, ctx, 1, 0)
		time.Sleep(time.Second)
		synctest.Wait()
		// Not shed; it ran (taken at 1ms) and its result arrives after the deadline.
		wantOK(t, c, 1, start+11*time.Millisecond)
	})
}

func TestSubmitWithDoneContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		b := mustNew(t, Config{MaxBatchSize: 2}, r, Hooks{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Submit(ctx, 1, SubmitOptions{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want Canceled", err)
		}
		synctest.Wait()
		wantBatches(t, r)
	})
}

func TestDropReasonString(t *testing.T) {
	for r, want := range map[DropReason]string{DropCanceled: "canceled", DropExpired: "expired", DropShed: "shed", DropQueueFull: "queue_full", DropClosed: "closed", 99: "unknown"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", r, got, want)
		}
	}
}

// TestPredictWait: the predicted wait before an item's own run is the runs of the full batches
// queued ahead of it (what the gateway's admission bounds by a queue target; the batcher
// refuses nothing for it).
func TestPredictWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		r.service = func(int) time.Duration { return 10 * time.Millisecond }
		b := mustNew(t, Config{MaxBatchSize: 2, MaxQueueDelay: time.Millisecond}, r, Hooks{})
		if _, ok := b.PredictWait(0); ok {
			t.Fatal("a prediction before any run")
		}
		warmUp(t, b, r)
		busy := submit(b, r, context.Background(), 100, 0) // runs [t0+1ms, t0+11ms)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		var queued []<-chan result
		for v := range 4 { // 0, 1, 2, 3 ahead → waits 0, 0, 10ms, 10ms
			if w, ok := b.PredictWait(0); !ok || w != time.Duration(v/2)*10*time.Millisecond {
				t.Fatalf("PredictWait with %d queued = %v, %v", v, w, ok)
			}
			queued = append(queued, submit(b, r, context.Background(), 200+v, 0))
			synctest.Wait()
		}
		// Four queued: one more follows two full batches, and is queued all the same.
		if w, _ := b.PredictWait(0); w != 20*time.Millisecond {
			t.Fatalf("PredictWait with 4 queued = %v, want 20ms", w)
		}
		queued = append(queued, submit(b, r, context.Background(), 300, 0))
		time.Sleep(time.Second)
		synctest.Wait()
		for _, q := range append(queued, busy) {
			if res := <-q; res.err != nil {
				t.Fatalf("unexpected %v", res.err)
			}
		}
		if !r.ran(300) {
			t.Fatal("an item past what a queue target would allow was not run")
		}
		if w, ok := b.PredictWait(0); !ok || w != 0 {
			t.Fatalf("PredictWait on an empty queue = %v, %v", w, ok)
		}
	})
}
