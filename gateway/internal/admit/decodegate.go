package admit

import (
	"context"
	"errors"
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
//   - the queue is bounded by time as well as by count: a request whose predicted wait for a
//     worker exceeds its queue target is refused (ErrQueueTime), how depends on the
//     discipline (Predict, CoDel).
//
// Under Predict (the default), waiters are served first come, first served among those that
// can run. FIFO suffices because admission is deadline- and target-aware: a request is queued
// only if it is predicted to start within its queue target and to make its deadline from its
// place in the queue, and dropped at dispatch if it no longer can. (Serving the newest first,
// as adaptive LIFO does, would strand the oldest until they are shed late: a slow refusal
// instead of a fast one.) CoDel is the alternative measured against it
// (docs/reliability.md): nothing is refused on a prediction; once the queue has stood above
// the target for codelInterval, waiters are served newest first and those that waited longer
// than the target are shed. It is safe for concurrent use.
type DecodeGate struct {
	mu         sync.Mutex
	workers    int
	busy       int
	heavyMax   int
	heavy      int
	maxWait    int
	q          queue.List[waiter, *waiter]
	mem        *Budget
	decodeHeld int64        // bytes of the budget held by running decodes
	svc        ewma         // decode wall time of ordinary images, ns
	heavySvc   ewma         // decode wall time of heavy images, ns
	heavyWait  int          // heavy waiters
	waiting    atomic.Int32 // n, readable without mu
	incoming   incoming     // requests admitted on a prediction, not yet at the gate (Admitted)
	over       Stand        // Predict: whether the decode line stands over its target
	discipline Discipline
	aboveSince time.Time // CoDel: since when every waiter dispatched had waited over its target
	standing   bool      // CoDel: the queue stands; serve newest first, shed the old

	refused, shed, tooLarge, queueTime uint64 // counters (under mu)
	waiters                            sync.Pool
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

// Discipline is how the gate bounds its queue by time.
type Discipline uint8

const (
	// Predict refuses a request on arrival when its predicted wait exceeds its target, and
	// serves the queue oldest first.
	Predict Discipline = iota
	// CoDel queues every request the count allows; once the queue stands (every waiter
	// dispatched for codelInterval had waited over its target) it serves the newest first
	// and sheds the waiters older than their target (adaptive LIFO with a CoDel bound).
	CoDel
)

// QueueFloor is the line (waiters and incoming requests) that is never refused or shed for
// its time: a closed loop of clients, such as a benchmark's 50 connections, keeps a standing
// queue of itself that a refusal does not shorten (the client sends again at once), and
// refusing it only spends CPU on refusals. The time bound acts on open-loop overload,
// whose line grows past any such population.
const QueueFloor = 64

// codelInterval is how long the queue must stand above its target before CoDel acts (CoDel's
// interval: longer than a burst, shorter than a user's patience).
const codelInterval = 100 * time.Millisecond

// SetDiscipline sets the queue discipline; call it before the first Acquire.
func (g *DecodeGate) SetDiscipline(d Discipline) { g.discipline = d }

// Admitted counts a request admitted on QueueWait's prediction that has not reached Acquire
// yet (its body is being read): it is in line as much as the waiters are. The caller calls
// Arrived with the ticket when the request reaches Acquire or ends before. A request counts
// for incomingHorizon at most: one still reading its body after that is slow (a client
// trickling its body, on purpose or not), and slow clients must not fill the line and have
// everyone else refused.
func (g *DecodeGate) Admitted(now time.Time) Ticket { return g.incoming.add(now) }

// Arrived takes back a ticket of Admitted (the zero Ticket: nothing).
func (g *DecodeGate) Arrived(t Ticket) { g.incoming.done(t) }

// Ticket is a request's place among the incoming ones; the zero value is none.
type Ticket int64

// incomingTick and incomingSlots: the incoming requests are counted by the tick of their
// admission, over incomingHorizon.
const (
	incomingTick    = 10 * time.Millisecond
	incomingSlots   = 16
	incomingHorizon = incomingSlots * incomingTick
)

// incoming counts admitted requests by their admission's tick, over the last incomingSlots
// ticks. It is safe for concurrent use.
type incoming struct {
	mu   sync.Mutex
	slot [incomingSlots]struct {
		tick int64
		n    int
	}
}

func (in *incoming) add(now time.Time) Ticket {
	tick := now.UnixNano()/int64(incomingTick) + 1 // never 0
	in.mu.Lock()
	s := &in.slot[tick%incomingSlots]
	if s.tick != tick {
		s.tick, s.n = tick, 0
	}
	s.n++
	in.mu.Unlock()
	return Ticket(tick)
}

func (in *incoming) done(t Ticket) {
	if t == 0 {
		return
	}
	in.mu.Lock()
	if s := &in.slot[int64(t)%incomingSlots]; s.tick == int64(t) && s.n > 0 {
		s.n--
	}
	in.mu.Unlock()
}

// count is the number of requests admitted within incomingHorizon of now and not arrived.
func (in *incoming) count(now time.Time) int {
	tick := now.UnixNano()/int64(incomingTick) + 1
	n := 0
	in.mu.Lock()
	for i := range in.slot {
		if s := &in.slot[i]; s.tick > tick-incomingSlots && s.tick <= tick {
			n += s.n
		}
	}
	in.mu.Unlock()
	return n
}

// NewDecodeGate returns a gate for workers decodes at once and maxWait waiting, whose decodes
// take their memory from mem.
func NewDecodeGate(workers, maxWait int, mem *Budget) *DecodeGate {
	g := &DecodeGate{workers: workers, maxWait: maxWait, heavyMax: max(1, workers/2), mem: mem}
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
		g.mu.Lock()
		g.tooLarge++
		g.mu.Unlock()
		return ErrTooLarge
	}
	g.mu.Lock()
	if g.q.Len() == 0 && g.tryTake(cost, heavy) {
		g.mu.Unlock()
		return nil
	}
	if g.q.Len() >= g.maxWait {
		g.refused++
		g.mu.Unlock()
		return ErrQueueFull
	}
	if !g.mayFit(cost) {
		g.refused++
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
		g.shed++
		g.mu.Unlock()
		return ErrShed
	}
	if target > 0 && g.discipline == Predict && g.over.Check(wait, target, g.q.Len()+g.incoming.count(now), now) {
		g.queueTime++
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

// dispatch starts the waiters that can run, oldest first (newest first while CoDel finds the
// queue standing), and drops those that can no longer make their deadline or that waited
// past their target. g.mu held.
func (g *DecodeGate) dispatch() {
	now := time.Now()
	if g.discipline == CoDel {
		g.codel(now)
	}
	first, step := g.q.Front, g.q.Next
	if g.standing {
		first, step = g.q.Back, g.q.Prev
	}
	for w := first(); w != nil && g.busy < g.workers; {
		next := step(w)
		svc := g.svc.duration()
		if w.heavy {
			svc = g.heavySvc.duration()
		}
		switch {
		case now.Add(svc + w.after).After(w.Deadline()):
			g.remove(w)
			g.shed++
			w.ready <- ErrShed
		case g.overdue(w, now):
			g.remove(w)
			g.queueTime++
			w.ready <- ErrQueueTime
		case !g.mayFit(w.cost):
			g.remove(w)
			g.refused++
			w.ready <- ErrMemory
		case g.tryTake(w.cost, w.heavy):
			g.remove(w)
			w.ready <- nil
		}
		// a waiter that cannot run yet (memory, heavy slots) stays; a later, smaller one may
		w = next
	}
}

// overdue reports whether w has waited past its target and is to be shed: under CoDel, once
// the queue stands; never under Predict. g.mu held.
func (g *DecodeGate) overdue(w *waiter, now time.Time) bool {
	// Predict refuses on arrival only: a waiter admitted in a burst (before the line stood
	// for standInterval) is served late rather than refused late, after its wait.
	if w.target <= 0 || g.discipline != CoDel || !g.standing {
		return false
	}
	if g.q.Len()+g.incoming.count(now) <= QueueFloor {
		return false
	}
	return now.Sub(w.Enqueued()) > w.target
}

// Stand is whether a line stands over its queue target, for Predict: a request predicted to
// wait wait, with line requests in line, is refused (Check) once the line has stood over the
// target (at least QueueFloor in line, the predicted wait over the target) for standInterval,
// and until the predicted wait falls under half the target or the line under half the floor
// (where it stands, refusals hold it at the floor: ending there would let the next
// standInterval of arrivals in). A burst that passes within standInterval is queued (a good
// queue); a standing one is refused, and so is a line of twice the floor at once. It is safe
// for concurrent use.
type Stand struct {
	mu    sync.Mutex
	since time.Time // since when every check was over the target (zero: the last was not)
	stand bool
}

// OverTarget is the gate's Stand.Check: one state for every line admission measures (the
// decode queue's, and each model's with its batcher), so that a line standing anywhere makes
// admission refuse what would wait past its target everywhere.
func (g *DecodeGate) OverTarget(wait, target time.Duration, line int, now time.Time) bool {
	return g.over.Check(wait, target, line, now)
}

// standInterval is how long the line must stand over its target before requests are refused
// for it (CoDel's interval: longer than a burst of Poisson arrivals at 0.8 of capacity).
const standInterval = 100 * time.Millisecond

// Check records a request's arrival at now and reports whether it is refused.
func (o *Stand) Check(wait, target time.Duration, line int, now time.Time) bool {
	over := wait > target && line >= QueueFloor
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stand {
		if wait < target/2 || line < QueueFloor/2 {
			o.stand, o.since = false, time.Time{}
		}
		return o.stand && over
	}
	switch {
	case !over:
		o.since = time.Time{}
	case line >= 2*QueueFloor || !o.since.IsZero() && now.Sub(o.since) >= standInterval:
		o.stand = true // twice the floor in line is no burst: it stands at once
	case o.since.IsZero():
		o.since = now
	}
	return o.stand
}

func (o *Stand) standing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stand
}

// codel updates CoDel's state from the oldest waiter's wait: the queue stands once the oldest
// waiter has been over its target for codelInterval, and until the queue empties (adaptive
// LIFO: a queue that has not emptied for a while serves the newest first). While it stands,
// the waiters past their target are shed at once, oldest first (they would be served last).
// g.mu held.
func (g *DecodeGate) codel(now time.Time) {
	w := g.q.Front()
	if w == nil {
		return
	}
	if w.target <= 0 || now.Sub(w.Enqueued()) <= w.target {
		g.aboveSince = time.Time{}
	} else if g.aboveSince.IsZero() {
		g.aboveSince = now
	} else if now.Sub(g.aboveSince) >= codelInterval {
		g.standing = true
	}
	if !g.standing {
		return
	}
	for w := g.q.Front(); w != nil && w.target > 0 && now.Sub(w.Enqueued()) > w.target && g.q.Len()+g.incoming.count(now) > QueueFloor; w = g.q.Front() {
		g.remove(w)
		g.queueTime++
		w.ready <- ErrQueueTime
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
	// ErrQueueTime: the request would wait (or has waited) for a worker longer than its
	// queue target.
	ErrQueueTime = errors.New("admit: would wait longer than the queue target")
	// ErrTooLarge: the decode needs more memory than the whole budget.
	ErrTooLarge = errors.New("admit: larger than the memory budget")
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
	if g.q.Len() == 0 { // CoDel: a queue that empties does not stand
		g.aboveSince, g.standing = time.Time{}, false
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

// Line is the number of requests in line for a worker: the waiters and the incoming ones.
func (g *DecodeGate) Line() int { return int(g.waiting.Load()) + g.IncomingNow() }

// QueueTimeRefusals is the number of requests refused or dropped for their queue target.
func (g *DecodeGate) QueueTimeRefusals() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queueTime
}

// Headroom: a request is queued for a decode when its deadline leaves 1/Headroom more than
// the predicted time (and the pipeline admits a request so, before its body).
const Headroom = 2

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
