// Command gateway serves ONNX image classifiers over HTTP with dynamic batching.
//
//	gateway -model path/to/model.onnx [-labels labels.txt] [-name NAME]   (no YAML)
//	gateway -config configs/gateway.yaml [-listen HOST:PORT] [-check | -print-config]
//	gateway --model_dir=/mnt/models --model_name=NAME [--http_port=8080]   (KServe: kserve.go)
//	gateway -version
//
// main only wires the components and runs the lifecycle: load and validate the config (-check
// exits here, after loading every model once; -print-config prints it), create the ONNX
// Runtime sessions, the batchers and the server; serve; on SIGTERM or SIGINT drain (stop
// accepting, answer everything accepted) and stop in reverse order. docs/configuration.md,
// generated from flags.go and the configs package, lists every flag, variable and key.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/internal/tracing"
	"github.com/imagegate/imagegate/preprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

func main() {
	// Settings of the whole process, made here rather than when a package is imported:
	ort.LimitMallocArenas()      // glibc: one malloc arena per CPU, before GOMAXPROCS is raised
	metrics.ExposeMetadata(true) // /metrics families carry # HELP and # TYPE
	o := newOptions(flag.CommandLine)
	flag.Parse()
	if o.health != "" {
		os.Exit(healthcheck(o.health))
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	if o.version {
		printVersion(os.Stdout)
		return
	}
	// The flags' log settings until the configuration's are known.
	log := newLogger(os.Stderr, cmp.Or(o.logLevel, "info"), cmp.Or(o.logFormat, "text"))
	src, err := o.source()
	if err == nil {
		err = run(o, src, log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// run is the gateway's life, one step after another: the configuration, the process's settings
// and ONNX Runtime, the server with every model loaded and warmed (-check ends there), the
// listeners, the reloads (SIGHUP, repository.poll), then the wait for SIGTERM or SIGINT and the
// drain.
func run(o *options, src source, log *slog.Logger) error {
	start := time.Now()
	repo := &repository{load: src.load, path: src.name, listen: src.listen, listenFrom: src.listenFrom, log: log}
	cfg, err := repo.config()
	if err != nil {
		return err
	}
	o.apply(cfg)
	if o.printConfig {
		return printConfig(os.Stdout, cfg, src.name)
	}
	log = configureLogs(cfg, repo)
	lib, token, err := setUpProcess(cfg, log)
	if err != nil {
		return err
	}
	traces, err := tracerProvider(log)
	if err != nil {
		return err
	}
	defer flushTraces(traces, log)
	srv, err := gateway.New(serverOptions(cfg, token, log, traces), repo)
	if err != nil {
		return err
	}
	// Every model is loaded (and checked against its configuration: labels, preprocessing,
	// input size) and warmed before the server listens; -check stops there. (Listening first,
	// to answer health checks during the load, slowed a start measured with frequent probes,
	// bench/history.md; a startupProbe covers the load.)
	if err := startModels(srv, cfg, o.triton, log); err != nil { // Reload, and explicit model control's loads (triton.go)
		closeNow(srv)
		return err
	}
	if o.check {
		reportCheck(cfg, src, lib, repo)
		closeNow(srv)
		return nil
	}
	l, err := listen(srv, cfg, o, token, log)
	if err != nil {
		closeNow(srv)
		return err
	}
	log.Info("serving", "addr", l.addr, "tls", tlsOn(cfg.Server, "http"), "api_keys", cfg.Server.APIKeys.File != "", "models", len(cfg.Models),
		"onnxruntime", ort.Version(), "startup", time.Since(start).Round(time.Millisecond))
	r := startReloads(srv, repo, cfg, log)
	sig := make(chan os.Signal, 8) // a burst of signals is not dropped (the drain logs each)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := waitForStop(sig, l.served, r, cfg, log); err != nil {
		closeNow(srv)
		return err
	}
	defer ignoreSignals(sig, log)()
	return drain(srv, cfg, l, r, log)
}

// configureLogs makes the configuration's log settings the process's (and the repository's).
func configureLogs(cfg *configs.Config, repo *repository) *slog.Logger {
	log := newLogger(os.Stderr, cfg.Log.Level, cfg.Log.Format)
	repo.log = log
	slog.SetDefault(log) // what packages log without a logger of their own (runtime/ort's model cache)
	return log
}

// setUpProcess loads ONNX Runtime (the library's path is returned) and reads the admin token,
// then makes the settings of the whole process: the open-file limit, GOMAXPROCS, the GC.
func setUpProcess(cfg *configs.Config, log *slog.Logger) (lib, token string, err error) {
	lib = ort.FindLibrary(cfg.ONNXRuntime.Library)
	if err := ort.Init(lib); err != nil {
		return "", "", err
	}
	if token, err = adminToken(cfg.Server.AdminTokenFile); err != nil {
		return "", "", err
	}
	listeners := 1
	if cfg.Server.GRPCListen != "off" {
		listeners = 2 // the gRPC listener has its own max_connections
	}
	checkFileLimit(listeners*cfg.Server.MaxConnections, log)
	setProcs(cfg, log)
	setGC(log)
	return lib, token, nil
}

// closeNow stops a server that served nothing: no drain to wait for.
func closeNow(srv *gateway.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv.Shutdown(ctx)
}

// reportCheck says what -check found valid.
func reportCheck(cfg *configs.Config, src source, lib string, repo *repository) {
	for _, m := range cfg.Models {
		fmt.Printf("ok: model %s (%s): %d instance(s)%s\n", m.Name, m.Path, m.Runtime.Instances, repo.choices(m.Name)) // its settings: the "model settings" log line
	}
	fmt.Printf("ok: %s is valid (ONNX Runtime %s from %s)\n", src.name, ort.Version(), lib)
}

// listening is the public listener and how its Serve ended.
type listening struct {
	ln     net.Listener
	addr   string
	served chan error
}

// listen opens the listeners and serves on them: the public one (it must open), the admin API
// and gRPC (each served if its address can be had; a gRPC address set explicitly must open).
func listen(srv *gateway.Server, cfg *configs.Config, o *options, token string, log *slog.Logger) (*listening, error) {
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s (-listen, $IMAGEGATE_LISTEN or server.listen): %w", cfg.Server.Listen, err)
	}
	l := &listening{ln: ln, addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { l.served <- srv.Serve(ln) }()
	if a := cfg.Server.AdminListen; a != "off" {
		if aln, err := net.Listen("tcp", a); err != nil {
			// Several gateways on one host: the second finds the default port taken. It
			// serves without the admin API rather than not at all; SIGHUP still reloads.
			log.Warn("admin API not served: cannot listen (set server.admin_listen or -admin-listen)", "addr", a, "err", err)
		} else {
			go srv.ServeAdmin(aln)
			log.Info("admin", "addr", aln.Addr().String(), "token", token != "", "tls", tlsOn(cfg.Server, "admin"))
		}
	}
	if a := cfg.Server.GRPCListen; a != "off" {
		gln, err := net.Listen("tcp", a)
		switch {
		case err != nil && o.grpcListenExplicit():
			ln.Close()
			return nil, fmt.Errorf("cannot listen for gRPC on %s (-grpc-listen, $%s or server.grpc_listen): %w", a, grpcListenEnv, err)
		case err != nil:
			// Several gateways on one host: the second finds the default port taken. It
			// serves HTTP without gRPC rather than not at all.
			log.Warn("gRPC API not served: cannot listen (set server.grpc_listen or -grpc-listen)", "addr", a, "err", err)
		default:
			go func() {
				if err := srv.ServeGRPC(gln); err != nil {
					log.Error("gRPC server stopped", "err", err)
				}
			}()
			log.Info("grpc", "addr", gln.Addr().String(), "tls", tlsOn(cfg.Server, "grpc"))
		}
	}
	return l, nil
}

// reloading is the reloads' machinery: repository.poll's loop and SIGHUP's.
type reloading struct {
	stopPoll chan struct{}
	requests chan struct{} // SIGHUP's, one pending at most
	wg       sync.WaitGroup
}

// startReloads starts repository.poll's loop (when set) and the loop that reloads on SIGHUP,
// off the signal loop: a SIGTERM is never kept waiting.
func startReloads(srv *gateway.Server, repo *repository, cfg *configs.Config, log *slog.Logger) *reloading {
	r := &reloading{stopPoll: make(chan struct{}), requests: make(chan struct{}, 1)}
	if d := cfg.Repository.Poll.D(); d > 0 {
		r.wg.Go(func() { repo.poll(srv, d, r.stopPoll) })
	}
	r.wg.Go(func() {
		for range r.requests {
			t := time.Now()
			if err := srv.Reload(); err != nil {
				log.Error("reload failed: what was served is still served", "signal", "SIGHUP", "took", time.Since(t).Round(time.Millisecond), "err", err)
			} else {
				log.Info("reloaded", "signal", "SIGHUP", "took", time.Since(t).Round(time.Millisecond))
			}
		}
	})
	return r
}

// stop ends the reloads' loops (a reload in progress finishes).
func (r *reloading) stop() {
	close(r.stopPoll)
	close(r.requests)
}

// waitForStop serves until SIGTERM or SIGINT (nil: drain now), passing each SIGHUP to the
// reloads; it returns the error of a public listener that stopped serving.
func waitForStop(sig <-chan os.Signal, served <-chan error, r *reloading, cfg *configs.Config, log *slog.Logger) error {
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				select {
				case r.requests <- struct{}{}:
				default: // a reload is pending already: it will read the latest files
				}
				continue
			}
			log.Info("draining", "signal", s.String(), "drain_delay", cfg.Server.DrainDelay.D(), "shutdown_timeout", cfg.Server.ShutdownTimeout.D())
			return nil
		case err := <-served:
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
		}
	}
}

// ignoreSignals notes and ignores the signals that arrive during the drain, until the returned
// function is called: a SIGHUP (logrotate, a config tool) or a second SIGTERM (a supervisor
// repeating itself) must not end the drain with the default action, killing the process under
// the requests it is answering.
func ignoreSignals(sig chan os.Signal, log *slog.Logger) (done func()) {
	drained := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				log.Warn("signal ignored: the gateway is draining", "signal", s.String())
			case <-drained:
				signal.Stop(sig)
				return
			}
		}
	}()
	return func() { close(drained) }
}

// drain stops the reloads and drains the server: shutdown_timeout bounds the wait for requests
// in flight, after drain_delay; then the requests still waiting are answered 503 and the
// server exits once all are answered.
func drain(srv *gateway.Server, cfg *configs.Config, l *listening, r *reloading, log *slog.Logger) error {
	r.stop()
	stopStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.DrainDelay.D()+cfg.Server.ShutdownTimeout.D())
	defer cancel()
	err := srv.Shutdown(ctx)
	// A reload in progress when the drain began (SIGHUP, repository.poll) may finish within the
	// drain's bound for it; the process does not wait longer (Shutdown refuses what it would
	// install).
	reloaded := make(chan struct{})
	go func() { r.wg.Wait(); close(reloaded) }()
	select {
	case <-reloaded:
	case <-time.After(gateway.ShutdownTail):
		log.Warn("a model reload is still running: exiting without it")
	}
	l.ln.Close() // in case the signal came before Serve took the listener
	select {
	case e := <-l.served:
		if e != nil && !errors.Is(e, net.ErrClosed) {
			err = errors.Join(err, e)
		}
	case <-time.After(5 * time.Second):
		err = errors.Join(err, errors.New("the server did not stop serving"))
	}
	log.Info("stopped", "drain", time.Since(stopStart).Round(time.Millisecond), "err", err)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// checkFileLimit raises the process's open-file limit to what maxConns connections need (each
// connection is a descriptor; the overflow connections and the models' files come on top), up
// to the hard limit, and warns when even that is short: then connections beyond it wait in the
// listen backlog (the accept loop backs off when descriptors run out).
func checkFileLimit(maxConns int, log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	need := uint64(maxConns + max(16, maxConns/8) + 256)
	if lim.Cur >= need {
		return
	}
	lim.Cur = min(need, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur >= need {
		log.Info("raised the open-file limit for server.max_connections", "nofile", lim.Cur)
		return
	}
	log.Warn("the open-file limit is below what server.max_connections needs: raise ulimit -n or lower max_connections",
		"max_connections", maxConns, "needs", need, "limit", lim.Cur)
}

// setProcs raises GOMAXPROCS (unless the environment sets it) by one per decode worker and
// one per model instance. A decode holds its P while it resamples and a batch loop's thread
// takes one back after each model run: with GOMAXPROCS at the CPU count (Go's default), a
// saturated server left the goroutines that accept, refuse and answer waiting for a P, up to
// Go's preemption (docs/internals.md, "GOMAXPROCS above the CPU count"). The CPUs are shared
// by the kernel as before; what changes is that a ready goroutine finds a P.
func setProcs(cfg *configs.Config, log *slog.Logger) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	base := runtime.GOMAXPROCS(0) // the CPUs, or the container's CPU limit
	n := base + cfg.Server.DecodeWorkers
	for _, m := range cfg.Models {
		n += m.Runtime.Instances
	}
	n = min(n, 4*base)
	runtime.GOMAXPROCS(n)
	log.Debug("GOMAXPROCS", "cpus", base, "procs", n)
}

// adminToken reads the admin bearer token from its file ("" when none is configured).
func adminToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := configs.ReadFile(path, configs.MaxTokenBytes)
	if err != nil {
		return "", fmt.Errorf("server.admin_token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("server.admin_token_file %s: the token must be at least 16 characters", path)
	}
	return tok, nil
}

// serverOptions translates the YAML server and log sections into the gateway's options.
func serverOptions(cfg *configs.Config, adminToken string, log *slog.Logger, traces *tracing.Provider) gateway.Options {
	c := cfg.Server
	o := gateway.Options{
		MaxBodyBytes:     int64(c.MaxBodyBytes),
		MaxInflightBytes: int64(c.MaxInflightBytes),
		GRPCCallWindow:   int64(c.GRPCCallWindow),
		ReadTimeout:      c.ReadTimeout.D(),
		WriteTimeout:     c.WriteTimeout.D(),
		IdleTimeout:      c.IdleTimeout.D(),
		DrainDelay:       c.DrainDelay.D(),
		DecodeWorkers:    c.DecodeWorkers,
		DecodeQueue:      c.DecodeQueue,
		QueueDiscipline:  c.QueueDiscipline,
		MaxConnections:   c.MaxConnections,
		QueueFullStatus:  c.QueueFullStatus,
		RetryAfter:       c.RetryAfter.D(),
		AdminToken:       adminToken,
		Console:          c.Console,
		Log:              log,
		Watchdog: gateway.WatchdogOptions{RunMultiple: c.Watchdog.RunMultiple, MinHang: c.Watchdog.MinHang.D(),
			MaxRun: c.Watchdog.MaxRun.D()},
	}
	if a := cfg.Log.Access; a.Mode != "off" {
		out := os.Stderr
		if a.Output == "stdout" {
			out = os.Stdout
		}
		o.AccessLog = newLogger(out, "info", cmp.Or(a.Format, cfg.Log.Format))
		if a.Mode == "all" {
			o.AccessSample = a.Sample
		}
	}
	if traces != nil {
		o.TracerProvider = traces
	}
	securityOptions(c, &o)
	return o
}

// tlsOn reports whether a listener (http, grpc, admin) serves TLS.
func tlsOn(c configs.Server, listener string) bool {
	_, on := c.TLS.For(listener)
	return on
}

// securityOptions translates server.tls, server.api_keys and server.credentials_poll.
func securityOptions(c configs.Server, o *gateway.Options) {
	for _, l := range []struct {
		name string
		dst  **gateway.TLSOptions
		off  bool // the listener is not opened
	}{{"http", &o.TLS.HTTP, false}, {"grpc", &o.TLS.GRPC, c.GRPCListen == "off"}, {"admin", &o.TLS.Admin, c.AdminListen == "off"}} {
		if t, on := c.TLS.For(l.name); on && !l.off {
			*l.dst = &gateway.TLSOptions{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile,
				ClientAuth: t.ClientAuth, MinVersion: t.MinVersion}
		}
	}
	if c.APIKeys.File != "" {
		o.Keys = gateway.KeyOptions{File: c.APIKeys.File, Open: c.APIKeys.Open}
	}
	o.CredentialsPoll = c.CredentialsPoll.D()
}

// tracerProvider is the OpenTelemetry tracer provider the OTEL_* environment variables ask
// for (internal/tracing), nil when they ask for none; its errors (a collector out of reach)
// are logged, throttled.
func tracerProvider(log *slog.Logger) (*tracing.Provider, error) {
	c, err := tracing.Parse(os.Getenv)
	if err != nil || !c.Enabled {
		return nil, err
	}
	otel.SetErrorHandler(tracing.ErrorHandler(log)) // a setting of the whole process
	tp, err := tracing.New(context.Background(), c, gateway.Version)
	if err != nil {
		return nil, err
	}
	log.Info("tracing", "protocol", c.Protocol, "sampler", c.Sampler, "ratio", c.Ratio)
	return tp, nil
}

// flushTraces exports the spans still buffered, within traceFlushTimeout.
func flushTraces(tp *tracing.Provider, log *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans not exported at exit", "err", err)
	}
}

// traceFlushTimeout bounds the export of the last spans at exit.
const traceFlushTimeout = 5 * time.Second

// modelOptions completes one model version's configuration from the model file (what the
// YAML leaves empty: its input, output, preprocessing and labels), logs where each setting
// came from, translates it into the gateway's options and creates its ONNX Runtime sessions,
// one per instance, of the input's element type.
func modelOptions(m configs.Model, version string, server configs.Server, log *slog.Logger) (gateway.ModelOptions, error) {
	comp, err := completeModel(&m, server)
	if err != nil {
		return gateway.ModelOptions{}, err
	}
	logSettings(log, m.Name, version, comp)
	labels := comp.Labels
	if labels == nil && m.Task != configs.TaskEmbed {
		if labels, err = configs.LoadLabels(m.Labels); err != nil {
			return gateway.ModelOptions{}, fmt.Errorf("%s.labels: %w", m.Field(), err)
		}
		// A detector whose classes the model does not say (one with NMS built in) takes the
		// labels as they are: classes past them are named by their index.
		if len(labels) != comp.Classes && comp.Classes > 0 {
			return gateway.ModelOptions{}, fmt.Errorf("%s.labels: %s has %d labels, but the model's output has %d classes", m.Field(), m.Labels, len(labels), comp.Classes)
		}
	}
	po := preprocess.Options{
		Width: m.Input.Width, Height: m.Input.Height, Resize: m.Preprocess.Resize,
		Mode: preprocess.Mode(m.Preprocess.Mode), Scale: preprocess.Scale(m.Preprocess.Scale), Pad: uint8(m.Preprocess.Pad),
		Layout: preprocess.Layout(m.Input.Layout), MaxPixels: m.Preprocess.MaxPixels, FullDecode: m.Preprocess.FullDecode,
	}
	copy(po.Mean[:], m.Preprocess.Mean)
	copy(po.Std[:], m.Preprocess.Std)
	bc := batcher.Config{
		MaxBatchSize:        int(m.Batching.MaxBatchSize), // auto: chosen as the sessions are made
		MaxQueueDelay:       m.Batching.MaxQueueDelay.D(),
		MaxQueueSize:        m.Batching.MaxQueueSize,
		PreferredBatchSizes: m.Batching.PreferredBatchSizes,
		Priorities:          m.Batching.Priorities,
	}
	if t := m.Batching.Adaptive.LatencyTarget.D(); t > 0 {
		bc.Adaptive = &batcher.AdaptiveConfig{LatencyTarget: t}
		// A run on the CPU provider with one intra-op thread executes on the batch loop's own
		// thread, whose CPU time is then its true cost (other threads preempting it on a busy
		// machine would inflate wall time at random).
		if m.Runtime.IntraOpThreads == 1 && m.Runtime.ExecutionProvider == "cpu" {
			bc.CostClock = batcher.ThreadCPUClock()
		}
	}
	mo := gateway.ModelOptions{
		Name: m.Name, Labels: labels, InputName: m.Input.Name,
		Preprocess: po, Batching: bc, QueueTarget: m.Batching.QueueTarget.D(), DefaultTimeout: m.Batching.DefaultTimeout.D(),
		Parameters: parameters(comp),
	}
	if err := taskOptions(&mo, m, comp); err != nil {
		return gateway.ModelOptions{}, err
	}
	var auto *batchChoice
	switch m.Input.Type { // Complete took it from the model
	case "float32":
		mo.Runners, mo.Release, auto, err = sessions[float32](m, server)
	case "uint8":
		mo.Runners, mo.Release, auto, err = sessions[uint8](m, server)
	default:
		err = fmt.Errorf("%s.input.type: %s inputs are not served", m.Field(), m.Input.Type)
	}
	if auto != nil {
		auto.report(&mo, log, version)
	}
	return mo, err
}

// sessions creates a model's ONNX Runtime sessions with input elements T; for max_batch_size
// auto, the first one chooses the size (autobatch.go), which it returns.
func sessions[T ort.Elem](m configs.Model, server configs.Server) (gateway.Runners, func(), *batchChoice, error) {
	shape := []int64{3, int64(m.Input.Height), int64(m.Input.Width)}
	if m.Input.Layout == "NHWC" {
		shape = []int64{int64(m.Input.Height), int64(m.Input.Width), 3}
	}
	var ss []*ort.Session[T]
	closeAll := func() {
		for _, s := range ss {
			s.Close()
		}
	}
	runners := gateway.RunnersOf[T]{}
	var auto *batchChoice
	var outputs []string // the outputs of a task other than classification
	if m.Task != configs.TaskClassify {
		outputs = m.OutputNames()
	}
	for i := range m.Runtime.Instances {
		if i > 0 && m.Runtime.ShareSession() {
			s := ss[0].Share()
			ss = append(ss, s)
			runners = append(runners, runnerFor(s, m.Output.Name, outputs != nil))
			continue
		}
		optimized := m.Runtime.OptimizedModelPath
		if i > 0 {
			optimized = "" // written once, by the first instance
		}
		cfg := ort.SessionConfig{
			ModelPath: m.Path, InputName: m.Input.Name, OutputName: m.Output.Name, OutputNames: outputs, InputShape: shape,
			MaxBatchSize: int(m.Batching.MaxBatchSize), IntraOp: m.Runtime.IntraOpThreads, InterOp: m.Runtime.InterOpThreads,
			GraphOptimization: m.Runtime.GraphOptimization, OptimizedModelPath: optimized, Provider: m.Runtime.ExecutionProvider,
			NoCPUMemArena: m.Runtime.CPUMemArena == "off", RewriteHardSwish: m.Runtime.HardSwishRewrite == "on" || (m.Runtime.HardSwishRewrite == "auto" && ort.HardSwishRewritePays()),
			CacheDir: m.Runtime.CacheDir,
		}
		var s *ort.Session[T]
		var err error
		if m.Batching.MaxBatchSize.Auto() {
			s, auto, err = autoSession[T](cfg, m, server)
			if err == nil {
				m.Batching.MaxBatchSize = configs.BatchSize(auto.chosen) // the other instances'
			}
		} else {
			s, err = ort.NewSession[T](cfg)
		}
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		ss = append(ss, s)
		runners = append(runners, runnerFor(s, m.Output.Name, outputs != nil))
	}
	return runners, closeAll, auto, nil
}

// healthcheck GETs url and reports whether it answered 200. It probes the gateway of its own
// container: over https:// the certificate is not verified (what is checked is readiness, not
// the server's name), and an http:// URL that reaches a TLS port (the gateway answers so) is
// tried again over https://, so that the image's HEALTHCHECK works with TLS on too.
func healthcheck(url string) int {
	client := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	if rest, ok := strings.CutPrefix(url, "http://"); ok && resp.StatusCode == http.StatusBadRequest {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if strings.Contains(string(b), "speaks HTTPS") {
			resp.Body.Close()
			return healthcheck("https://" + rest)
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "healthcheck:", resp.Status)
		return 1
	}
	return 0
}
