package gateway

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// The server's lifecycle is one state, a phase, that only moves forward; advance is the one place
// that moves it, and what entering a phase does is done there:
//
//		starting ──► ready ──► draining ──► closing ──► stopped
//		    └────────────────────►┘              └──► aborting ──┘
//
//	  - starting: no model has been served yet. Listeners serve (readiness answers 503; an
//	    inference request finds no model), reloads load models.
//	  - ready: a model has been installed. Readiness answers 200 while a model is served (every
//	    model unloaded: 503 again, still ready to load one). Everything may happen.
//	  - draining: Shutdown began. Readiness answers 503 (/v2/health/ready, gRPC health, /); every
//	    HTTP response carries Connection: close; the listeners still accept and serve for
//	    server.drain_delay, and requests are admitted as before. A listener given to Serve,
//	    ServeAdmin or ServeGRPC now is closed at once.
//	  - closing: entering it closes the listeners (each serves its backlog first), shuts the admin
//	    listener down, stops the gRPC servers gracefully (GOAWAY) and tells the streams to stop
//	    taking requests. Every request accepted is answered.
//	  - aborting: server.shutdown_timeout ran out. Entering it cancels every request's context
//	    (what still waits is answered 503 draining), bodies are no longer read, and no request is
//	    admitted.
//	  - stopped: the models are being closed (they answer what they hold, then free their
//	    sessions); no reload installs a model any more. Entering it ends the poll of the TLS
//	    and key files (server.credentials_poll).
type phase int32

const (
	phaseStarting phase = iota
	phaseReady
	phaseDraining
	phaseClosing
	phaseAborting
	phaseStopped
)

// lifecycle is the server's phase and what its transitions act on: the listeners served, the
// gRPC servers, the streams' stop signal, the requests' abort context.
type lifecycle struct {
	mu      sync.Mutex // transitions, and the registry below
	cur     atomic.Int32
	lns     []net.Listener   // Serve's (wrapped)
	grpcs   []*grpcServing   // ServeGRPC's
	admin   *fasthttp.Server // ServeAdmin's
	stop    chan struct{}    // closed on closing: streams stop taking requests, gRPC health says so
	abort   context.Context  // every request's context derives from it; cancelled on aborting
	abortFn context.CancelCauseFunc
}

func (l *lifecycle) init() {
	l.stop = make(chan struct{})
	l.abort, l.abortFn = context.WithCancelCause(context.Background())
}

// phase is the server's phase now.
func (s *Server) phase() phase { return phase(s.life.cur.Load()) }

// draining reports whether Shutdown has begun.
func (s *Server) draining() bool { return s.phase() >= phaseDraining }

// ready reports whether the server is ready for traffic: a model installed and served, and no
// drain begun.
func (s *Server) ready() bool {
	return s.phase() == phaseReady && len(s.models.Load().byName) > 0
}

// advance moves the server to phase p and does what entering it does; it reports false, doing
// nothing, when the server is at p or past it already (phases only move forward).
func (s *Server) advance(p phase) bool {
	l := &s.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if phase(l.cur.Load()) >= p {
		return false
	}
	l.cur.Store(int32(p))
	switch p {
	case phaseClosing:
		// Not fasthttp's Shutdown for the public listeners: it closes connections it sees idle
		// even when a request has just arrived on them, and drops that request. Each listener
		// accepts what waits in its backlog first, and those connections are served.
		for _, ln := range l.lns {
			ln.Close()
		}
		if l.admin != nil {
			go l.admin.Shutdown()
		}
		close(l.stop)
		for _, g := range l.grpcs {
			go g.stop()
		}
	case phaseAborting:
		l.abortFn(errDraining)
	case phaseStopped:
		s.stopCredentials() // the poll of the TLS and key files ends with the reloads
	}
	return true
}

// serving registers a listener's server with the lifecycle (add is called under its lock); it
// reports false once a drain has begun, when the caller closes the listener instead.
func (s *Server) serving(add func(l *lifecycle)) bool {
	l := &s.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.draining() {
		return false
	}
	add(l)
	return true
}

// grpcServers are the gRPC servers registered so far.
func (s *Server) grpcServers() []*grpcServing {
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return s.life.grpcs
}
