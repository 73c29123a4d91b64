package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/preprocess"
)

// Runner runs one model instance: a session with input rows to fill and a Run over the first
// n of them. The gateway calls each Runner from one batch loop only; it need not be safe for
// concurrent use.
type Runner interface {
	// InputType is "float32" or "uint8".
	InputType() string
	// Input returns row i of a float32 input buffer (RowLen values), to be filled before Run.
	Input(i int) []float32
	// InputUint8 returns row i of a uint8 input buffer.
	InputUint8(i int) []uint8
	// Run runs the first n rows and returns n*Classes scores, valid until the next Run.
	Run(n int) ([]float32, error)
	Classes() int
	RowLen() int
	MaxBatchSize() int
}

// ModelSpec is one model to serve: its configuration, its labels and one Runner per instance.
type ModelSpec struct {
	Config  configs.Model
	Labels  []string
	Runners []Runner
}

// Server is the gateway's HTTP server. Create it with New, run it with Serve, stop it with
// Shutdown. Its methods are safe for concurrent use.
type Server struct {
	cfg      configs.Server
	models   map[string]*model
	defModel *model
	order    []*model
	metrics  *metrics.Set
	decode   chan struct{}
	ready    atomic.Bool
	draining atomic.Bool
	srv      *fasthttp.Server
	log      *slog.Logger
	gone     *goneWatcher

	notFound *requestMetrics
}

// New builds a server and a batcher per model. The server is ready once New returns.
func New(cfg configs.Server, specs []ModelSpec, log *slog.Logger) (*Server, error) {
	if len(specs) == 0 {
		return nil, errors.New("gateway: no model to serve")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		cfg:     cfg,
		models:  make(map[string]*model, len(specs)),
		metrics: metrics.NewSet(),
		decode:  make(chan struct{}, max(cfg.DecodeWorkers, 1)),
		log:     log,
		gone:    newGoneWatcher(5 * time.Millisecond),
	}
	s.notFound = newRequestMetrics(s.metrics, "_unknown")
	for _, spec := range specs {
		m, err := newModel(spec, s.metrics)
		if err != nil {
			s.closeModels(context.Background())
			s.gone.close()
			return nil, err
		}
		s.models[m.name] = m
		s.order = append(s.order, m)
	}
	s.defModel = s.order[0]
	s.metrics.NewGauge("gateway_decode_workers", func() float64 { return float64(cap(s.decode)) })
	s.metrics.NewGauge("gateway_decode_busy", func() float64 { return float64(len(s.decode)) })
	s.metrics.NewGauge("gateway_ready", func() float64 {
		if s.ready.Load() {
			return 1
		}
		return 0
	})
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleParseError,
		Name:               "imagegate",
		MaxRequestBodySize: int(cfg.MaxBodyBytes),
		ReadTimeout:        cfg.ReadTimeout.D(),
		WriteTimeout:       cfg.WriteTimeout.D(),
		IdleTimeout:        cfg.IdleTimeout.D(),
		Concurrency:        cfg.MaxConnections,
		CloseOnShutdown:    true,
		// Multipart bodies are refused (415); fasthttp must not parse them first.
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               readBufferSize,
		// fasthttp's error values must not quote request bytes (they reach no response
		// or log line of ours anyway).
		SecureErrorLogMessage: true,
		Logger:                &httpLogger{log: log},
	}
	s.ready.Store(true)
	return s, nil
}

// Serve accepts connections on ln until Shutdown. It returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(listener{ln})
}

// Shutdown drains the server: it stops accepting connections and reporting ready, waits for
// every accepted request to be answered (their batches run to completion), then stops the
// batchers. It returns ctx.Err() if ctx ends first; requests still queued are then answered
// with an error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	s.draining.Store(true)
	errHTTP := s.srv.ShutdownWithContext(ctx)
	errModels := s.closeModels(ctx)
	s.gone.close()
	return errors.Join(errHTTP, errModels)
}

func (s *Server) closeModels(ctx context.Context) error {
	var errs []error
	for _, m := range s.order {
		if err := m.batcher.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("model %s: %w", m.name, err))
		}
	}
	return errors.Join(errs...)
}

// WriteMetrics writes the server's metrics in Prometheus text format.
func (s *Server) WriteMetrics(w *bytes.Buffer) {
	s.metrics.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
}

var (
	strPOST = []byte("POST")
	strGET  = []byte("GET")
	strHEAD = []byte("HEAD")
)

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	method := ctx.Method()
	isGet := bytes.Equal(method, strGET) || bytes.Equal(method, strHEAD)
	switch {
	case bytes.Equal(path, []byte("/predict/")) || bytes.Equal(path, []byte("/predict")):
		if !bytes.Equal(method, strPOST) {
			s.methodNotAllowed(ctx, "POST")
			return
		}
		s.predict(ctx, s.defModel)
	case bytes.HasPrefix(path, []byte("/models/")):
		rest := path[len("/models/"):]
		name, tail, _ := bytes.Cut(rest, []byte("/"))
		m := s.models[string(name)]
		if m == nil {
			s.notFound.observe(fasthttp.StatusNotFound, 0)
			writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("unknown model %q", truncate(string(name), 100)))
			return
		}
		switch string(tail) {
		case "predict", "predict/":
			if !bytes.Equal(method, strPOST) {
				s.methodNotAllowed(ctx, "POST")
				return
			}
			s.predict(ctx, m)
		case "":
			if !isGet {
				s.methodNotAllowed(ctx, "GET")
				return
			}
			s.modelMetadata(ctx, m)
		default:
			writeError(ctx, fasthttp.StatusNotFound, "not found: "+truncate(string(path), 100))
		}
	case bytes.HasPrefix(path, []byte("/v2")):
		s.handleV2(ctx, path, method)
	case bytes.Equal(path, []byte("/")):
		if !isGet {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		if s.draining.Load() {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			writeJSONRaw(ctx, `{"status":"draining","message":"Go ONNX gateway is shutting down."}`)
			return
		}
		writeJSONRaw(ctx, `{"status":"healthy","message":"Go ONNX gateway is running."}`)
	case bytes.Equal(path, []byte("/metrics")):
		var buf bytes.Buffer
		s.WriteMetrics(&buf)
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		ctx.SetBody(buf.Bytes())
	default:
		writeError(ctx, fasthttp.StatusNotFound, "not found: "+truncate(string(path), 100))
	}
}

// handleParseError answers a request that could not be read or parsed. Its
// answers are ours (JSON, the right status) and never repeat request bytes:
// fasthttp's own page for some of these errors quotes the raw header block,
// credentials included. Nothing of err's text reaches the response or the log.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is larger than server.max_body_bytes (%d bytes)", s.cfg.MaxBodyBytes))
	case errors.As(err, &small):
		if c, ok := ctx.Conn().(*conn); ok && !c.lineDone {
			writeError(ctx, fasthttp.StatusRequestURITooLong,
				fmt.Sprintf("the request line (method, URI, version) is longer than the %d-byte header limit", readBufferSize))
		} else {
			writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge,
				fmt.Sprintf("the request's header block is larger than %d bytes", readBufferSize))
		}
	case errors.As(err, &ne) && ne.Timeout():
		writeError(ctx, fasthttp.StatusRequestTimeout, "timed out reading the request (server.read_timeout)")
	default:
		writeError(ctx, fasthttp.StatusBadRequest, "malformed HTTP request")
	}
}

// readBufferSize bounds a request's header block, request line included.
const readBufferSize = 16 << 10

// httpLogger receives fasthttp's own log lines. Their arguments can quote
// request bytes (the header block of a malformed request, with its
// credentials), so only the constant message is logged, through slog, at
// most once a second.
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

func (s *Server) methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed; use "+allow)
}

// predictOptions are read from the query string and headers.
type predictOptions struct {
	topK     int
	timeout  time.Duration
	priority int
}

func (s *Server) parsePredictOptions(ctx *fasthttp.RequestCtx, m *model) (predictOptions, error) {
	o := predictOptions{timeout: m.defaultTimeout}
	args := ctx.QueryArgs()
	if v := args.Peek("top_k"); v != nil {
		k, err := strconv.Atoi(string(v))
		if err != nil || k < 0 {
			return o, bodyErr("top_k must be a non-negative integer, got %q", truncate(string(v), 20))
		}
		o.topK = min(k, len(m.labels))
	}
	tv := ctx.Request.Header.Peek("X-Request-Timeout")
	if tv == nil {
		tv = args.Peek("timeout")
	}
	if tv != nil {
		ms, err := strconv.ParseFloat(string(tv), 64)
		if err != nil || !(ms > 0 && ms <= 1e9) { // also refuses NaN
			return o, bodyErr("timeout must be a positive number of milliseconds, got %q", truncate(string(tv), 20))
		}
		if d := time.Duration(ms * float64(time.Millisecond)); d < o.timeout {
			o.timeout = d
		}
	}
	pv := ctx.Request.Header.Peek("X-Request-Priority")
	if pv == nil {
		pv = args.Peek("priority")
	}
	if pv != nil {
		p, err := strconv.Atoi(string(pv))
		if err != nil || p < 0 {
			return o, bodyErr("priority must be a non-negative integer, got %q", truncate(string(pv), 20))
		}
		o.priority = p
	}
	return o, nil
}

// imageBytes returns the encoded image of a predict request: the body itself for image or
// octet-stream bodies, the decoded "image" field for JSON bodies. The result aliases j's
// buffers or the request body; it is valid until the handler returns.
func imageBytes(ctx *fasthttp.RequestCtx, j *job) ([]byte, error) {
	ct := ctx.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	body := ctx.Request.Body()
	switch {
	case len(ct) == 0 && len(body) > 0 && (body[0] == '{' || body[0] == ' ' || body[0] == '\n'),
		bytes.EqualFold(ct, []byte("application/json")):
		img, scratch, err := DecodeJSONImage(body, j.img, j.scratch)
		j.scratch = scratch
		if err != nil {
			return nil, err
		}
		j.img = img
		return img, nil
	case bytes.HasPrefix(ct, []byte("image/")), bytes.EqualFold(ct, []byte("application/octet-stream")), len(ct) == 0:
		if len(body) == 0 {
			return nil, bodyErr("the request body is empty")
		}
		return body, nil
	default:
		return nil, fmt.Errorf("%w: Content-Type %q is not supported; send application/json "+
			"{\"image\": \"<base64>\"}, image/jpeg, image/png, image/webp or application/octet-stream",
			errUnsupportedMedia, truncate(string(ct), 60))
	}
}

var errUnsupportedMedia = errors.New("gateway: unsupported media type")

func (s *Server) predict(ctx *fasthttp.RequestCtx, m *model) {
	start := time.Now()
	status, err := s.runPredict(ctx, m, start)
	if err != nil {
		status = s.writeFailure(ctx, err)
	}
	m.req.observe(status, time.Since(start))
}

func (s *Server) runPredict(ctx *fasthttp.RequestCtx, m *model, start time.Time) (int, error) {
	opts, err := s.parsePredictOptions(ctx, m)
	if err != nil {
		return 0, err
	}
	j := m.getJob()
	defer m.putJob(j)
	img, err := imageBytes(ctx, j)
	if err != nil {
		return 0, err
	}
	// fasthttp's RequestCtx is not a per-request context (its Done fires only at server
	// shutdown), so the request's context is built here: its deadline, and a cancellation
	// when the client closes its connection while the request waits.
	rctx, cancel := context.WithDeadline(context.Background(), start.Add(opts.timeout))
	defer cancel()
	release := s.gone.watch(ctx.Conn(), cancel)
	defer release()
	if err := s.preprocess(rctx, m, img, j); err != nil {
		return 0, err
	}
	if _, err = m.batcher.Submit(rctx, j, batcher.SubmitOptions{Priority: opts.priority}); err != nil {
		return 0, err
	}
	j.buf = appendPrediction(j.buf[:0], m, j.scores, opts.topK)
	ctx.SetContentType("application/json")
	ctx.SetBody(j.buf)
	return fasthttp.StatusOK, nil
}

// preprocess decodes img into j's slot on the decode pool. It gives up without decoding when
// ctx ends while it waits for a decode worker, and refuses at once (queue full) when the
// model's queue is full, so that CPU is not spent on requests that cannot be queued.
func (s *Server) preprocess(ctx context.Context, m *model, img []byte, j *job) error {
	if m.batcher.QueueLen() >= m.batcher.QueueCap() {
		return batcher.ErrQueueFull
	}
	select {
	case s.decode <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		<-s.decode
		return err
	}
	t := time.Now()
	var err error
	if m.uint8Input {
		err = m.pre.ProcessUint8(img, j.slotU8)
	} else {
		err = m.pre.Process(img, j.slot)
	}
	m.preprocessDur.UpdateDuration(t)
	<-s.decode
	return err
}

// statusOf maps an error to its HTTP status and failure reason; it is the one place that does.
func (s *Server) statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, errBody):
		return fasthttp.StatusBadRequest, reasonBadInput
	case errors.Is(err, errUnsupportedMedia), errors.Is(err, preprocess.ErrUnsupportedFormat):
		return fasthttp.StatusUnsupportedMediaType, reasonBadInput
	case errors.Is(err, preprocess.ErrTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, reasonBadInput
	case errors.Is(err, preprocess.ErrBadImage):
		return fasthttp.StatusBadRequest, reasonBadInput
	case errors.Is(err, batcher.ErrQueueFull):
		return s.cfg.QueueFullStatus, reasonRejected
	case errors.Is(err, batcher.ErrWouldMissDeadline), errors.Is(err, batcher.ErrClosed):
		return fasthttp.StatusServiceUnavailable, reasonRejected
	case errors.Is(err, context.DeadlineExceeded):
		return fasthttp.StatusGatewayTimeout, reasonTimeout
	case errors.Is(err, context.Canceled):
		return statusClientClosed, reasonCancelled
	}
	return fasthttp.StatusInternalServerError, reasonInternal
}

// statusClientClosed is nginx's 499: the client went away before the answer.
// It is a metrics label only; no response is written for such a request.
const statusClientClosed = 499

func (s *Server) writeFailure(ctx *fasthttp.RequestCtx, err error) int {
	status, reason := s.statusOf(err)
	msg := err.Error()
	switch reason {
	case reasonCancelled:
		// The client closed its connection (or its sending side) while the request
		// waited: it is dropped unanswered, the connection closed without a response.
		// 499 (nginx's "client closed request") is only the metrics' name for this.
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(net.Conn) {})
		return status
	case reasonRejected:
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.D().Round(time.Second)/time.Second))))
	case reasonInternal:
		s.log.Error("predict failed", "err", err)
		msg = "internal error: " + msg
	case reasonTimeout:
		msg = "the request's deadline passed before it could be answered (timeout or batching.default_timeout)"
	}
	writeError(ctx, status, msg)
	return status
}

func writeJSONRaw(ctx *fasthttp.RequestCtx, body string) {
	ctx.SetContentType("application/json")
	ctx.SetBodyString(body)
}

func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	b := []byte(`{"error":`)
	b = appendJSONString(b, strings.ToValidUTF8(msg, "\uFFFD"))
	b = append(b, '}')
	ctx.SetBody(b)
}

// job is one request's pooled scratch: the decoded image, the preprocessed input row, the
// scores and the response buffer.
type job struct {
	img     []byte
	scratch []byte
	slot    []float32 // float32 models
	slotU8  []uint8   // uint8 models
	scores  []float32
	buf     []byte
}

const maxPooledBytes = 4 << 20
