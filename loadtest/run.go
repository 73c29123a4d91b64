package loadtest

import (
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Progress is a snapshot of a running test, passed to Config.Progress.
type Progress struct {
	Elapsed   time.Duration // since the start, warm-up included
	Warmup    bool          // still in the warm-up phase
	Sent      uint64        // requests sent, warm-up included
	Completed uint64        // requests finished (response or error)
	OK        uint64        // finished with a 2xx status
	Errors    uint64        // finished otherwise
	// Fraction is the estimated share of the run done, in [0, 1].
	Fraction float64
	Done     bool // the last call
}

// job is one open-loop request released by the pacer.
type job struct {
	seq, intended int64
	warm          bool
}

// sample is what a worker hands the collector for one request; times are
// nanoseconds since the run's start.
type sample struct {
	intended int64 // when the request should have been sent
	sent     int64 // when it was sent
	done     int64 // when it finished
	bytesIn  int64
	bytesOut int64
	status   int32
	kind     errKind
	warm     bool
	expired  bool  // a refusal the server marked as given after the request waited (RefusalHeader)
	err      error // kept only for the first error of each kind
}

// pacer hands out sequence numbers and intended send times. In open-loop
// mode the times follow the arrival process whatever the workers do, so a
// worker that picks up a request late still measures from its intended time.
type pacer struct {
	mu       sync.Mutex
	cfg      *Config
	start    time.Time
	seq      int64   // next sequence number
	measured int64   // measured requests handed out
	next     float64 // open loop: offset of the next intended time, seconds
	rng      *rand.Rand
	stopped  bool
	unsent   uint64 // open loop: requests the rate scheduled in the window but never sent

	measureStart atomic.Int64 // ns since start; -1 until the measured phase begins
	measureEnd   int64        // end of the measured phase, ns since start; 0 if no duration (guarded by mu)
}

func newPacer(cfg *Config, start time.Time) *pacer {
	p := &pacer{cfg: cfg, start: start, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	p.measureStart.Store(-1)
	if cfg.WarmupRequests == 0 {
		p.beginMeasure(int64(cfg.WarmupDuration))
	}
	return p
}

func (p *pacer) beginMeasure(at int64) {
	p.measureStart.Store(at)
	if p.cfg.Duration > 0 {
		p.measureEnd = at + int64(p.cfg.Duration)
	}
}

// claim returns the next request's sequence number, intended time (ns since
// start; for closed loop the claim time) and whether it is a warm-up request.
// ok is false when the run is over.
func (p *pacer) claim() (seq, intended int64, warm, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return 0, 0, false, false
	}
	c := p.cfg
	if c.OpenLoop() {
		intended = int64(p.next * 1e9)
	} else {
		intended = int64(time.Since(p.start))
	}
	warm = p.seq < int64(c.WarmupRequests) || intended < int64(c.WarmupDuration)
	if !warm {
		if p.measured == 0 && c.WarmupRequests > 0 {
			p.beginMeasure(intended)
		}
		if (c.Requests > 0 && p.measured >= int64(c.Requests)) ||
			(p.measureEnd > 0 && intended >= p.measureEnd) {
			p.stopped = true
			return 0, 0, false, false
		}
		p.measured++
	}
	if c.OpenLoop() {
		if c.Arrival == ArrivalPoisson {
			p.next += p.rng.ExpFloat64() / c.Rate
		} else {
			p.next = float64(p.seq+1) / c.Rate
		}
	}
	seq = p.seq
	p.seq++
	return seq, intended, warm, true
}

// end is the end of the measured phase (ns since start), 0 when the run is not timed or the
// measured phase has not begun.
func (p *pacer) end() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.measureEnd
}

// giveUp stops the run at the end of -duration with the request intended at intended not sent:
// it and those the rate scheduled after it within the window count as unsent.
func (p *pacer) giveUp(intended int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if left := p.measureEnd - intended; left > 0 {
		p.unsent = 1 + uint64(float64(left)/1e9*p.cfg.Rate)
	}
}

func (p *pacer) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// hostClient builds the fasthttp client for cfg: one connection per worker
// at most, no retries (a retried request would hide a failure and skew its
// latency), and the user agent named after this tool.
func hostClient(cfg *Config, u *url.URL) *fasthttp.HostClient {
	addr := u.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), port)
	}
	return &fasthttp.HostClient{
		Addr:                      addr,
		Name:                      "imagegate-loadtest",
		IsTLS:                     u.Scheme == "https",
		TLSConfig:                 cfg.TLS,
		MaxConns:                  cfg.Concurrency,
		MaxConnWaitTimeout:        cfg.Timeout,
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		ReadBufferSize:            16 << 10,
		WriteBufferSize:           64 << 10,
		DisablePathNormalizing:    true,
	}
}

// Run executes one load test described by cfg and returns its result. It
// returns early, with the figures so far, when ctx is cancelled; requests
// in flight then finish or time out first. An error is returned only for an
// invalid configuration.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	newRequester, closeRequesters, err := requesters(&cfg)
	if err != nil {
		return nil, err
	}
	defer closeRequesters()

	cpu0 := readCPU()
	start := time.Now()
	p := newPacer(&cfg, start)
	col := newCollector(&cfg, p)
	l := &load{cfg: &cfg, p: p, start: start, results: make(chan sample, max(1024, 4*cfg.Concurrency)), newRequester: newRequester}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for s := range l.results {
			col.add(s)
		}
	}()
	stopProgress := l.reportProgress(col)
	stopCtx := context.AfterFunc(ctx, p.stop)
	defer stopCtx()

	if cfg.OpenLoop() {
		l.openLoop(ctx)
	} else {
		l.closedLoop()
	}
	close(l.results)
	<-collected
	stopProgress()
	end := time.Now()
	cpu1 := readCPU()

	res := col.result(start, end, cpu1.sub(cpu0))
	if cfg.Progress != nil {
		cfg.Progress(col.progress(end.Sub(start), l.sent.Load(), true))
	}
	return res, nil
}

// requesters returns how each worker gets a requester of the run's protocol (an HTTP
// request/response pair on a fasthttp client whose connections the workers take one each, or
// a share of the gRPC connections), and what closes them after the run.
func requesters(cfg *Config) (newRequester func(i int) requester, closeAll func(), err error) {
	if cfg.Protocol == ProtocolGRPC {
		clients, err := grpcClients(cfg)
		if err != nil {
			return nil, nil, err
		}
		return func(i int) requester { return &grpcWorker{cfg: cfg, client: clients[i%len(clients)]} }, func() {
			for _, c := range clients {
				c.Close()
			}
		}, nil
	}
	u, _ := url.Parse(cfg.URL)
	client := hostClient(cfg, u)
	newRequester = func(int) requester { return newWorker(cfg, client) }
	if cfg.ExpectContinue {
		newRequester = func(int) requester { return newExpectWorker(cfg, u) }
	}
	return newRequester, client.CloseIdleConnections, nil
}

// load is a run's sending side: the workers, each with its requester, and where their samples
// go.
type load struct {
	cfg          *Config
	p            *pacer
	start        time.Time
	results      chan sample
	sent         atomic.Uint64
	newRequester func(i int) requester
}

// reportProgress calls cfg.Progress every ProgressInterval until the returned function is
// called.
func (l *load) reportProgress(col *collector) (stop func()) {
	if l.cfg.Progress == nil {
		return func() {}
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(l.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				l.cfg.Progress(col.progress(time.Since(l.start), l.sent.Load(), false))
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// openLoop sends the requests at their intended times until the pacer stops. One pacer
// goroutine releases each request at its intended time; when every worker is busy it blocks,
// and the request goes out as soon as a worker is free, its latency still counted from the
// intended time.
func (l *load) openLoop(ctx context.Context) {
	jobs := make(chan job)
	go l.pace(ctx, jobs)
	var wg sync.WaitGroup
	for i := range l.cfg.Concurrency {
		wg.Go(func() {
			w := l.newRequester(i)
			defer w.release()
			for j := range jobs {
				l.sent.Add(1)
				l.results <- w.do(l.start, j.seq, j.intended, j.warm)
			}
		})
	}
	wg.Wait()
}

// pace hands jobs out at their intended times, then closes jobs.
func (l *load) pace(ctx context.Context, jobs chan<- job) {
	defer close(jobs)
	lockPacerThread()
	p := l.p
	for {
		seq, intended, warm, ok := p.claim()
		if !ok || !waitUntil(ctx, l.start.Add(time.Duration(intended))) {
			return
		}
		j := job{seq, intended, warm}
		select {
		case jobs <- j:
			continue
		default:
		}
		// Every worker is busy: the request goes out when one is free, but not after the end
		// of -duration. What was never sent by then is counted as unsent (a server slower than
		// the rate would otherwise make the run last as long as it takes to send everything
		// the rate scheduled: minutes instead of seconds).
		var late <-chan time.Time
		var t *time.Timer
		if end := p.end(); end > 0 {
			t = time.NewTimer(time.Until(l.start.Add(time.Duration(end))))
			late = t.C
		}
		sent := true
		select {
		case jobs <- j:
		case <-late:
			p.giveUp(intended)
			sent = false
		case <-ctx.Done():
			sent = false
		}
		if t != nil {
			t.Stop()
		}
		if !sent {
			return
		}
	}
}

// closedLoop has each worker send its next request as soon as the last is answered, until the
// pacer stops.
func (l *load) closedLoop() {
	var wg sync.WaitGroup
	for i := range l.cfg.Concurrency {
		wg.Go(func() {
			w := l.newRequester(i)
			defer w.release()
			for {
				seq, intended, warm, ok := l.p.claim()
				if !ok {
					return
				}
				l.sent.Add(1)
				l.results <- w.do(l.start, seq, intended, warm)
			}
		})
	}
	wg.Wait()
}

// requester sends a worker's requests, one at a time.
type requester interface {
	// do sends request seq and returns its sample.
	do(start time.Time, seq, intended int64, warm bool) sample
	release()
}

// worker sends HTTP requests: it owns one reusable request/response pair.
type worker struct {
	cfg    *Config
	client *fasthttp.HostClient
	req    *fasthttp.Request
	resp   *fasthttp.Response
}

func newWorker(cfg *Config, client *fasthttp.HostClient) *worker {
	w := &worker{cfg: cfg, client: client, req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
	w.req.SetRequestURI(cfg.URL)
	w.req.Header.SetMethod(cfg.Method)
	for _, h := range cfg.Headers {
		if strings.EqualFold(h.Name, "Host") {
			w.req.UseHostHeader = true
			w.req.Header.SetHost(h.Value)
			continue
		}
		w.req.Header.Set(h.Name, h.Value)
	}
	if !cfg.KeepAlive {
		w.req.SetConnectionClose()
	}
	return w
}

func (w *worker) release() {
	fasthttp.ReleaseRequest(w.req)
	fasthttp.ReleaseResponse(w.resp)
}

// waitUntil waits for t, with a Go timer for the bulk (so cancellation is
// noticed) and a precise sleep for the last 2ms. It reports false if ctx
// ended first.
func waitUntil(ctx context.Context, t time.Time) bool {
	const precise = 2 * time.Millisecond
	if d := time.Until(t) - precise; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return false
		}
	}
	// Loop: a signal (the runtime preempts with SIGURG) ends nanosleep early.
	for d := time.Until(t); d > 0; d = time.Until(t) {
		sleepShort(d)
	}
	return ctx.Err() == nil
}

// do sends one request and returns its sample.
func (w *worker) do(start time.Time, seq, intended int64, warm bool) sample {
	var out int64
	if n := len(w.cfg.Bodies); n > 0 {
		b := &w.cfg.Bodies[seq%int64(n)]
		w.req.SetBodyRaw(b.Data)
		for _, h := range b.Headers {
			w.req.Header.Set(h.Name, h.Value)
		}
		out = int64(len(b.Data))
	}
	t0 := time.Now()
	err := w.client.DoTimeout(w.req, w.resp, w.cfg.Timeout)
	t1 := time.Now()
	s := sample{
		sent:     int64(t0.Sub(start)),
		done:     int64(t1.Sub(start)),
		warm:     warm,
		bytesOut: out,
	}
	s.intended = intended
	if !w.cfg.OpenLoop() {
		s.intended = s.sent // closed loop: the request is intended when it is sent
	}
	if err != nil {
		s.kind = classify(err)
		s.err = err
	} else {
		s.status = int32(w.resp.StatusCode())
		s.bytesIn = int64(len(w.resp.Body()))
		s.expired = string(w.resp.Header.Peek(RefusalHeader)) == RefusalExpired
	}
	w.resp.Reset()
	return s
}
