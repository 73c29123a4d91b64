package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/imagegate/imagegate/internal/queue"
)

// Sentinel errors returned by Submit.
var (
	// ErrQueueFull is returned at once when MaxQueueSize items are queued.
	ErrQueueFull = errors.New("batcher: queue full")
	// ErrClosed is returned by Submit after Close was called, and to queued
	// items abandoned because the context given to Close ended first.
	ErrClosed = errors.New("batcher: closed")
	// ErrWouldMissDeadline is returned at once when the service model
	// predicts that the item cannot be answered before its deadline.
	ErrWouldMissDeadline = errors.New("batcher: would miss deadline")
)

// RunError wraps an error returned by the run function. Every caller of the
// failed batch receives the same *RunError; use errors.As to detect it.
type RunError struct {
	Instance int   // run instance that failed
	Size     int   // number of items in the batch
	Err      error // error returned by run
}

func (e *RunError) Error() string {
	return fmt.Sprintf("batcher: run failed (instance %d, batch of %d): %v", e.Instance, e.Size, e.Err)
}

func (e *RunError) Unwrap() error { return e.Err }

// RunFunc runs one batch on the given instance (0..Instances-1). It must fill
// out[i] with the result for in[i]; len(out) == len(in). Both slices are owned
// by the calling batch loop and reused for the next batch: run must not keep
// them (nor the In values' referenced memory) after it returns. Calls with
// different instance indexes run concurrently; calls with the same index never
// overlap. out[i] is handed to the caller of in[i] as is, so memory it
// references must not be reused by run afterwards. A returned error is delivered, wrapped in *RunError, to every
// caller of the batch. A panic in run is a bug and is not recovered.
type RunFunc[In, Out any] func(instance int, in []In, out []Out) error

// AdaptiveConfig enables the adaptive window.
//
// The largest batch formed is not MaxBatchSize but an efficiency cap learnt
// from the run time per item measured for each power-of-two class of batch
// sizes: under a deep queue it steps down from MaxBatchSize while smaller
// batches are cheaper per item, and the class above it is retried every 16
// batches (see efficiency). So on a CPU where large batches cost more per
// item, a saturating load forms small batches; on hardware that rewards
// batching, the largest.
//
// The batcher fits the run time of a batch of n items as S(n) = a + b·n by
// exponentially weighted least squares over successful runs (S = 0 before the
// first one), and tracks the last arrival time tl and the mean gap g between
// accepted arrivals (each gap sample capped at LatencyTarget; g =
// LatencyTarget until two items have arrived). With n items queued (fewer
// than MaxBatchSize and no preferred size reachable) and the oldest queued at
// t0, let
//
//	latest = t0 + LatencyTarget − S(n+1)   (at most t0 + MaxQueueDelay when MaxQueueDelay > 0)
//
// be the last moment at which waiting for one more item still keeps the
// oldest item's wait plus the run of the larger batch within the target. The
// n items are dispatched at once when
//
//   - the first of them arrived while nothing was queued or running (an idle
//     batcher never waits: batching only starts once the runs fall behind), or
//   - now ≥ latest, or
//   - tl + g ≥ latest: the next arrival is not expected in time, or
//   - now ≥ tl + 2g: the next arrival is overdue by a full gap (arrivals
//     paused, e.g. every client is already waiting);
//
// otherwise the batcher waits until min(latest, tl + 2g) or the next arrival,
// whichever comes first, and decides again. So at low load (g large) items go
// out at once, and under steady load batches grow while the target allows.
type AdaptiveConfig struct {
	// LatencyTarget is the target for queue wait plus run time of the oldest
	// queued item; > 0. It steers the window and is not a guarantee: time
	// spent waiting for a busy instance and model error are not bounded.
	LatencyTarget time.Duration
	// Smoothing is the weight of a new observation in the exponentially
	// weighted fits of run time and arrival gap, in (0, 1]; 0 means 0.2.
	Smoothing float64
}

// Config configures a Batcher. Zero values mean the documented defaults.
type Config struct {
	// MaxBatchSize is the largest number of items per run call; >= 1.
	MaxBatchSize int
	// MaxQueueDelay is the window counted from the arrival of the OLDEST
	// queued item; 0 dispatches whatever is queued immediately. In adaptive
	// mode it caps the adaptive window when > 0.
	MaxQueueDelay time.Duration
	// MaxQueueSize is the capacity of the queue; a full queue rejects with
	// ErrQueueFull at once. 0 means max(1024, 2·MaxBatchSize·Instances).
	MaxQueueSize int
	// PreferredBatchSizes, optional, each in [1, MaxBatchSize]: a batch is
	// dispatched as soon as the largest preferred size not above the queued
	// count can be formed, with that size. When the window expires first,
	// everything queued is dispatched.
	PreferredBatchSizes []int
	// Instances is the number of batch loops; each calls run with its own
	// instance index, so one batch is assembled while another runs. 0 means 1.
	Instances int
	// Priorities is the number of priority levels (0 or 1: none). Items of a
	// higher level are taken into the next batch first; FIFO within a level.
	// Sustained higher-level load can starve lower levels (their deadlines
	// still apply).
	Priorities int
	// Adaptive enables the adaptive window when not nil.
	Adaptive *AdaptiveConfig
	// DefaultTimeout, when > 0, is each item's deadline counted from Submit
	// if the context has no earlier deadline.
	DefaultTimeout time.Duration
	// DisableShedding turns off admission shedding. By default, once three
	// runs have succeeded, an item with a deadline (from its context or
	// DefaultTimeout) is refused at once with ErrWouldMissDeadline when its
	// predicted completion is after the deadline. With q = 1 + the items
	// queued at its level or above, B = ceil(q/MaxBatchSize) batches up to
	// its own and R = ceil(B/Instances) rounds of parallel runs, the
	// prediction is now + (R−1)·S(MaxBatchSize) + S(q − (B−1)·MaxBatchSize).
	// Runs in progress, the window and later higher-priority arrivals are not
	// counted, so only items that are late even in the best case are shed.
	DisableShedding bool
	// CostClock, optional, measures what a run costs for the adaptive mode's
	// per-item efficiency (not its latency predictions, which use wall time).
	// It is read on the batch loop's goroutine just before and after run, and
	// when it is set each loop is locked to its OS thread for its lifetime, so
	// a per-thread CPU clock (CLOCK_THREAD_CPUTIME_ID) measures the compute of
	// a single-threaded run without the time it was preempted by other work.
	// nil: wall time.
	CostClock func() time.Duration
	// StartLoop, optional, starts each batch loop: it must run loop on a goroutine of its
	// own and may return at once (the gateway runs each loop on a dedicated OS thread of
	// its choosing). nil: go loop().
	StartLoop func(loop func())
}

// SubmitOptions are per-item options.
type SubmitOptions struct {
	// Priority in [0, Priorities-1], higher first; values outside are clamped.
	Priority int
}

// DropReason says why an item left the queue (or never entered it) without
// being run.
type DropReason uint8

const (
	DropCanceled  DropReason = iota // context cancelled while queued
	DropExpired                     // deadline passed while queued
	DropShed                        // refused at Submit: would miss its deadline
	DropQueueFull                   // refused at Submit: queue full
	DropClosed                      // queued item abandoned when Close's context ended
)

var dropNames = [...]string{"canceled", "expired", "shed", "queue_full", "closed"}

// String returns a short static name usable as a metric label.
func (r DropReason) String() string {
	if int(r) < len(dropNames) {
		return dropNames[r]
	}
	return "unknown"
}

// Hooks are optional callbacks for metrics. They may be called concurrently
// from batch loops and from Submit/Close callers, never while an internal lock
// is held; they must be cheap and must not call back into the Batcher.
type Hooks struct {
	// QueueWait is called per item with the time from Submit to dispatch.
	QueueWait func(d time.Duration)
	// Batch is called after each run call, before its items are answered, with
	// its instance, batch size, run duration and the error run returned.
	Batch func(instance, size int, run time.Duration, err error)
	// Dropped is called for each item dropped or refused without being run.
	Dropped func(reason DropReason)
}

// Stats is a snapshot of counters since New.
type Stats struct {
	Queued    int    // items queued now
	Accepted  uint64 // items enqueued
	Completed uint64 // items answered by a successful run
	Failed    uint64 // items answered with a *RunError
	Batches   uint64 // run calls
	Canceled  uint64 // DropCanceled
	Expired   uint64 // DropExpired
	Shed      uint64 // DropShed
	QueueFull uint64 // DropQueueFull
	Aborted   uint64 // DropClosed
	// ServiceBase and ServicePerItem are the fitted a and b of S(n) = a + b·n.
	ServiceBase, ServicePerItem time.Duration
	// ArrivalGap is the mean gap between arrivals (adaptive mode only).
	ArrivalGap time.Duration
	// AdaptiveCap is the largest batch the adaptive mode currently forms outside exploration
	// (the most efficient size measured so far); 0 outside adaptive mode.
	AdaptiveCap int
}

// minShedSamples is the number of successful runs observed before shedding
// trusts the service model.
const minShedSamples = 3

// item is one submitted value. Its Links hold its place in its level's queue, its arrival
// time and its deadline (zero: none); once removed from the queue (by a loop, by Close or by
// its own caller) a reply is on its way or it is answered already.
type item[In, Out any] struct {
	queue.Links[item[In, Out]]
	in    In
	out   Out
	err   error
	ctx   context.Context
	level int
	reply chan struct{} // capacity 1; result in out/err
	timer *time.Timer   // lazily created, for DefaultTimeout
}

// level is one priority level's FIFO.
type level[In, Out any] = queue.List[item[In, Out], *item[In, Out]]

// Batcher batches items submitted concurrently and runs them with a RunFunc.
// All methods are safe for concurrent use. A Batcher must be closed.
type Batcher[In, Out any] struct {
	cfg      Config
	run      RunFunc[In, Out]
	hooks    Hooks
	prefs    []int
	wakeAt   int // queued count at which a waiting assembler must re-decide
	adaptive bool
	pool     sync.Pool

	tok     chan struct{} // assembler token, capacity 1
	notify  chan struct{} // wakes the assembler, capacity 1
	done    chan struct{} // closed when all loops exited
	running atomic.Int32

	mu         sync.Mutex
	levels     []level[In, Out]
	n          int // items queued
	closed     bool
	asmWaiting bool
	inflight   int  // batches running
	idleStart  bool // adaptive: an item arrived while nothing was queued or running
	model      serviceModel
	eff        efficiency // adaptive mode: per-size run time per item
	st         Stats
}

// New validates cfg and starts cfg.Instances batch loops calling run. The
// returned Batcher must be closed with Close.
func New[In, Out any](cfg Config, run RunFunc[In, Out], hooks Hooks) (*Batcher[In, Out], error) {
	if run == nil {
		return nil, errors.New("batcher: cannot create batcher: run function is nil")
	}
	if cfg.MaxBatchSize < 1 {
		return nil, fmt.Errorf("batcher: invalid config: MaxBatchSize is %d, must be >= 1", cfg.MaxBatchSize)
	}
	if cfg.MaxQueueDelay < 0 {
		return nil, fmt.Errorf("batcher: invalid config: MaxQueueDelay is %v, must be >= 0", cfg.MaxQueueDelay)
	}
	if cfg.DefaultTimeout < 0 {
		return nil, fmt.Errorf("batcher: invalid config: DefaultTimeout is %v, must be >= 0", cfg.DefaultTimeout)
	}
	if cfg.Instances < 0 {
		return nil, fmt.Errorf("batcher: invalid config: Instances is %d, must be >= 0", cfg.Instances)
	}
	if cfg.Instances == 0 {
		cfg.Instances = 1
	}
	if cfg.Priorities < 0 {
		return nil, fmt.Errorf("batcher: invalid config: Priorities is %d, must be >= 0", cfg.Priorities)
	}
	if cfg.Priorities == 0 {
		cfg.Priorities = 1
	}
	if cfg.MaxQueueSize < 0 {
		return nil, fmt.Errorf("batcher: invalid config: MaxQueueSize is %d, must be >= 0", cfg.MaxQueueSize)
	}
	if cfg.MaxQueueSize == 0 {
		cfg.MaxQueueSize = max(1024, 2*cfg.MaxBatchSize*cfg.Instances)
	}
	prefs := slices.Clone(cfg.PreferredBatchSizes)
	for _, p := range prefs {
		if p < 1 || p > cfg.MaxBatchSize {
			return nil, fmt.Errorf("batcher: invalid config: PreferredBatchSizes contains %d, must be in [1, MaxBatchSize=%d]", p, cfg.MaxBatchSize)
		}
	}
	slices.Sort(prefs)
	prefs = slices.Compact(prefs)
	cfg.PreferredBatchSizes = prefs
	alpha := 0.2
	gapCap := math.MaxFloat64
	if a := cfg.Adaptive; a != nil {
		if a.LatencyTarget <= 0 {
			return nil, fmt.Errorf("batcher: invalid config: Adaptive.LatencyTarget is %v, must be > 0", a.LatencyTarget)
		}
		if a.Smoothing < 0 || a.Smoothing > 1 {
			return nil, fmt.Errorf("batcher: invalid config: Adaptive.Smoothing is %v, must be in (0, 1]", a.Smoothing)
		}
		if a.Smoothing > 0 {
			alpha = a.Smoothing
		}
		gapCap = float64(a.LatencyTarget)
		ac := *a
		cfg.Adaptive = &ac
	}
	b := &Batcher[In, Out]{
		cfg:      cfg,
		run:      run,
		hooks:    hooks,
		prefs:    prefs,
		wakeAt:   cfg.MaxBatchSize,
		adaptive: cfg.Adaptive != nil,
		tok:      make(chan struct{}, 1),
		notify:   make(chan struct{}, 1),
		done:     make(chan struct{}),
		levels:   make([]level[In, Out], cfg.Priorities),
		model:    serviceModel{alpha: alpha, gapCap: gapCap},
		eff:      newEfficiency(cfg.MaxBatchSize, alpha),
	}
	if len(prefs) > 0 {
		b.wakeAt = min(b.wakeAt, prefs[0])
	}
	b.pool.New = func() any { return &item[In, Out]{reply: make(chan struct{}, 1)} }
	b.tok <- struct{}{}
	b.running.Store(int32(cfg.Instances))
	for i := range cfg.Instances {
		if start := cfg.StartLoop; start != nil {
			start(func() { b.loop(i) })
		} else {
			go b.loop(i)
		}
	}
	return b, nil
}

// Submit queues in, waits for its batch to run and returns its result. It is
// safe for concurrent use and blocks until the result is ready or ctx ends.
//
// The batcher no longer references in once Submit returns. If ctx ends while
// the item is queued, the item is removed and ctx.Err() is returned at once
// (context.DeadlineExceeded also when Config.DefaultTimeout expires); if it
// has already been taken into a running batch, Submit waits for that batch.
// Submit returns ErrQueueFull, ErrClosed or ErrWouldMissDeadline at once
// without queueing, and a *RunError if run failed. On error Out is zero.
func (b *Batcher[In, Out]) Submit(ctx context.Context, in In, opts SubmitOptions) (Out, error) {
	var zero Out
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	now := time.Now()
	deadline, hasDeadline := ctx.Deadline()
	useTimer := false
	if t := b.cfg.DefaultTimeout; t > 0 {
		if d := now.Add(t); !hasDeadline || d.Before(deadline) {
			deadline, hasDeadline, useTimer = d, true, true
		}
	}
	if hasDeadline && !now.Before(deadline) {
		return zero, context.DeadlineExceeded
	}
	lv := min(max(opts.Priority, 0), len(b.levels)-1)

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, ErrClosed
	}
	if b.n >= b.cfg.MaxQueueSize {
		b.st.QueueFull++
		b.mu.Unlock()
		b.dropped(DropQueueFull)
		return zero, ErrQueueFull
	}
	if hasDeadline && b.wouldMiss(now, deadline, lv) {
		b.st.Shed++
		b.mu.Unlock()
		b.dropped(DropShed)
		return zero, ErrWouldMissDeadline
	}
	it := b.pool.Get().(*item[In, Out])
	it.in, it.ctx, it.level = in, ctx, lv
	if !hasDeadline {
		deadline = time.Time{}
	}
	if b.adaptive {
		b.model.arrival(now)
		if b.n == 0 && b.inflight == 0 {
			b.idleStart = true
		}
	}
	b.push(it, now, deadline)
	b.st.Accepted++
	wake := b.asmWaiting && (b.adaptive || b.n == 1 || b.n >= b.wakeAt)
	if wake {
		b.asmWaiting = false
	}
	b.mu.Unlock()
	if wake {
		b.wake()
	}

	var timeout <-chan time.Time
	if useTimer {
		if it.timer == nil {
			it.timer = time.NewTimer(deadline.Sub(now))
		} else {
			it.timer.Reset(deadline.Sub(now))
		}
		timeout = it.timer.C
	}
	select {
	case <-it.reply:
	case <-ctx.Done():
		if b.dequeue(it, ctx.Err()) {
			return zero, b.release(it)
		}
		<-it.reply
	case <-timeout:
		if b.dequeue(it, context.DeadlineExceeded) {
			return zero, b.release(it)
		}
		<-it.reply
	}
	if useTimer {
		it.timer.Stop()
	}
	out, err := it.out, it.err
	b.release(it)
	return out, err
}

// dequeue removes a still-queued item after its context ended and records
// err on it. It reports false if a loop or Close already took the item (a
// reply is then on its way).
func (b *Batcher[In, Out]) dequeue(it *item[In, Out], err error) bool {
	b.mu.Lock()
	if !it.Queued() {
		b.mu.Unlock()
		return false
	}
	b.remove(it)
	r := b.countDrop(err)
	b.mu.Unlock()
	if it.timer != nil {
		it.timer.Stop()
	}
	it.err = err
	b.dropped(r)
	return true
}

// countDrop returns the reason for err and counts it; b.mu must be held.
func (b *Batcher[In, Out]) countDrop(err error) DropReason {
	if errors.Is(err, context.DeadlineExceeded) {
		b.st.Expired++
		return DropExpired
	}
	b.st.Canceled++
	return DropCanceled
}

// release clears the item's references and returns it to the pool; it
// returns the item's error.
func (b *Batcher[In, Out]) release(it *item[In, Out]) error {
	var zi In
	var zo Out
	err := it.err
	it.in, it.out, it.err, it.ctx = zi, zo, nil, nil
	b.pool.Put(it)
	return err
}

func (b *Batcher[In, Out]) dropped(r DropReason) {
	if h := b.hooks.Dropped; h != nil {
		h(r)
	}
}

func (b *Batcher[In, Out]) wake() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// wouldMiss predicts whether an item of level lv arriving at now can be
// answered by deadline. b.mu must be held.
//
// With q = (queued items of level >= lv) + 1, B = ceil(q/MaxBatchSize)
// batches up to and including the item's, and R = ceil(B/Instances) rounds
// of parallel runs, the predicted completion is
// now + (R−1)·S(MaxBatchSize) + S(size of the item's batch), where the item's
// batch holds q − (B−1)·MaxBatchSize items. Arrivals of higher priority after
// the item, the window, and the remaining time of running batches are not
// counted, so only items that are late even in the best case are shed.
func (b *Batcher[In, Out]) wouldMiss(now, deadline time.Time, lv int) bool {
	if b.cfg.DisableShedding {
		return false
	}
	pred, ok := b.predict(lv)
	return ok && now.Add(pred).After(deadline)
}

// predictWait is predict less the item's own run. b.mu must be held.
func (b *Batcher[In, Out]) predictWait(lv int) (time.Duration, bool) {
	pred, ok := b.predict(lv)
	if !ok {
		return 0, false
	}
	q := 1
	for l := lv; l < len(b.levels); l++ {
		q += b.levels[l].Len()
	}
	m := b.cfg.MaxBatchSize
	return pred - b.model.predict(q-(q-1)/m*m), true
}

// predict returns the best-case time from a Submit at level lv now to its
// result (see wouldMiss), and false until minShedSamples runs were observed.
// b.mu must be held.
func (b *Batcher[In, Out]) predict(lv int) (time.Duration, bool) {
	if b.model.samples < minShedSamples {
		return 0, false
	}
	q := 1
	for l := lv; l < len(b.levels); l++ {
		q += b.levels[l].Len()
	}
	m := b.cfg.MaxBatchSize
	batches := (q + m - 1) / m
	rounds := (batches + b.cfg.Instances - 1) / b.cfg.Instances
	last := q - (batches-1)*m
	return time.Duration(rounds-1)*b.model.predict(m) + b.model.predict(last), true
}

// Predict returns the best-case time from a Submit made now, with the given
// priority, to its result: the runs of the items queued ahead of it and its
// own, as the service model predicts them (the window, runs in progress and
// later higher-priority arrivals are not counted). ok is false until a few runs
// were observed. Callers use it to refuse work early (admission control).
func (b *Batcher[In, Out]) Predict(priority int) (d time.Duration, ok bool) {
	lv := min(max(priority, 0), len(b.levels)-1)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.predict(lv)
}

// PredictWait is Predict without the item's own run: the predicted wait
// before it runs (what a caller's bound on queueing time compares).
func (b *Batcher[In, Out]) PredictWait(priority int) (d time.Duration, ok bool) {
	lv := min(max(priority, 0), len(b.levels)-1)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.predictWait(lv)
}

// push appends it to its level; b.mu must be held.
func (b *Batcher[In, Out]) push(it *item[In, Out], now, deadline time.Time) {
	b.levels[it.level].PushBack(it, now, deadline)
	b.n++
}

// remove unlinks a queued item; b.mu must be held.
func (b *Batcher[In, Out]) remove(it *item[In, Out]) {
	b.levels[it.level].Remove(it)
	b.n--
}

// oldest returns the arrival time of the oldest queued item; b.n > 0.
func (b *Batcher[In, Out]) oldest() time.Time {
	var t time.Time
	for i := range b.levels {
		if h := b.levels[i].Front(); h != nil && (t.IsZero() || h.Enqueued().Before(t)) {
			t = h.Enqueued()
		}
	}
	return t
}

// Close stops accepting items (Submit then returns ErrClosed), runs every
// item already queued to completion, and stops the batch loops. It returns nil
// once all loops have exited. If ctx ends first, the items still queued are
// answered ErrClosed and Close returns ctx.Err(); loops that are running a
// batch then exit as soon as their run returns. Close may be called more than
// once and concurrently.
func (b *Batcher[In, Out]) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wake()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-b.done:
		return nil
	default:
	}
	b.mu.Lock()
	aborted := 0
	for i := range b.levels {
		for it := b.levels[i].Front(); it != nil; it = b.levels[i].Front() {
			b.remove(it)
			var zi In
			it.in = zi
			it.err = ErrClosed
			it.reply <- struct{}{}
			aborted++
		}
	}
	b.st.Aborted += uint64(aborted)
	b.mu.Unlock()
	b.wake()
	for range aborted {
		b.dropped(DropClosed)
	}
	return ctx.Err()
}

// QueueLen returns the number of items queued (not yet taken into a batch).
func (b *Batcher[In, Out]) QueueLen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// QueueCap returns the capacity of the queue (MaxQueueSize after defaults).
func (b *Batcher[In, Out]) QueueCap() int { return b.cfg.MaxQueueSize }

// Stats returns a snapshot of the counters.
func (b *Batcher[In, Out]) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.st
	s.Queued = b.n
	s.ServiceBase = time.Duration(b.model.a)
	s.ServicePerItem = time.Duration(b.model.b)
	if b.adaptive {
		s.ArrivalGap = b.model.meanGap()
		s.AdaptiveCap = b.eff.cap()
	}
	return s
}
