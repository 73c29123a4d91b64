package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/imagegate/imagegate/internal/queue"
)

// DecodeGate schedules image decodes on the decode workers: the CPU-bound stage where, under
// overload, requests pile up. It bounds that pile and refuses early:
//
//   - workers decodes run at once; maxWait requests may wait; a request that finds
//     the queue full is refused at once (ErrQueueFull).
//
//   - a request whose deadline cannot be met (its predicted wait for a worker, its decode and
//     what its model's batcher predicts) is refused on arrival (ErrShed), and a waiter that
//     can no longer make it when a worker frees up is dropped instead of decoded: no CPU goes
//     to a request that would expire before it can run.
//
//   - an image's decode memory (its peak, from its header) is taken from the memory budget
//     before it starts; one that does not fit waits for releases, one larger than the whole
//     budget is refused (ErrTooLarge). A heavy image (a huge canvas) may use at most half the
//     workers, so that ordinary traffic keeps at least half the decode capacity.
//
//   - the queue is kept to its target by the Line's discipline: under Predict a request
//     predicted to wait past its target once the line stands is refused on arrival
//     (ErrQueueTime) and the queue is served oldest first; under LIFO, during a spike, the
//     queue is served newest first and a waiter past its target is dropped when a worker frees
//     up (ErrExpired).
//
// A waiter dropped after its wait is answered with an error that also matches ErrWaited (it
// is counted apart from the refusals on arrival). It is safe for concurrent use.
type DecodeGate struct {
	mu         sync.Mutex
	workers    int
	busy       int
	heavyMax   int
	heavy      int
	maxWait    int
	q          queue.List[waiter, *waiter]
	mem        *Budget
	line       *Line
	decodeHeld int64        // bytes of the budget held by running decodes
	svc        ewma         // decode wall time of ordinary images, ns
	heavySvc   ewma         // decode wall time of heavy images, ns
	heavyWait  int          // heavy waiters
	waiting    atomic.Int32 // n, readable without mu
	incoming   incoming     // requests admitted on a prediction, not yet at the gate (Admitted)
	waiters    sync.Pool
}

// waiter is a request waiting for a decode worker; its Links hold its place in the queue and
// its deadline.
type waiter struct {
	queue.Links[waiter]
	cost   int64
	heavy  bool
	after  time.Duration // time the request needs after its decode (as predicted at arrival)
	target time.Duration // the longest it may wait for a worker (0: no bound)
	ready  chan error    // capacity 1: nil (a worker is taken) or why it was dropped
}

// Admitted counts a request admitted on QueueWait's prediction that has not reached Acquire
// yet (its body is being read): it is in line as much as the waiters are. The caller calls
// Arrived with the ticket when the request reaches Acquire or ends before. A request counts
// for incomingHorizon at most: one still reading its body after that is slow (a client
// trickling its body, on purpose or not), and slow clients must not fill the line and have
// everyone else refused.
func (g *DecodeGate) Admitted(now time.Time) Ticket { return g.incoming.add(now) }

// Arrived takes back a ticket of Admitted (the zero Ticket: nothing).
func (g *DecodeGate) Arrived(t Ticket) { g.incoming.done(t) }

// NewDecodeGate returns a gate for workers decodes at once and maxWait waiting, whose decodes
// take their memory from mem and whose queue keeps to its target by line's discipline.
func NewDecodeGate(workers, maxWait int, mem *Budget, line *Line) *DecodeGate {
	g := &DecodeGate{workers: workers, maxWait: maxWait, heavyMax: max(1, workers/2), mem: mem, line: line}
	g.svc.alpha, g.heavySvc.alpha = 0.1, 0.2
	g.svc.clip, g.heavySvc.clip = ewmaClip, ewmaClip
	g.waiters.New = func() any { return &waiter{ready: make(chan error, 1)} }
	mem.released = g.kick
	return g
}

// Acquire takes a decode worker and cost bytes of the memory budget for a decode that must be
// done, with what follows it (after: the model's batcher's prediction), by deadline, after a
// wait for a worker of at most about target (0: no bound but the deadline). It blocks while
// the request waits in the queue. On success the caller decodes and then calls Release.
func (g *DecodeGate) Acquire(ctx context.Context, deadline time.Time, target time.Duration, cost int64, heavy bool, after time.Duration) error {
	if cost > g.mem.limit {
		return ErrTooLarge
	}
	g.mu.Lock()
	if g.q.Len() == 0 && g.tryTake(cost, heavy) {
		g.mu.Unlock()
		return nil
	}
	if g.q.Len() >= g.maxWait {
		g.mu.Unlock()
		return ErrQueueFull
	}
	if !g.mayFit(cost) {
		g.mu.Unlock()
		return ErrMemory
	}
	// Predicted: the decodes ahead spread over the workers, then this one, then downstream.
	// Half more is asked of the deadline than predicted: a request queued on a prediction
	// that turns out short is dropped at dispatch or shed by the batcher, after its wait, a
	// slow refusal where a fast one was due (docs/internals.md, "The decode gate's headroom").
	wait, svc := g.predict(heavy)
	now := time.Now()
	if pred := wait + svc + after; now.Add(pred + pred/Headroom).After(deadline) {
		g.mu.Unlock()
		return ErrShed
	}
	if g.line.atGate(wait, target, g.q.Len()+g.incoming.count(now), now) {
		g.mu.Unlock()
		return ErrQueueTime
	}
	w := g.waiters.Get().(*waiter)
	w.cost, w.heavy, w.after, w.target = cost, heavy, after, target
	g.push(w, now, deadline)
	if g.busy < g.workers {
		g.dispatch() // a free worker the waiters ahead cannot use (heavy, memory) may be ours
	}
	g.mu.Unlock()

	var err error
	select {
	case err = <-w.ready:
	case <-ctx.Done():
		g.mu.Lock()
		if w.Queued() {
			g.remove(w)
			g.mu.Unlock()
			err = ctx.Err()
			break
		}
		g.mu.Unlock()
		if err = <-w.ready; err == nil {
			g.Release(cost, heavy, 0) // dispatched as the context ended: give the worker back
		}
		err = ctx.Err()
	}
	g.waiters.Put(w)
	return err
}

// Release gives back a worker and the bytes taken by Acquire; took is the decode's duration
// (0: not measured).
func (g *DecodeGate) Release(cost int64, heavy bool, took time.Duration) {
	g.mu.Lock()
	g.busy--
	g.decodeHeld -= cost
	if heavy {
		g.heavy--
	}
	switch {
	case took <= 0:
	case heavy:
		g.heavySvc.observe(float64(took))
	default:
		g.svc.observe(float64(took))
	}
	g.mu.Unlock()
	if cost > 0 {
		g.mem.Release(cost) // calls kick
	} else {
		g.kick()
	}
}

// kick dispatches waiters after a release of workers or memory (every request's end releases
// memory: without waiters it returns at once, without the lock).
func (g *DecodeGate) kick() {
	if g.waiting.Load() == 0 {
		return
	}
	g.mu.Lock()
	if g.q.Len() > 0 {
		g.dispatch()
	}
	g.mu.Unlock()
}

// tryTake starts a decode of cost bytes if a worker (a heavy slot for a heavy image) and the
// memory are free, and reports whether it did. g.mu held.
func (g *DecodeGate) tryTake(cost int64, heavy bool) bool {
	if g.busy >= g.workers || heavy && g.heavy >= g.heavyMax || !g.mem.Reserve(cost) {
		return false
	}
	g.busy++
	g.decodeHeld += cost
	if heavy {
		g.heavy++
	}
	return true
}

// dispatch starts the waiters that can run, oldest first, and drops those that can no longer
// make their deadline. During a spike (LIFO) the waiters past their target are dropped first and
// the rest served newest first. g.mu held.
func (g *DecodeGate) dispatch() {
	now := time.Now()
	if !g.line.spiking(g.q.Len()+g.incoming.count(now), now) {
		g.dispatchFrom(g.q.Front(), g.q.Next, now)
		return
	}
	g.expire(now)
	g.dispatchFrom(g.q.Back(), g.q.Prev, now)
}

// dispatchFrom starts the waiters that can run, from w on in step's direction, while a worker is
// free. g.mu held.
func (g *DecodeGate) dispatchFrom(w *waiter, step func(*waiter) *waiter, now time.Time) {
	for w != nil && g.busy < g.workers {
		next := step(w)
		svc := g.svc.duration()
		if w.heavy {
			svc = g.heavySvc.duration()
		}
		switch {
		case now.Add(svc + w.after).After(w.Deadline()):
			g.remove(w)
			w.ready <- errShedWaited
		case !g.mayFit(w.cost):
			g.remove(w)
			w.ready <- errMemoryWaited
		case g.tryTake(w.cost, w.heavy):
			g.remove(w)
			w.ready <- nil
		}
		// a waiter that cannot run yet (memory, heavy slots) stays; a later, smaller one may
		w = next
	}
}

// expire drops the waiters that have waited past their target, oldest first (LIFO, during a
// spike: they would be served last, if at all). g.mu held.
func (g *DecodeGate) expire(now time.Time) {
	for w := g.q.Front(); w != nil && w.target > 0 && now.Sub(w.Enqueued()) > w.target; w = g.q.Front() {
		g.remove(w)
		w.ready <- ErrExpired
	}
}

// mayFit reports whether cost bytes can fit the budget once the running decodes release
// theirs: memory held by other stages (bodies, rows) is not waited for. g.mu held.
func (g *DecodeGate) mayFit(cost int64) bool {
	return g.mem.Used()-g.decodeHeld+cost <= g.mem.limit
}

// Acquire's refusals.
var (
	// ErrQueueFull: maxWait requests wait already.
	ErrQueueFull = errors.New("admit: the decode queue is full")
	// ErrMemory: the memory budget is held by other requests' bodies and rows.
	ErrMemory = errors.New("admit: the memory budget is in use by other requests")
	// ErrShed: the decode and what follows it cannot be done before the deadline.
	ErrShed = errors.New("admit: would miss its deadline")
	// ErrQueueTime: the request would wait for a worker longer than its queue target.
	ErrQueueTime = errors.New("admit: would wait longer than the queue target")
	// ErrTooLarge: the decode needs more memory than the whole budget.
	ErrTooLarge = errors.New("admit: larger than the memory budget")
	// ErrWaited: the request was dropped after it waited in line (expired), not refused on
	// arrival; every such error matches it beside its reason.
	ErrWaited = errors.New("admit: dropped after waiting in line")
	// ErrExpired: the request waited past its queue target during a spike (LIFO).
	ErrExpired = fmt.Errorf("admit: waited past the queue target: %w", ErrWaited)
)

// The drops after a wait: their reason, and ErrWaited.
var (
	errShedWaited   = fmt.Errorf("%w (%w)", ErrShed, ErrWaited)
	errMemoryWaited = fmt.Errorf("%w (%w)", ErrMemory, ErrWaited)
)

func (g *DecodeGate) push(w *waiter, now, deadline time.Time) {
	g.q.PushBack(w, now, deadline)
	if w.heavy {
		g.heavyWait++
	}
	g.waiting.Store(int32(g.q.Len()))
}

func (g *DecodeGate) remove(w *waiter) {
	g.q.Remove(w)
	if w.heavy {
		g.heavyWait--
	}
	g.waiting.Store(int32(g.q.Len()))
}

// Stats returns the queue length and the workers in use.
func (g *DecodeGate) Stats() (waiting, busy int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.Len(), g.busy
}

// PredictWait is the predicted time from now until a decode admitted now would finish; 0
// when a worker is free and nobody waits. An idle gate sheds nothing (Acquire does not
// either): nobody waits behind the decode, and the decodes it then measures correct an
// estimate that a few slow images left too high (one slow image must not lock out every
// request with a short deadline).
func (g *DecodeGate) PredictWait() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.q.Len() == 0 && g.busy < g.workers {
		return 0
	}
	wait, svc := g.predict(false)
	return wait + svc
}

// QueueWait is the predicted wait for a worker of a decode admitted now, the requests admitted
// and still reading their bodies counted as waiting (they will be ahead of it); 0 when a worker
// is free and nobody waits or comes.
func (g *DecodeGate) QueueWait() time.Duration {
	in := g.incoming.count(time.Now())
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.q.Len()+in == 0 && g.busy < g.workers {
		return 0
	}
	svc := g.svc.duration()
	return time.Duration(int64(g.q.Len()-g.heavyWait+in+g.busy-g.heavy) * int64(svc) / int64(g.workers))
}

// IncomingNow is the number of requests counted by Admitted now.
func (g *DecodeGate) IncomingNow() int { return g.incoming.count(time.Now()) }

// InLine is the number of requests in line for a worker: the waiters and the incoming ones.
func (g *DecodeGate) InLine() int { return int(g.waiting.Load()) + g.IncomingNow() }

// predict returns the predicted wait for a worker of a decode arriving now, and its decode
// time. Ordinary decodes wait for those ahead spread over the workers; a heavy one for the
// heavy ones ahead spread over the heavy slots (it may not use the others). g.mu held.
func (g *DecodeGate) predict(heavy bool) (wait, svc time.Duration) {
	svc = g.svc.duration()
	wait = time.Duration(int64(g.q.Len()-g.heavyWait+g.busy-g.heavy) * int64(svc) / int64(g.workers))
	if heavy {
		hs := g.heavySvc.duration()
		if hs == 0 {
			hs = svc
		}
		wait = max(wait, time.Duration(int64(g.heavyWait+g.heavy)*int64(hs)/int64(g.heavyMax)))
		svc = hs
	}
	return wait, svc
}

// ewma is an exponentially weighted moving average; zero until the first observation. With
// clip set, an observation counts as at most clip times the average: one outlier (an image
// that decodes in seconds among ones that take milliseconds) moves it by at most
// alpha*(clip-1), while a lasting change still carries it there within a few observations.
type ewma struct {
	alpha float64
	clip  float64
	v     float64
	set   bool
}

// ewmaClip: the decode-time averages take an observation as at most 4 times themselves (with
// alpha 0.1, one slow decode raises the ordinary average by at most 30 %).
const ewmaClip = 4

func (e *ewma) observe(x float64) {
	if !e.set {
		e.v, e.set = x, true
		return
	}
	if e.clip > 0 && x > e.clip*e.v {
		x = e.clip * e.v
	}
	e.v += e.alpha * (x - e.v)
}

func (e *ewma) duration() time.Duration { return time.Duration(e.v) }
