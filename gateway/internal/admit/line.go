package admit

import (
	"sync"
	"sync/atomic"
	"time"
)

// Line is the queue-target policy: how the line of requests waiting for the scarce CPU (a decode
// worker, then the model's batch) keeps to each model's queue target. It is one state for every
// line the door measures (the decode queue's, and each model's with its batcher), so that a line
// standing anywhere acts everywhere. The door (Control.Door) asks it whether a request is refused
// for its time; the decode gate asks it in which order to serve its waiters and which to drop.
//
// What it must tell apart: a closed loop of clients (a benchmark's 50 connections, each sending
// again as soon as it is answered) keeps a standing line of itself that no refusal shortens,
// since each refused client sends again at once; refusing it only spins the loop on refusals. An
// open-loop spike (clients that do not wait for each other) grows the line without bound. A
// closed loop of N never holds more than N in line, so the line's length tells the two apart
// where its delay cannot: a line no longer than Floor is served as normal operation, oldest
// first, never refused for its time. How a longer line is handled is the Discipline's. It is
// safe for concurrent use.
type Line struct {
	discipline Discipline
	stand      Stand        // Predict
	spikeUntil atomic.Int64 // LIFO: the spike lasts until then (unix ns; 0: none yet)
}

// Discipline is how a line keeps to its queue target.
type Discipline uint8

const (
	// Predict refuses a request at the door when its predicted wait exceeds its target, once
	// the line has stood over the target (at least Floor in line) for standInterval (at once
	// with twice the floor in line); the line is served oldest first.
	Predict Discipline = iota
	// LIFO takes a line longer than Floor for what only an open loop makes, a spike, and acts
	// on it at once: for as long as the line is longer and spikeHold after, the door admits
	// only a short line (what the workers serve in a quarter of the target), the line is served
	// newest first, and a waiter past its target is dropped when a worker frees up (expired,
	// counted apart from the refusals at the door). Within the floor and outside a spike it
	// serves oldest first and refuses nothing for its time.
	LIFO
)

// ParseDiscipline reads a discipline's name: "lifo" (also the empty name: the default) or
// "predict".
func ParseDiscipline(name string) (Discipline, bool) {
	switch name {
	case "", "lifo":
		return LIFO, true
	case "predict":
		return Predict, true
	}
	return LIFO, false
}

func (d Discipline) String() string {
	if d == LIFO {
		return "lifo"
	}
	return "predict"
}

// Floor is the line (waiters and incoming requests, or a model's samples) that is never refused
// or dropped for its time outside a spike: the largest closed loop served as normal operation.
const Floor = 64

// spikeHold is how long a spike lasts after the line was last longer than Floor. Under a
// spike's door the line stays short, so without it the spike would end at once and the door
// let in another Floor of requests to strand. A closed loop that arrives within it (or shares
// the machine with the spike) is refused and sends again for at most this long.
const spikeHold = 500 * time.Millisecond

// spikeShare: during a spike the door admits a request while the line's predicted wait is
// within this share of the target; the line served newest first then holds what the workers
// serve in it, and a waiter at its bottom expires at the target.
const spikeShare = 4

// NewLine returns a line kept by discipline d.
func NewLine(d Discipline) *Line { return &Line{discipline: d} }

// Discipline is the line's discipline.
func (l *Line) Discipline() Discipline { return l.discipline }

// door reports whether a request arriving at now, predicted to wait wait, is refused for the
// queue target (0: none): samples are in its model's line, requests in line for the decode
// workers (the model's samples again for a request without images). Its arrival counts in the
// line's state. A spike is told by requests: a closed loop of N clients holds N requests in line
// at most, but more samples when its requests carry several.
func (l *Line) door(wait, target time.Duration, samples, requests int, now time.Time) bool {
	if target <= 0 {
		return false
	}
	if l.discipline == Predict {
		return l.stand.Check(wait, target, max(samples, requests), now)
	}
	return l.spiking(requests, now) && wait > target/spikeShare
}

// spiking records a line of line requests at now and reports whether a spike is on (LIFO).
func (l *Line) spiking(line int, now time.Time) bool {
	if l.discipline == Predict {
		return false
	}
	t := now.UnixNano()
	if line > Floor {
		if until := t + int64(spikeHold); until > l.spikeUntil.Load() {
			l.spikeUntil.Store(until)
		}
		return true
	}
	return t < l.spikeUntil.Load()
}

// atGate reports whether a request arriving at the decode queue at now, predicted to wait
// wait there with line requests in line, is refused for its target: under
// Predict as at the door (the door's prediction falls short in a burst admitted before the line
// stood); under LIFO never (the spike is recorded: the gate then serves newest first).
func (l *Line) atGate(wait, target time.Duration, line int, now time.Time) bool {
	if l.discipline != Predict {
		l.spiking(line, now)
		return false
	}
	return target > 0 && l.stand.Check(wait, target, line, now)
}

// beforeQueue reports whether a sample about to join a model's batcher queue of queued
// samples, predicted to wait wait there, is refused for the queue target: the second line of
// Predict's bound, where the door's prediction fell short (a burst admitted before the line
// stood). LIFO's door bounds the whole line during a spike instead.
func (l *Line) beforeQueue(wait, target time.Duration, queued int) bool {
	return l.discipline == Predict && target > 0 && queued >= Floor && wait > target
}

// Stand is whether a line stands over its queue target, for Predict: a request predicted to
// wait wait, with line requests in line, is refused (Check) once the line has stood over the
// target (at least Floor in line, the predicted wait over the target) for standInterval, and
// until the predicted wait falls under half the target or the line under half the floor
// (where it stands, refusals hold it at the floor: ending there would let the next
// standInterval of arrivals in). A burst that passes within standInterval is queued (a good
// queue); a standing one is refused, and so is a line of twice the floor at once. It is safe
// for concurrent use.
type Stand struct {
	mu    sync.Mutex
	since time.Time // since when every check was over the target (zero: the last was not)
	stand bool
}

// standInterval is how long the line must stand over its target before requests are refused
// for it (CoDel's interval: longer than a burst of Poisson arrivals at 0.8 of capacity).
const standInterval = 100 * time.Millisecond

// Check records a request's arrival at now and reports whether it is refused.
func (o *Stand) Check(wait, target time.Duration, line int, now time.Time) bool {
	over := wait > target && line >= Floor
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stand {
		if wait < target/2 || line < Floor/2 {
			o.stand, o.since = false, time.Time{}
		}
		return o.stand && over
	}
	switch {
	case !over:
		o.since = time.Time{}
	case line >= 2*Floor || !o.since.IsZero() && now.Sub(o.since) >= standInterval:
		o.stand = true // twice the floor in line is no burst: it stands at once
	case o.since.IsZero():
		o.since = now
	}
	return o.stand
}
