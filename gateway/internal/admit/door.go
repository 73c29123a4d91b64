package admit

import (
	"time"
)

// Control is the gateway's admission control, the one place that decides who is admitted and
// who waits: the memory budget shared by every request in flight, the decode workers with their
// queue (DecodeGate), and the queue-target policy (Line). Door is the decision every entry makes
// before a request's body is read (HTTP once its headers are in, before "100 Continue", gRPC's
// tap before the message is received, each request of a stream); the gate and the budget keep
// their bounds where a request reaches them. It is safe for concurrent use.
type Control struct {
	Mem  *Budget
	Gate *DecodeGate
	Line *Line
	cfg  Config
}

// Config sizes a Control.
type Config struct {
	MaxBody       int64 // a body's bound, declared or received (server.max_body_bytes)
	MaxInflight   int64 // the memory budget (server.max_inflight_bytes)
	DecodeWorkers int   // decodes at once (server.decode_workers)
	DecodeQueue   int   // waiters for a decode worker (server.decode_queue)
	Discipline    Discipline
}

// New returns the admission control cfg describes.
func New(cfg Config) *Control {
	mem := NewBudget(cfg.MaxInflight)
	line := NewLine(cfg.Discipline)
	return &Control{Mem: mem, Line: line, Gate: NewDecodeGate(cfg.DecodeWorkers, cfg.DecodeQueue, mem, line), cfg: cfg}
}

// Ask is a request at the door: what is known of it before its body is read.
type Ask struct {
	Arrived  time.Time
	Deadline time.Time // when its answer is due (its own timeout, or its model's default)
	Declared int64     // the length its body declares; negative: none declared
	Decodes  bool      // its images wait for a decode worker (most requests)
	Model    Model
}

// Model is the model's side of a request's line.
type Model struct {
	Pending, Cap int64         // samples admitted and not yet answered, and their bound
	Target       time.Duration // its queue target (0: none)
	// Answer and Wait are its batcher's predictions for a sample submitted now: when it is
	// answered, and how long it waits before its run (0: no prediction yet).
	Answer, Wait time.Duration
}

// Refusal is why the door refuses a request; Admit admits it.
type Refusal uint8

const (
	Admit           Refusal = iota
	BodyTooLarge            // its body declares more than Config.MaxBody
	QueueFull               // its model's queue is full (Model.Cap)
	DecodeQueueFull         // Config.DecodeQueue requests wait for a decode worker
	Memory                  // the memory budget cannot hold its body's first bytes
	Deadline                // it is predicted to miss its deadline
	QueueTime               // it is predicted to wait past its model's queue target
)

// Verdict is the door's decision, with what a refusal's message tells.
type Verdict struct {
	Refusal Refusal
	// Deadline: the predicted time to the answer and what the deadline must leave for it;
	// QueueTime: the predicted wait (and Need is zero); BodyTooLarge, QueueFull,
	// DecodeQueueFull: Count is the declared length, the samples or the waiters.
	Pred, Need time.Duration
	Count      int64
}

// FirstChunk is the memory a body's first bytes take from the budget (the gateway reads a body
// into chunks taken from the budget as they arrive, doubling from this size).
const FirstChunk = 64 << 10

// Headroom: a request is admitted, and queued for a decode, when its deadline leaves
// 1/Headroom more than the predicted time (a request queued on a prediction that turns out short
// is dropped after its wait, a slow refusal where a fast one was due).
const Headroom = 2

// Door decides a request before its body is read. The checks cost microseconds: counters and
// the predictions of the decode gate and of the model's batcher. Its arrival counts in the
// line's state (whether the line stands, or a spike is on).
func (c *Control) Door(a Ask) Verdict {
	m := a.Model
	switch {
	case a.Declared > c.cfg.MaxBody:
		return Verdict{Refusal: BodyTooLarge, Count: a.Declared}
	case m.Pending >= m.Cap:
		// The model's queue, without taking a place in it yet: the samples are counted once
		// the body is read (a slow client must not hold a place).
		return Verdict{Refusal: QueueFull, Count: m.Pending}
	}
	var gateAnswer, gateWait time.Duration
	samples, requests := int(m.Pending), int(m.Pending) // in line: the model's samples; the requests
	if a.Decodes {
		if n := c.Gate.waiting.Load(); int(n) >= c.cfg.DecodeQueue {
			return Verdict{Refusal: DecodeQueueFull, Count: int64(n)}
		}
		gateAnswer, gateWait = c.Gate.PredictWait(), c.Gate.QueueWait()
		requests = c.Gate.InLine() // one place at most per request, whatever its samples
	}
	first := int64(FirstChunk)
	if a.Declared >= 0 {
		first = min(first, a.Declared+1) // room for the end to be seen
	}
	if !c.Mem.fits(first) {
		return Verdict{Refusal: Memory}
	}
	// The deadline against the predicted time, with Headroom: a request refused here is
	// refused in microseconds, before its body; one admitted and refused later has spent its
	// upload.
	pred := m.Answer + gateAnswer
	if need := pred + pred/Headroom; a.Arrived.Add(need).After(a.Deadline) {
		return Verdict{Refusal: Deadline, Pred: pred, Need: need}
	}
	// The queue bounded by time: the predicted wait in line (for a decode worker, the requests
	// still reading their bodies counted, and in the batcher) against the model's target.
	if wait := m.Wait + gateWait; c.Line.door(wait, m.Target, samples, requests, a.Arrived) {
		return Verdict{Refusal: QueueTime, Pred: wait}
	}
	return Verdict{}
}

// BeforeQueue decides a sample about to join its model's batcher queue, which holds queued
// samples and predicts a wait of wait for it: Admit, or QueueTime when the line's discipline
// refuses it for the model's target there.
func (c *Control) BeforeQueue(wait, target time.Duration, queued int) Refusal {
	if c.Line.beforeQueue(wait, target, queued) {
		return QueueTime
	}
	return Admit
}
