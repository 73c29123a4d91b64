package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/admit"
)

// Admission, decided once: every entry asks the door (door, tapDoor), before a request's body is
// read, through the one decision of admit.Control.Door (the model's queue by count and by time,
// the decode queue, the memory budget, the deadline); and every refusal, at the door or where a
// later bound stops a request (the memory budget as its body arrives, the decode queue, the
// model's queue), is made here: its error and message, its stage in gateway_refusals_total, its
// access-log value. A request dropped after it waited in line (expired) is counted apart from
// those refused at once: gateway_decode_expired_total, refusal "expired" in the access log.

// ask is what the door knows of a request for model m, arrived at arrived and due by deadline,
// whose body declares declared bytes (negative: none), of the given priority; decodes: its
// images wait for a decode worker.
func (s *Server) ask(m *model, arrived, deadline time.Time, declared int64, priority int, decodes bool) admit.Ask {
	answer, _ := m.impl.predict(priority)
	wait, _ := m.impl.predictWait(priority)
	return admit.Ask{Arrived: arrived, Deadline: deadline, Declared: declared, Decodes: decodes,
		Model: admit.Model{Pending: m.pending.Load(), Cap: m.capNow(), Target: m.queueTarget, Answer: answer, Wait: wait}}
}

// door admits a request before any of its body is read (the pipeline's first stage, for HTTP
// once its headers are in, before "100 Continue", and for each gRPC request): none once the drain
// has run out of time, then the transport's options (deadline, priority), then admit's decision.
func (s *Server) door(r *request) error {
	if s.phase() >= phaseAborting {
		return fmt.Errorf("%w: the server is shutting down", errDraining)
	}
	if err := r.t.options(r); err != nil {
		return err
	}
	v := s.adm.Door(s.ask(r.m, r.start, r.deadline, r.t.declaredBytes(r), r.priority, r.fe.decodes()))
	if v.Refusal == admit.Admit {
		return nil
	}
	if st := doorStages[v.Refusal]; st != "" {
		r.refuse(st)
		r.meta.door = true
	}
	return s.doorError(r.m, v)
}

// doorStages are the door's refusals' stages (gateway_refusals_total); a body declared too large
// is bad input, not a refusal under load.
var doorStages = [...]string{
	admit.QueueFull:       refuseQueue,
	admit.DecodeQueueFull: refuseDecodeQueue,
	admit.Memory:          refuseMemory,
	admit.Deadline:        refuseDeadline,
	admit.QueueTime:       refuseQueueTime,
}

// doorError is a door's refusal for model m, in words that name the setting to change.
func (s *Server) doorError(m *model, v admit.Verdict) error {
	switch v.Refusal {
	case admit.BodyTooLarge:
		return fmt.Errorf("%w: the body declares %d bytes; server.max_body_bytes is %d", errBodyTooLarge, v.Count, s.opts.MaxBodyBytes)
	case admit.QueueFull:
		return fmt.Errorf("%w: model %s has %d samples waiting (batching.max_queue_size)", errQueueFull, m.name, v.Count)
	case admit.DecodeQueueFull:
		return fmt.Errorf("%w: %d requests wait for a decode worker (server.decode_queue)", errOverloaded, v.Count)
	case admit.Memory:
		return errMemory
	case admit.Deadline:
		return fmt.Errorf("%w: predicted to take %v, and a request is admitted only with %v of its deadline left (the prediction and half again)",
			errShed, v.Pred.Round(time.Millisecond), v.Need.Round(time.Millisecond))
	case admit.QueueTime:
		return fmt.Errorf("%w: model %s: a request admitted now would wait about %v in line; batching.queue_target is %v",
			errQueueFull, m.name, v.Pred.Round(time.Millisecond), m.queueTarget)
	}
	return nil
}

// Reasons a request waiting for a decode worker was dropped without its decode
// (gateway_decode_expired_total): it waited past its queue target during a spike, it could no
// longer make its deadline, the memory its decode needs was taken meanwhile.
const (
	expiredTarget   = "queue_target"
	expiredDeadline = "deadline"
	expiredMemory   = "memory"
)

// refusalExpired is the access log's refusal value of a request dropped after its wait.
const refusalExpired = "expired"

// expired counts a request dropped after it waited in line, for reason.
func (r *request) expired(reason string) {
	r.s.met.expired[reason].Inc()
	r.meta.refusal = refusalExpired
}

// gateError is the error for a decode gate's refusal of the request's image (cost bytes of
// decode memory), counted: at once, on its arrival at the decode queue, or after its wait.
func (r *request) gateError(err error, cost int64) error {
	s, m := r.s, r.m
	waited := errors.Is(err, admit.ErrWaited)
	switch {
	case errors.Is(err, admit.ErrExpired):
		r.expired(expiredTarget)
		return fmt.Errorf("%w: model %s: waited past batching.queue_target (%v) for a decode worker while the line was longer than %d (a spike: the newest are served first)",
			errQueueFull, m.name, m.queueTarget, admit.Floor)
	case errors.Is(err, admit.ErrMemory):
		if waited {
			r.expired(expiredMemory)
		} else {
			r.refuse(refuseMemory)
		}
		return errMemory
	case errors.Is(err, admit.ErrShed):
		if waited {
			r.expired(expiredDeadline)
		} else {
			r.refuse(refuseDeadline)
		}
		return fmt.Errorf("%w: the image cannot be decoded and run before the request's deadline", errShed)
	case errors.Is(err, admit.ErrQueueFull):
		r.refuse(refuseDecodeQueue)
		return fmt.Errorf("%w: %d requests wait for a decode worker (server.decode_queue)", errOverloaded, s.opts.DecodeQueue)
	case errors.Is(err, admit.ErrQueueTime):
		r.refuse(refuseQueueTime)
		return fmt.Errorf("%w: model %s: the image would wait longer than batching.queue_target (%v) for a decode worker", errQueueFull, m.name, m.queueTarget)
	case errors.Is(err, admit.ErrTooLarge):
		return fmt.Errorf("%w: decoding the image needs %d bytes; server.max_inflight_bytes is %d", errTooLarge, cost, s.adm.Mem.Limit())
	}
	return err
}

// beforeQueue admits the request's samples into its model's batcher queue: under Predict, a
// sample predicted to wait past the model's queue target there, with the floor's worth queued,
// is refused (the second line of the bound, where the door's prediction fell short).
func (r *request) beforeQueue() error {
	m := r.m
	wait, ok := m.impl.predictWait(r.priority)
	if !ok || r.s.adm.BeforeQueue(wait, m.queueTarget, m.impl.queueLen()) == admit.Admit {
		return nil
	}
	r.refuse(refuseQueueTime)
	m.met.dropped[dropQueueTime].Inc()
	return fmt.Errorf("%w: model %s: a sample queued now would wait about %v for its batch; batching.queue_target is %v",
		errQueueFull, m.name, wait.Round(time.Millisecond), m.queueTarget)
}

// queueError is the error of the model's batcher refusing a sample at once, counted.
func (r *request) queueError(err error) error {
	if errors.Is(err, batcher.ErrQueueFull) {
		r.refuse(refuseQueue)
	}
	return err
}
