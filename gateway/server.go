package gateway

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/gateway/internal/netx"
	"github.com/imagegate/imagegate/gateway/internal/sched"
	"github.com/imagegate/imagegate/gateway/internal/watchdog"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// Server is the gateway's HTTP server. Create it with New, add models with AddModel, run it
// with Serve, stop it with Shutdown. Its methods are safe for concurrent use.
type Server struct {
	opts       Options
	log        *slog.Logger
	met        *metricsRegistry
	adm        *admit.Control // admission: the memory budget, the decode gate, the queue target
	bodyBufs   *freeList      // bodies as read, and decompressed
	imageBufs  *freeList      // decoded base64 images
	conns      *netx.Tracker  // connections: the limit, idle closes, drains, lingering closes
	gone       *netx.Watcher  // clients that leave while their request waits
	threads    *sched.Threads // decode and model threads
	requests   sync.Pool      // *request
	srv        *fasthttp.Server
	retryAfter string

	repo      Repository
	applyMu   sync.Mutex      // serializes changes to models
	loaded    map[string]bool // under applyMu: models LoadModel named since UnloadModel (ModelSpec.Idle)
	models    atomic.Pointer[modelTable]
	states    states
	retiring  sync.WaitGroup // models being closed after a reload or an unload
	adminTok  []byte         // sha256 of the admin bearer token; nil: none
	grpcCalls atomic.Int64   // ModelInfer calls past grpcTap and not ended

	life lifecycle // the phase (lifecycle.go), the listeners, the abort context

	sec security // TLS sources, API keys (security.go)

	ids    *requestIDs   // request IDs of requests that bring none
	tracer trace.Tracer  // nil: no tracing
	access *accessLog    // nil: no access log
	dog    *watchdog.Dog // liveness

	inflight   atomic.Int64 // inference requests in the pipeline
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
		bodyBufs:   newFreeList(min(freeListBytes, opts.MaxInflightBytes/8)),
		imageBufs:  newFreeList(min(freeListBytes, opts.MaxInflightBytes/8)),
		gone:       netx.NewWatcher(),
		threads:    sched.New(),
		retryAfter: strconv.Itoa(max(1, int((opts.RetryAfter+time.Second/2)/time.Second))),
		repo:       repo,
		ids:        newRequestIDs(),
	}
	s.life.init()
	discipline, _ := admit.ParseDiscipline(opts.QueueDiscipline) // validated
	s.adm = admit.New(admit.Config{MaxBody: opts.MaxBodyBytes, MaxInflight: opts.MaxInflightBytes,
		DecodeWorkers: opts.DecodeWorkers, DecodeQueue: opts.DecodeQueue, Discipline: discipline})
	s.dog = watchdog.New(opts.Watchdog.WithDefaults(), opts.Log)
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	if opts.AccessLog != nil {
		s.access = &accessLog{log: opts.AccessLog, sample: opts.AccessSample}
	}
	if opts.AdminToken != "" {
		h := sha256.Sum256([]byte(opts.AdminToken))
		s.adminTok = h[:]
	}
	s.requests.New = func() any { return new(request) }
	s.conns = netx.NewTracker(netx.Config{
		MaxConns:   opts.MaxConnections,
		Refusal:    netx.Refusal(`{"error":"the server has too many connections open (server.max_connections); try again"}`, s.retryAfter),
		Refused:    s.met.refusals[refuseConnections].Inc,
		ClosedIdle: s.met.set.NewCounter("gateway_connections_closed_idle_total").Inc,
	})
	s.models.Store(&modelTable{byName: map[string][]*model{}})
	s.registerServerMetrics()
	if err := s.initSecurity(); err != nil {
		s.threads.Close()
		s.gone.Close()
		return nil, err
	}
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
			return nil, unknownModel(name)
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
				return nil, unknownVersion(name, version, s.versions(name))
			}
		}
		if m.acquire() {
			return m, nil
		}
		if s.draining() {
			return nil, fmt.Errorf("%w: the server is shutting down", errDraining)
		}
	}
	return nil, fmt.Errorf("%w: model %q is being unloaded", errNotFound, wire.Truncate(name, 100))
}

func unknownModel(name string) error {
	return fmt.Errorf("%w: unknown model %q", errNotFound, wire.Truncate(name, 100))
}

func unknownVersion(name, version string, versions []string) error {
	return fmt.Errorf("%w: model %q has no version %q (versions: %s)", errNotFound, wire.Truncate(name, 100),
		wire.Truncate(version, 40), strings.Join(versions, ", "))
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
	set.NewGauge("gateway_decode_busy", func() float64 { _, b := s.adm.Gate.Stats(); return float64(b) })
	set.NewGauge("gateway_decode_waiting", func() float64 { w, _ := s.adm.Gate.Stats(); return float64(w) })
	set.NewGauge("gateway_decode_incoming", func() float64 { return float64(s.adm.Gate.IncomingNow()) })
	set.NewGauge("gateway_decode_wait_predicted_seconds", func() float64 { return s.adm.Gate.QueueWait().Seconds() })
	set.NewGauge("gateway_inflight_bytes", func() float64 { return float64(s.adm.Mem.Used()) })
	set.NewGauge("gateway_inflight_bytes_limit", func() float64 { return float64(s.adm.Mem.Limit()) })
	set.NewGauge("gateway_inflight_requests", func() float64 { return float64(s.inflight.Load()) })
	set.NewGauge("gateway_connections", func() float64 { return float64(s.conns.Open()) })
	set.NewGauge("gateway_connections_idle", func() float64 { return float64(s.conns.Idle()) })
	set.NewGauge("gateway_connections_lingering", func() float64 { return float64(s.conns.Lingering()) })
	set.NewGauge("gateway_live", func() float64 {
		if live, _ := s.dog.Live(); live {
			return 1
		}
		return 0
	})
	set.NewGauge("gateway_ready", func() float64 {
		if s.ready() {
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
