package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/gateway/internal/netx"
	"github.com/imagegate/imagegate/gateway/internal/sched"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// Server is the gateway's HTTP server. Create it with New, add models with AddModel, run it
// with Serve, stop it with Shutdown. Its methods are safe for concurrent use.
type Server struct {
	opts       Options
	log        *slog.Logger
	met        *metricsRegistry
	mem        *admit.Budget
	bodyBufs   *freeList // bodies as read, and decompressed
	imageBufs  *freeList // decoded base64 images
	gate       *admit.DecodeGate
	conns      *netx.Tracker  // connections: the limit, idle closes, drains, lingering closes
	gone       *netx.Watcher  // clients that leave while their request waits
	threads    *sched.Threads // decode and model threads
	requests   sync.Pool      // *request
	srv        *fasthttp.Server
	retryAfter string

	repo     Repository
	applyMu  sync.Mutex // serializes changes to models
	stopped  bool       // under applyMu: Shutdown closes the models, none is loaded after
	models   atomic.Pointer[modelTable]
	states   states
	retiring sync.WaitGroup // models being closed after a reload or an unload
	adminTok []byte         // sha256 of the admin bearer token; nil: none
	adminMu  sync.Mutex
	admin    *fasthttp.Server // the admin listener's server, once ServeAdmin runs
	lnMu     sync.Mutex
	lns      []net.Listener // the listeners Serve was given (wrapped)

	ready    atomic.Bool
	draining atomic.Bool
	aborted  atomic.Bool
	abort    context.Context // every request's context derives from it
	abortFn  context.CancelCauseFunc

	inflight   atomic.Int64 // inference requests in the pipeline
	closing    atomic.Bool  // Shutdown is closing the models: a reload installs nothing more
	inflightMu sync.Mutex
	idle       chan struct{} // closed when inflight drops to 0 while draining
}

// modelTable maps model names to their versions, oldest first; it is replaced, never changed.
type modelTable struct {
	byName map[string][]*model
	first  string // the default model of /predict/
}

// New builds a server with no model; it reports ready once a model is loaded (AddModel, or
// Reload from the repository). repo may be nil.
func New(opts Options, repo Repository) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &Server{
		opts:       opts,
		log:        opts.Log,
		met:        newMetricsRegistry(),
		mem:        admit.NewBudget(opts.MaxInflightBytes),
		bodyBufs:   newFreeList(min(freeListBytes, opts.MaxInflightBytes/8)),
		imageBufs:  newFreeList(min(freeListBytes, opts.MaxInflightBytes/8)),
		gone:       netx.NewWatcher(),
		threads:    sched.New(),
		retryAfter: strconv.Itoa(max(1, int((opts.RetryAfter+time.Second/2)/time.Second))),
		repo:       repo,
	}
	if opts.AdminToken != "" {
		h := sha256.Sum256([]byte(opts.AdminToken))
		s.adminTok = h[:]
	}
	s.requests.New = func() any { return new(request) }
	s.abort, s.abortFn = context.WithCancelCause(context.Background())
	s.gate = admit.NewDecodeGate(opts.DecodeWorkers, opts.DecodeQueue, s.mem)
	s.conns = netx.NewTracker(netx.Config{
		MaxConns:   opts.MaxConnections,
		Refusal:    netx.Refusal(`{"error":"the server has too many connections open (server.max_connections); try again"}`, s.retryAfter),
		Refused:    s.met.refusals[refuseConnections].Inc,
		ClosedIdle: s.met.set.NewCounter("gateway_connections_closed_idle_total").Inc,
	})
	s.models.Store(&modelTable{byName: map[string][]*model{}})
	s.registerServerMetrics()
	overflow := netx.OverflowConns(opts.MaxConnections)
	s.srv = &fasthttp.Server{
		Handler:       s.handle,
		ErrorHandler:  s.handleParseError,
		ExpectHandler: s.expectContinue,
		Name:          "imagegate",
		// Bodies are streamed: the pipeline reads them into budgeted memory as they arrive
		// (fasthttp would otherwise allocate a declared length up front) and enforces
		// max_body_bytes itself (413). A streaming fasthttp reads min(Content-Length,
		// MaxRequestBodySize, 8 KiB) of the body before it calls the handler, and hands a
		// longer body over as a stream all the same; with 1, the handler runs once a byte of
		// the body is in, so a refusal on the header alone (the declared length, a full
		// queue, a deadline) does not wait for 8 KiB from a slow client.
		StreamRequestBody:  true,
		MaxRequestBodySize: 1,
		ReadTimeout:        opts.ReadTimeout,
		WriteTimeout:       opts.WriteTimeout,
		IdleTimeout:        opts.IdleTimeout,
		// Connections are limited by the listener (idle ones are closed first at the limit);
		// fasthttp's own limit, which answers with a plain-text page, is never reached.
		Concurrency:     opts.MaxConnections + overflow + 64,
		ConnState:       s.connState,
		CloseOnShutdown: true,
		// Multipart bodies are refused (415); fasthttp must not parse them first.
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               readBufferSize,
		// fasthttp's error values must not quote request bytes (they reach no response or
		// log line of ours anyway).
		SecureErrorLogMessage: true,
		Logger:                &httpLogger{log: s.log},
	}
	return s, nil
}

// AddModel loads a model version beside those served (tests and simple embeddings; a server
// with a Repository loads with Reload). The first model added is the default of /predict/.
func (s *Server) AddModel(o ModelOptions) error {
	if o.Version == "" {
		o.Version = "1"
	}
	if err := validModelName(o.Name); err != nil {
		return err
	}
	var specs []ModelSpec
	for _, m := range s.models.Load().byName[o.Name] {
		if m.version == o.Version {
			return fmt.Errorf("gateway: model %s version %s is already served", o.Name, o.Version)
		}
		specs = append(specs, ModelSpec{Name: m.name, Version: m.version, Fingerprint: m.fingerprint})
	}
	specs = append(specs, ModelSpec{Name: o.Name, Version: o.Version, Fingerprint: fmt.Sprintf("added %p", &o),
		Load: func() (ModelOptions, error) { return o, nil }})
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.apply(specs, o.Name)
}

func validModelName(name string) error {
	if name == "" {
		return errors.New("gateway: a model needs a name")
	}
	if strings.HasSuffix(name, tensorSuffix) {
		return fmt.Errorf("gateway: model name %q: the suffix %s names a model's tensor interface", name, tensorSuffix)
	}
	return nil
}

// lookup returns a model version counted as in use (release it with done): the newest version
// when version is empty.
func (s *Server) lookup(name, version string) (*model, error) {
	for range 3 { // a model closing under a concurrent swap is looked up again
		vs := s.models.Load().byName[name]
		if len(vs) == 0 {
			return nil, fmt.Errorf("%w: unknown model %q", errNotFound, wire.Truncate(name, 100))
		}
		m := vs[len(vs)-1]
		if version != "" {
			m = nil
			for _, v := range vs {
				if v.version == version {
					m = v
				}
			}
			if m == nil {
				return nil, fmt.Errorf("%w: model %q has no version %q (versions: %s)", errNotFound, wire.Truncate(name, 100),
					wire.Truncate(version, 40), strings.Join(s.versions(name), ", "))
			}
		}
		if m.acquire() {
			return m, nil
		}
		if s.draining.Load() {
			return nil, fmt.Errorf("%w: the server is shutting down", errDraining)
		}
	}
	return nil, fmt.Errorf("%w: model %q is being unloaded", errNotFound, wire.Truncate(name, 100))
}

// versions lists a model's versions, oldest first.
func (s *Server) versions(name string) []string {
	var out []string
	for _, m := range s.models.Load().byName[name] {
		out = append(out, m.version)
	}
	return out
}

func (s *Server) registerServerMetrics() {
	set := s.met.set
	set.NewGauge("gateway_decode_workers", func() float64 { return float64(s.opts.DecodeWorkers) })
	set.NewGauge("gateway_decode_queue_capacity", func() float64 { return float64(s.opts.DecodeQueue) })
	set.NewGauge("gateway_decode_busy", func() float64 { _, b := s.gate.Stats(); return float64(b) })
	set.NewGauge("gateway_decode_waiting", func() float64 { w, _ := s.gate.Stats(); return float64(w) })
	set.NewGauge("gateway_inflight_bytes", func() float64 { return float64(s.mem.Used()) })
	set.NewGauge("gateway_inflight_bytes_limit", func() float64 { return float64(s.mem.Limit()) })
	set.NewGauge("gateway_inflight_requests", func() float64 { return float64(s.inflight.Load()) })
	set.NewGauge("gateway_connections", func() float64 { return float64(s.conns.Open()) })
	set.NewGauge("gateway_connections_idle", func() float64 { return float64(s.conns.Idle()) })
	set.NewGauge("gateway_connections_lingering", func() float64 { return float64(s.conns.Lingering()) })
	set.NewGauge("gateway_ready", func() float64 {
		if s.ready.Load() {
			return 1
		}
		return 0
	})
	set.NewGauge(fmt.Sprintf(`gateway_build_info{version=%q}`, Version), func() float64 { return 1 })
}

// WriteMetrics writes the server's metrics in Prometheus text format, then the process's. The
// families carry # HELP and # TYPE lines once metrics.ExposeMetadata(true) has been called (a
// setting of the whole process: cmd/gateway's main calls it).
func (s *Server) WriteMetrics(w *bytes.Buffer) {
	s.met.write(w)
	metrics.WriteProcessMetrics(w)
}

// Serve accepts connections on ln until Shutdown. It returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	l := s.conns.Listen(ln)
	s.lnMu.Lock()
	s.lns = append(s.lns, l)
	s.lnMu.Unlock()
	if s.draining.Load() {
		l.Close()
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
	s.draining.Store(true)
	s.ready.Store(false)
	s.drainDelay(ctx)
	s.stopAccepting()
	var errs []error
	if err := s.answerInFlight(ctx); err != nil {
		errs = append(errs, err)
	}
	s.closeConnections()
	s.stopReloads()
	if err := s.stopModels(); err != nil {
		errs = append(errs, err)
	}
	s.gone.Close()
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

// stopAccepting closes the listeners: each accepts what waits in its backlog first, and those
// connections are served. (Not fasthttp's Shutdown: it closes connections it sees idle even
// when a request has just arrived on them, and drops that request.)
func (s *Server) stopAccepting() {
	s.lnMu.Lock()
	for _, l := range s.lns {
		l.Close()
	}
	s.lnMu.Unlock()
	s.adminMu.Lock()
	if s.admin != nil {
		go s.admin.Shutdown()
	}
	s.adminMu.Unlock()
}

// answerInFlight waits until every request in flight is answered. If ctx ends first, everyone
// still waiting is answered (503 draining) and those answers are waited for, abortGrace at
// most; it returns an error when some are still unanswered then.
func (s *Server) answerInFlight(ctx context.Context) error {
	if s.waitIdle(ctx) {
		return nil
	}
	s.aborted.Store(true)
	s.abortFn(errDraining)
	s.conns.InterruptReads()
	s.dropQueued() // queued samples are answered batcher.ErrClosed
	grace, cancel := context.WithTimeout(context.Background(), abortGrace)
	defer cancel()
	if !s.waitIdle(grace) {
		return fmt.Errorf("gateway: %d requests still unanswered %v after server.shutdown_timeout", s.inflight.Load(), abortGrace)
	}
	return nil
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
func (s *Server) stopReloads() {
	s.closing.Store(true) // a reload that ends from now on installs nothing (apply)
	wait := time.Now()
	if !s.aborted.Load() {
		wait = wait.Add(abortGrace)
	}
	for ; ; time.Sleep(10 * time.Millisecond) {
		if s.applyMu.TryLock() {
			s.stopped = true
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
func (s *Server) stopModels() error {
	ctx := context.Background()
	if s.aborted.Load() {
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
	if !s.draining.Load() {
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

// handle routes a request.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		if s.draining.Load() {
			ctx.SetConnectionClose() // a drain that began while the request was handled
		}
	}()
	path := string(ctx.Path())
	if proto := ctx.Request.Header.Protocol(); string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0" {
		// fasthttp reads any HTTP/x.y request line and answers it as HTTP/1.1.
		lingerOnClose(ctx)
		writeError(ctx, fasthttp.StatusHTTPVersionNotSupported, "only HTTP/1.1 and HTTP/1.0 are served, not "+wire.Truncate(string(proto), 20))
		return
	}
	if raw := ctx.Request.URI().PathOriginal(); bytes.Contains(raw, []byte("%2F")) || bytes.Contains(raw, []byte("%2f")) {
		// fasthttp decodes %2F into a separator: /v2/models/m%2Finfer would run inference where a
		// proxy routing on the raw path saw one segment. No name here holds a slash.
		s.drainBody(ctx)
		writeError(ctx, fasthttp.StatusBadRequest, "an encoded slash (%2F) in the path is not allowed")
		return
	}
	if !isInferencePath(path) {
		// A body that the answer did not need (a POST to /metrics, a health check, an unknown
		// path) is read and dropped, so that the next request on the connection is read from
		// where it starts (fasthttp drops 256 KiB at most, then closes). Inference paths read
		// or drain their bodies themselves.
		defer func() {
			switch {
			case ctx.Response.ConnectionClose():
			case s.draining.Load():
				lingerOnClose(ctx) // the connection closes after this answer: no wait for the body
			default:
				s.drainBody(ctx)
			}
		}()
	}
	if overflowConn(ctx) && !isHealthPath(path) {
		// Over server.max_connections with no idle connection to close: only health and
		// metrics are served on this connection.
		s.met.refusals[refuseConnections].Inc()
		s.drainBody(ctx)
		lingerOnClose(ctx)
		ctx.Response.Header.Set("Retry-After", s.retryAfter)
		writeError(ctx, fasthttp.StatusServiceUnavailable, overflowMessage(s.opts.MaxConnections))
		return
	}
	switch {
	case path == "/predict/" || path == "/predict":
		m, err := s.lookup(s.models.Load().first, "")
		if err != nil {
			s.drainBody(ctx)
			s.noModel(ctx)
			return
		}
		defer m.done()
		if !ctx.IsPost() {
			m.met.req.observe(fasthttp.StatusMethodNotAllowed, reasonNotFound, 0)
			s.methodNotAllowed(ctx, "POST")
			return
		}
		s.serveInference(ctx, m, predictAPI{})
	case strings.HasPrefix(path, "/models/"):
		name, tail, _ := strings.Cut(path[len("/models/"):], "/")
		m, err := s.lookup(name, "")
		if err != nil {
			s.lookupFailed(ctx, err, tail == "predict" || tail == "predict/")
			return
		}
		defer m.done()
		switch tail {
		case "predict", "predict/":
			if !ctx.IsPost() {
				m.met.req.observe(fasthttp.StatusMethodNotAllowed, reasonNotFound, 0)
				s.methodNotAllowed(ctx, "POST")
				return
			}
			s.serveInference(ctx, m, predictAPI{})
		case "":
			if !ctx.IsGet() && !ctx.IsHead() {
				s.methodNotAllowed(ctx, "GET")
				return
			}
			s.modelMetadata(ctx, m, false)
		default:
			s.notFound(ctx, path)
		}
	case strings.HasPrefix(path, "/v2"):
		s.handleV2(ctx, path)
	case path == "/":
		if !ctx.IsGet() && !ctx.IsHead() {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		if s.draining.Load() {
			writeJSONRaw(ctx, fasthttp.StatusServiceUnavailable, `{"status":"draining","message":"The gateway is shutting down."}`)
			return
		}
		writeJSONRaw(ctx, 200, `{"status":"healthy","message":"The gateway is running."}`)
	case path == "/metrics":
		var buf bytes.Buffer
		s.WriteMetrics(&buf)
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		ctx.SetBody(buf.Bytes())
	default:
		s.notFound(ctx, path)
	}
}

// connState is fasthttp's ConnState hook: the tracker follows each connection's state.
func (s *Server) connState(nc net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateActive:
		s.conns.Active(nc)
	case fasthttp.StateIdle:
		s.conns.Idled(nc)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.conns.Closed(nc)
	}
}

// lingerOnClose closes the request's connection after the answer, lingering: the client may
// still be sending the body the server did not read.
func lingerOnClose(fc *fasthttp.RequestCtx) {
	fc.SetConnectionClose()
	if c, ok := fc.Conn().(*netx.Conn); ok {
		c.LingerOnClose()
	}
}

// overflowConn reports whether the request's connection was admitted over
// server.max_connections (it is served health checks and metrics only).
func overflowConn(fc *fasthttp.RequestCtx) bool {
	c, ok := fc.Conn().(*netx.Conn)
	return ok && c.Overflow()
}

// overflowMessage is the refusal over server.max_connections.
func overflowMessage(max int) string {
	return fmt.Sprintf("the server has %d connections open (server.max_connections); try again", max)
}

// isInferencePath: the paths whose requests go through the pipeline (which reads or drains
// their bodies).
func isInferencePath(p string) bool {
	switch {
	case p == "/predict/" || p == "/predict":
		return true
	case strings.HasPrefix(p, "/models/"):
		_, tail, _ := strings.Cut(p[len("/models/"):], "/")
		return tail == "predict" || tail == "predict/"
	case strings.HasPrefix(p, "/v2/models/"):
		_, _, tail, _, ok := v2ModelPath(p[len("/v2/models/"):])
		return ok && tail == "infer"
	}
	return false
}

// isHealthPath: the paths served even over the connection limit.
func isHealthPath(p string) bool {
	return p == "/" || p == "/metrics" || strings.HasPrefix(p, "/v2/health/") || strings.HasSuffix(p, "/ready")
}

// noModel answers /predict/ when its default model (the repository's first) is not served.
func (s *Server) noModel(ctx *fasthttp.RequestCtx) int {
	// Counted on model _unknown (the default's own series go with it when it is unloaded), so
	// that an outage of the default model shows in the error rate.
	reason := reasonUnavailable
	if s.draining.Load() {
		reason = reasonDraining
	}
	s.met.unknown.observe(fasthttp.StatusServiceUnavailable, reason, 0)
	ctx.Response.Header.Set("Retry-After", s.retryAfter)
	msg := "no model is being served (the server is starting or draining)"
	if name := s.models.Load().first; name != "" && !s.draining.Load() {
		msg = fmt.Sprintf("the default model %q is not loaded (unloaded through the repository API, or it failed to load); other models are served at /models/{name}/predict", wire.Truncate(name, 100))
	}
	writeError(ctx, fasthttp.StatusServiceUnavailable, msg)
	return fasthttp.StatusServiceUnavailable
}

// lookupFailed answers a request for a model that is not served: 404, or 503 with
// Retry-After while the server drains. Inference requests are counted (on model "_unknown").
func (s *Server) lookupFailed(ctx *fasthttp.RequestCtx, err error, inference bool) {
	s.drainBody(ctx)
	s.lookupAnswer(ctx, err, inference)
}

// lookupAnswer writes lookupFailed's answer (the body is the caller's) and returns its status.
func (s *Server) lookupAnswer(ctx *fasthttp.RequestCtx, err error, inference bool) int {
	status, reason := s.classify(err)
	if inference {
		s.met.unknown.observe(status, reason, 0)
	}
	if retryable(reason) {
		ctx.Response.Header.Set("Retry-After", s.retryAfter)
	}
	writeError(ctx, status, err.Error())
	return status
}

func (s *Server) notFound(ctx *fasthttp.RequestCtx, path string) {
	s.drainBody(ctx)
	writeError(ctx, fasthttp.StatusNotFound, "not found: "+wire.Truncate(path, 100))
}

func (s *Server) methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	s.drainBody(ctx)
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed; use "+allow)
}

// handleParseError answers a request that could not be read or parsed. Its answers are ours
// (JSON, the right status) and never repeat request bytes: fasthttp's own page for some of
// these errors quotes the raw header block, credentials included. Nothing of err's text
// reaches the response or the log.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than server.max_body_bytes (%d bytes)", s.opts.MaxBodyBytes))
	case errors.As(err, &small):
		if c, ok := ctx.Conn().(*netx.Conn); ok && !c.LineDone() {
			writeError(ctx, fasthttp.StatusRequestURITooLong,
				fmt.Sprintf("the request line (method, URI, version) is longer than the %d-byte header limit", readBufferSize))
		} else {
			writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge,
				fmt.Sprintf("the request's header block is larger than %d bytes", readBufferSize))
		}
	case errors.As(err, &ne) && ne.Timeout():
		writeError(ctx, fasthttp.StatusRequestTimeout, "timed out reading the request (server.read_timeout)")
	case errors.Is(err, netx.ErrTLSOnPlainPort):
		writeError(ctx, fasthttp.StatusBadRequest, "this port speaks plain HTTP, not TLS: use http://, not https://")
	case errors.Is(err, netx.ErrNotHTTP):
		writeError(ctx, fasthttp.StatusBadRequest, "not an HTTP/1.x request: a request line starts with a method, such as POST")
	case errors.Is(err, netx.ErrBareLF):
		writeError(ctx, fasthttp.StatusBadRequest, "the request line ends with a bare LF: HTTP/1.1 lines end with CRLF")
	default:
		writeError(ctx, fasthttp.StatusBadRequest, "malformed HTTP request")
	}
}

// readBufferSize bounds a request's header block, request line included.
const readBufferSize = 16 << 10

// httpLogger receives fasthttp's own log lines. Their arguments can quote request bytes (the
// header block of a malformed request, with its credentials), so only the constant message is
// logged, through slog, at most once a second.
type httpLogger struct {
	log  *slog.Logger
	last atomic.Int64 // unix nanoseconds of the last line logged
}

func (l *httpLogger) Printf(format string, _ ...any) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(time.Second) || !l.last.CompareAndSwap(last, now) {
		return
	}
	msg, _, _ := strings.Cut(format, "%")
	l.log.Warn("http server: "+strings.TrimSpace(strings.TrimRight(msg, " :\"")), "detail", "arguments withheld: they may quote request bytes")
}
