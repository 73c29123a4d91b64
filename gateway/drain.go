package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// The server's lifecycle around its requests: Serve, and Shutdown's drain, step by step (its
// phases and their transitions: lifecycle.go).

// Serve accepts connections on ln until Shutdown. It returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.dog.Run()
	l := s.listen(ln) // tracked, in TLS when configured
	if !s.serving(func(lc *lifecycle) { lc.lns = append(lc.lns, l) }) {
		l.Close() // a drain has begun
	}
	return s.srv.Serve(l)
}

// Shutdown drains the server. Readiness turns 503 at once and every response carries
// Connection: close; connections are still accepted and served for Options.DrainDelay (load
// balancers stop sending meanwhile); then the listener closes (connections already in its
// backlog are still accepted and served) and Shutdown waits for every request in flight to be
// answered. If ctx ends first, the requests still waiting are answered 503 draining with
// Retry-After (queued ones are dropped, batches already running finish) and Shutdown waits
// for those answers too. It returns nil once every accepted request was answered, and stops
// the models' batchers.
func (s *Server) Shutdown(ctx context.Context) error {
	s.advance(phaseDraining)
	s.drainDelay(ctx)
	s.advance(phaseClosing) // the listeners close, the gRPC servers stop gracefully
	var errs []error
	aborted, err := s.answerInFlight(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	s.closeConnections()
	s.waitGRPC(abortGrace)
	s.stopReloads(aborted)
	if err := s.stopModels(aborted); err != nil {
		errs = append(errs, err)
	}
	s.gone.Close()
	s.dog.Close()
	s.threads.Close() // the idle decode threads end (the model threads ended with their batchers)
	return errors.Join(errs...)
}

// drainDelay keeps serving for Options.DrainDelay (or until ctx ends). No connection is closed
// under a client during the drain: every response carries Connection: close, so a keep-alive
// connection ends after its next answer (or when its client closes it). Closing an idle one
// from here races with a client sending its next request on it, which then gets a reset
// instead of an answer.
func (s *Server) drainDelay(ctx context.Context) {
	if d := s.opts.DrainDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// answerInFlight waits until every request in flight is answered. If ctx ends first (aborted),
// everyone still waiting is answered (503 draining) and those answers are waited for,
// abortGrace at most; it returns an error when some are still unanswered then.
func (s *Server) answerInFlight(ctx context.Context) (aborted bool, err error) {
	if s.waitIdle(ctx) {
		return false, nil
	}
	s.advance(phaseAborting) // every request's context is cancelled
	s.conns.InterruptReads()
	s.dropQueued() // queued samples are answered batcher.ErrClosed
	grace, cancel := context.WithTimeout(context.Background(), abortGrace)
	defer cancel()
	if !s.waitIdle(grace) {
		return true, fmt.Errorf("gateway: %d requests still unanswered %v after server.shutdown_timeout", s.inflight.Load(), abortGrace)
	}
	return true, nil
}

// closeConnections closes what is left once the answers are written (they carry Connection:
// close). Connections still open are idle keep-alive ones (or a client reads slowly): for
// connCloseGrace their clients may still send a request on them, answered (and the
// connection closed after it); then the idle ones are closed, after a check that no request
// is arriving, and the last requests answered. Connections closing by lingering (a refused
// body still arriving) are waited for too: the process's exit would reset them, and their
// answers with them. A connection that stays open does not hold up the exit.
func (s *Server) closeConnections() {
	for end := time.Now().Add(connCloseGrace); (s.conns.Open() > 0 || s.conns.Lingering() > 0 || s.inflight.Load() > 0) && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	s.conns.CloseIdle()
	s.conns.CloseQuietNew()
	if s.inflight.Load() > 0 {
		grace, cancel := context.WithTimeout(context.Background(), abortGrace)
		s.waitIdle(grace)
		cancel()
	}
}

// stopReloads lets a reload in progress (loading and warming a model) finish first, within
// abortGrace (none after a drain already out of time); none starts after. One that takes
// longer is left running: the drain does not wait for it (a model it loads is not served, and
// the process exits under it).
func (s *Server) stopReloads(aborted bool) {
	wait := time.Now()
	if !aborted {
		wait = wait.Add(abortGrace)
	}
	s.advance(phaseStopped) // a reload that ends from now on installs nothing (apply)
	for ; ; time.Sleep(10 * time.Millisecond) {
		if s.applyMu.TryLock() {
			s.applyMu.Unlock()
			return
		}
		if time.Now().After(wait) {
			s.log.Warn("a model reload is still running: the drain does not wait for it")
			return
		}
	}
}

// stopModels stops the models: their batchers end once the batches still running have (after
// an abort, a batch may outlive its requests' answers: it is given abortGrace, then left to
// the process's exit), and the models retired by reloads finish closing.
func (s *Server) stopModels(aborted bool) error {
	ctx := context.Background()
	if aborted {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, abortGrace)
		defer cancel()
	}
	err := s.closeModels(ctx)
	s.retiring.Wait()
	return err
}

// A drain takes at most drain_delay + shutdown_timeout + ShutdownTail (a process manager's
// grace period, Kubernetes' terminationGracePeriodSeconds, must cover it).
const ShutdownTail = abortGrace + connCloseGrace

const (
	// abortGrace bounds the wait for the 503s written after shutdown_timeout (the requests are
	// cancelled: their answers take milliseconds).
	abortGrace = 2 * time.Second
	// connCloseGrace bounds the wait for connections to close once every request is answered.
	connCloseGrace = 2 * time.Second
)

// waitIdle waits until no inference request is in flight and reports whether that happened
// before ctx ended.
func (s *Server) waitIdle(ctx context.Context) bool {
	for {
		s.inflightMu.Lock()
		if s.inflight.Load() == 0 {
			s.inflightMu.Unlock()
			return true
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle := s.idle
		s.inflightMu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return s.inflight.Load() == 0
		case <-time.After(50 * time.Millisecond):
			// requests still reading their headers start after this check
		}
	}
}

// inflightDone wakes waitIdle when the last request in flight finished.
func (s *Server) inflightDone() {
	if !s.draining() {
		return
	}
	s.inflightMu.Lock()
	if s.inflight.Load() == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.inflightMu.Unlock()
}

// dropQueued answers every queued sample of every model batcher.ErrClosed (the drain is out of
// time); batches already running finish. The models are closed later (closeModels).
func (s *Server) dropQueued() {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for _, vs := range s.models.Load().byName {
		for _, m := range vs {
			m.impl.close(expired)
		}
	}
}

// closeModels closes every model (see model.close).
func (s *Server) closeModels(ctx context.Context) error {
	var errs []error
	for _, vs := range s.models.Load().byName {
		for _, m := range vs {
			if err := m.close(ctx, s.met); err != nil && ctx.Err() == nil {
				errs = append(errs, fmt.Errorf("model %s version %s: %w", m.name, m.version, err))
			}
		}
	}
	return errors.Join(errs...)
}
