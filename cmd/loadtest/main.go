package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/imagegate/imagegate/loadtest"
)

const usage = `loadtest sends HTTP or gRPC load to one server and reports throughput and latency.

Usage:
  loadtest [flags] URL
  loadtest sweep [flags] URL     (run once per -c or -rates value; see loadtest sweep -h)

Modes:
  closed loop (default): -c workers each send a request as soon as their
      previous one finished; latency counts from the send time.
  open loop (-rate R): requests are scheduled R times a second (-arrival
      constant or poisson) whatever the server does; -c bounds the requests
      in flight, and a request that waits for a free worker still counts its
      latency from its scheduled time (no coordinated omission).

Examples:
  # the article's benchmark, like ab -n 40000 -c 50 -p rime_5868.json -T application/json
  loadtest -n 40000 -c 50 -body ../shared/seed/rime_5868.json http://127.0.0.1:8080/predict/
  # 200 req/s for 30 s, Poisson arrivals, two images in rotation, reports
  loadtest -rate 200 -arrival poisson -duration 30s -warmup 2s \
      -json-image a.jpg,b.png -o report.json -html report.html http://127.0.0.1:8080/predict/
  # raw JPEG body
  loadtest -c 8 -duration 10s -body photo.jpg -H 'Content-Type: image/jpeg' http://127.0.0.1:8080/v1/classify
  # the Open Inference Protocol: the same image as a v2 inference request, binary tensor data
  loadtest -protocol v2 -binary -model mobilenet_v3_small -n 2000 -c 50 -body rime_5868.json http://127.0.0.1:8080
  # the same image over gRPC (ModelInfer), 50 calls in flight on one connection
  loadtest -protocol grpc -model mobilenet_v3_small -n 2000 -c 50 -body rime_5868.json 127.0.0.1:8001
  # a detector's post-processed detections over gRPC (request parameters)
  loadtest -protocol grpc -model faces -param detections=true -param score_threshold=0.9 -n 500 -c 8 -body photo.jpg 127.0.0.1:8001
  # throughput-vs-latency table with the server's mean batch size per step
  loadtest sweep -c 1,8,50 -duration 10s -body rime_5868.json -metrics http://127.0.0.1:8080/metrics \
      http://127.0.0.1:8080/predict/

Open Inference Protocol (-protocol v2):
  The images (-json-image files, or -body: an image file or the article's
  {"image": "<base64>"} JSON body) are turned once, before the run, into v2
  inference requests of one BYTES input each: base64 in JSON, or with -binary
  binary tensor data (Inference-Header-Content-Length) with the scores asked
  for as binary too. The URL is the server's base URL (http://host:port, or
  with a path prefix), to which /v2/models/MODEL/infer is added, or a model's
  inference URL (.../v2/models/MODEL[/versions/V]/infer), used as it is. The
  model's metadata is read first: it must take one BYTES input. -param KEY=VALUE
  (repeatable; here and with gRPC) adds a request parameter to every request: a
  number, true or false, or else text (a detector's detections=true, its
  score_threshold=0.5, iou_threshold, max_detections).

Open Inference Protocol over gRPC (-protocol grpc):
  The same images, each as the one element of the model's BYTES input in a
  ModelInferRequest (raw_input_contents, a 4-byte length before the image, as
  Triton's tritonclient.grpc sends it), marshalled once before the run and sent
  with the ModelInfer RPC of the inference.GRPCInferenceService. The URL is the
  server.s gRPC address, host:port or grpc://host:port (plaintext HTTP/2), or
  grpcs://host:port (TLS; -cacert, -cert and -key apply); -model
  names the model, whose metadata is read first over gRPC. The -c workers share
  -grpc-conns connections (default 1), many calls in flight on each; -timeout is
  each call's deadline, which the server sees. Answers are counted by gRPC status
  code (OK, RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED, ...); -H sets
  metadata.

Flags:
`

const sweepUsage = `loadtest sweep runs one load test per step and prints a throughput-vs-latency
table (and JSON/HTML with -o/-html).

Usage:
  loadtest sweep -c 1,8,50 [flags] URL           closed loop, one step per concurrency
  loadtest sweep -rates 50,100,200 [-c 100] URL  open loop, one step per rate (-c = max in flight)

Each step lasts -duration (or -n requests) after -warmup. With -metrics URL the
Prometheus endpoint is scraped before and after every step and the mean batch
size is reported from -batch-items-metric / -batch-count-metric (summed over
label sets), or else from the histogram -batch-histogram's _sum / _count.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the flags shared by both commands.
type options struct {
	conc       string
	n          int
	duration   time.Duration
	rate       float64
	arrival    string
	seed       uint64
	warmup     string
	keepalive  bool
	expect     bool
	timeout    time.Duration
	jsonImages string
	body       string
	protocol   string
	binary     bool
	model      string
	grpcConns  int
	caCert     string
	cert       string
	key        string
	insecure   bool
	method     string
	headers    headerFlag
	params     paramFlag
	out        string
	htmlOut    string
	quiet      bool
	// sweep only
	rates       string
	metrics     string
	batchCount  string
	batchItems  string
	batchHistog string
}

type headerFlag []loadtest.Header

func (h *headerFlag) String() string { return fmt.Sprint(*h) }
func (h *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("header %q must look like 'Name: value'", v)
	}
	*h = append(*h, loadtest.Header{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)})
	return nil
}

// paramFlag collects -param KEY=VALUE request parameters: an integer, a number, true or
// false, else the text as written.
type paramFlag map[string]any

func (p *paramFlag) String() string { return fmt.Sprint(map[string]any(*p)) }
func (p *paramFlag) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(key) == "" {
		return fmt.Errorf("parameter %q must look like KEY=VALUE", v)
	}
	if *p == nil {
		*p = paramFlag{}
	}
	key = strings.TrimSpace(key)
	if _, dup := (*p)[key]; dup {
		return fmt.Errorf("parameter %q is set twice", key)
	}
	if i, err := strconv.ParseInt(value, 10, 64); err == nil {
		(*p)[key] = i
	} else if f, err := strconv.ParseFloat(value, 64); err == nil {
		(*p)[key] = f
	} else if b, err := strconv.ParseBool(value); err == nil && (value == "true" || value == "false") {
		(*p)[key] = b
	} else {
		(*p)[key] = value
	}
	return nil
}

func (o *options) register(fs *flag.FlagSet, sweep bool) {
	if sweep {
		fs.StringVar(&o.conc, "c", "", "comma-separated concurrencies, one step each (closed loop); with -rates, the one max in-flight count (default 100)")
		fs.StringVar(&o.rates, "rates", "", "comma-separated open-loop rates in req/s, one step each")
		fs.StringVar(&o.metrics, "metrics", "", "Prometheus text endpoint scraped before and after each step")
		fs.StringVar(&o.batchCount, "batch-count-metric", "gateway_batches_total", "counter of batches run (summed over labels)")
		fs.StringVar(&o.batchItems, "batch-items-metric", "gateway_batch_items_total", "counter of items batched (summed over labels)")
		fs.StringVar(&o.batchHistog, "batch-histogram", "gateway_batch_size", "histogram of batch sizes whose _sum/_count are used when the counters are absent")
		fs.DurationVar(&o.duration, "duration", 0, "measured duration of each step (default 10s unless -n is set)")
		fs.IntVar(&o.n, "n", 0, "measured requests per step")
	} else {
		fs.StringVar(&o.conc, "c", "", "workers: requests in flight (closed loop, default 1) or the most in flight (open loop, default 100)")
		fs.Float64Var(&o.rate, "rate", 0, "open loop: requests per second (0 = closed loop)")
		fs.DurationVar(&o.duration, "duration", 0, "measured duration (e.g. 10s)")
		fs.IntVar(&o.n, "n", 0, "measured requests (default 200 unless -duration is set)")
	}
	fs.StringVar(&o.arrival, "arrival", "constant", "open-loop arrivals: constant or poisson")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed for poisson arrivals")
	fs.StringVar(&o.warmup, "warmup", "", "warm-up left out of all figures: a request count (100) or a duration (2s)")
	fs.BoolVar(&o.keepalive, "keepalive", true, "reuse connections (-keepalive=false opens one per request)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "per-request timeout, connecting included")
	fs.BoolVar(&o.expect, "expect-continue", false, "HTTP: send 'Expect: 100-continue' and each body only after the server's 100 Continue (a refusal then costs no upload)")
	fs.StringVar(&o.jsonImages, "json-image", "", `image file(s), comma-separated, sent as {"image": "<base64>"} in rotation`)
	fs.StringVar(&o.body, "body", "", "raw request body file (Content-Type guessed from its extension unless -H sets it)")
	fs.StringVar(&o.protocol, "protocol", "article", "article: send the bodies as they are; v2: send their images as Open Inference Protocol requests over HTTP; grpc: the same over gRPC (see above)")
	fs.BoolVar(&o.binary, "binary", false, "with -protocol v2: binary tensor data instead of JSON, both ways")
	fs.StringVar(&o.model, "model", "", "with -protocol v2 or grpc: the model to call (v2: unless the URL is its inference URL)")
	fs.IntVar(&o.grpcConns, "grpc-conns", 1, "with -protocol grpc: connections the workers share")
	fs.StringVar(&o.caCert, "cacert", "", "https:// and grpcs://: trust the CAs of this PEM file (default: the system's); with -protocol grpc, TLS")
	fs.StringVar(&o.cert, "cert", "", "a client certificate (PEM) for servers that require one (mutual TLS; with -key)")
	fs.StringVar(&o.key, "key", "", "the PEM key of -cert")
	fs.BoolVar(&o.insecure, "insecure", false, "https:// and grpcs://: do not verify the server's certificate")
	fs.StringVar(&o.method, "m", "", "HTTP method (default GET, or POST with a body)")
	fs.Var(&o.headers, "H", "request header 'Name: value' (repeatable)")
	fs.Var(&o.params, "param", "with -protocol v2 or grpc: request parameter KEY=VALUE (repeatable), e.g. a detector's detections=true")
	fs.StringVar(&o.out, "o", "", "write the JSON report to this file")
	fs.StringVar(&o.htmlOut, "html", "", "write the standalone HTML report to this file")
	fs.BoolVar(&o.quiet, "q", false, "no progress bar")
}

// tlsConfig is the TLS the flags ask for (nil: none asked).
func (o *options) tlsConfig() (*tls.Config, error) {
	if o.caCert == "" && o.cert == "" && o.key == "" && !o.insecure {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: o.insecure}
	if o.caCert != "" {
		pem, err := os.ReadFile(o.caCert)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert %s holds no PEM certificate", o.caCert)
		}
	}
	if (o.cert == "") != (o.key == "") {
		return nil, errors.New("-cert and -key go together")
	}
	if o.cert != "" {
		pair, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return nil, fmt.Errorf("-cert, -key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// config builds the library configuration shared by both commands (with -protocol v2 it asks
// the server for the model's metadata).
func (o *options) config(ctx context.Context, url string) (loadtest.Config, error) {
	cfg := loadtest.Config{
		URL: url, Method: o.method, Headers: o.headers, Rate: o.rate,
		Arrival: loadtest.Arrival(o.arrival), Seed: o.seed, Requests: o.n, Duration: o.duration,
		KeepAlive: o.keepalive, Timeout: o.timeout, ExpectContinue: o.expect,
	}
	var err error
	if cfg.TLS, err = o.tlsConfig(); err != nil {
		return cfg, err
	}
	if o.warmup != "" {
		if n, err := strconv.Atoi(o.warmup); err == nil {
			cfg.WarmupRequests = n
		} else if d, err := time.ParseDuration(o.warmup); err == nil {
			cfg.WarmupDuration = d
		} else {
			return cfg, fmt.Errorf("-warmup %q is neither a request count nor a duration", o.warmup)
		}
	}
	if o.jsonImages != "" && o.body != "" {
		return cfg, errors.New("-json-image and -body cannot be combined")
	}
	if o.grpcConns != 1 && o.protocol != "grpc" {
		return cfg, errors.New("-grpc-conns goes with -protocol grpc")
	}
	if len(o.params) > 0 && o.protocol != "v2" && o.protocol != "grpc" {
		return cfg, errors.New("-param goes with -protocol v2 or grpc (the article's API takes query parameters in the URL)")
	}
	cfg.Params = o.params
	switch o.protocol {
	case "v2":
		return cfg, o.v2Config(ctx, &cfg)
	case "grpc":
		if o.binary {
			return cfg, errors.New("-binary goes with -protocol v2 (gRPC always sends the images' raw bytes)")
		}
		cfg.GRPCConns = o.grpcConns
		return cfg, o.grpcConfig(ctx, &cfg)
	case "article":
	default:
		return cfg, fmt.Errorf("-protocol %q: want article, v2 or grpc", o.protocol)
	}
	if o.binary || o.model != "" {
		return cfg, errors.New("-binary and -model go with -protocol v2")
	}
	contentType := ""
	switch {
	case o.jsonImages != "":
		bodies, err := loadtest.LoadJSONImageBodies(strings.Split(o.jsonImages, ","))
		if err != nil {
			return cfg, err
		}
		cfg.Bodies, contentType = bodies, "application/json"
	case o.body != "":
		b, err := loadtest.LoadBody(o.body)
		if err != nil {
			return cfg, err
		}
		cfg.Bodies, contentType = []loadtest.Body{b}, loadtest.ContentTypeFor(o.body)
	}
	if contentType != "" && !hasHeader(cfg.Headers, "Content-Type") {
		cfg.Headers = append(cfg.Headers, loadtest.Header{Name: "Content-Type", Value: contentType})
	}
	return cfg, nil
}

// v2Config loads the images as they are and turns them into Open Inference Protocol requests.
func (o *options) v2Config(ctx context.Context, cfg *loadtest.Config) error {
	if err := o.loadImages(cfg); err != nil {
		return err
	}
	return loadtest.PrepareV2(ctx, cfg, o.model, o.binary)
}

// grpcConfig loads the images as they are and turns them into marshalled gRPC inference
// requests.
func (o *options) grpcConfig(ctx context.Context, cfg *loadtest.Config) error {
	if err := o.loadImages(cfg); err != nil {
		return err
	}
	return loadtest.PrepareGRPC(ctx, cfg, o.model)
}

// loadImages reads the -json-image or -body files as they are into cfg.Bodies.
func (o *options) loadImages(cfg *loadtest.Config) error {
	var files []string
	switch {
	case o.jsonImages != "":
		files = strings.Split(o.jsonImages, ",")
	case o.body != "":
		files = []string{o.body}
	}
	for _, f := range files {
		b, err := loadtest.LoadBody(f)
		if err != nil {
			return err
		}
		cfg.Bodies = append(cfg.Bodies, b)
	}
	return nil
}

func hasHeader(hs []loadtest.Header, name string) bool {
	for _, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return true
		}
	}
	return false
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "sweep" {
		return runSweep(ctx, args[1:], stdout, stderr)
	}
	var o options
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	o.register(fs, false)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	cfg, err := o.config(ctx, fs.Arg(0))
	if err == nil && o.conc != "" {
		cfg.Concurrency, err = strconv.Atoi(o.conc)
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Requests = 200
	}
	var bar *progressBar
	if !o.quiet && isTerminal(os.Stderr) {
		bar = &progressBar{w: stderr}
		cfg.Progress = bar.update
	}
	res, err := loadtest.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "loadtest: interrupted; figures cover the requests sent so far")
	}
	if err := res.WriteText(stdout); err != nil {
		return 1
	}
	code := writeReports(o.out, o.htmlOut, res.WriteJSON, res.WriteHTML, stderr)
	if s := res.Summary; code == 0 && s.Completed+s.Errors > 0 && s.OK2xx == 0 {
		// A run against a dead or broken target is not a success for a script or CI job.
		what := "no 2xx answer"
		if cfg.Protocol == loadtest.ProtocolGRPC {
			what = "no answer with status OK"
		}
		fmt.Fprintf(stderr, "loadtest: no request succeeded (%s)\n", what)
		return 3
	}
	return code
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("loadtest sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, sweepUsage); fs.PrintDefaults() }
	o.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	cfg, err := o.config(ctx, fs.Arg(0))
	sc := loadtest.SweepConfig{
		MetricsURL: o.metrics,
		Batch:      loadtest.BatchMetrics{CountMetric: o.batchCount, ItemsMetric: o.batchItems, Histogram: o.batchHistog},
	}
	if err == nil {
		sc.Concurrencies, sc.Rates, err = parseSteps(o.conc, o.rates, &cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest sweep:", err)
		return 2
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	sc.Base = cfg
	fmt.Fprintln(stdout, loadtest.SweepHeader())
	sc.OnStep = func(s loadtest.SweepStep) { fmt.Fprintln(stdout, s.Row()) }
	res, err := loadtest.Sweep(ctx, sc)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest sweep:", err)
		return 2
	}
	for _, s := range res.Steps {
		if s.MetricsError != "" {
			fmt.Fprintf(stderr, "loadtest sweep: step c=%d rate=%g: %s\n", s.Concurrency, s.Rate, s.MetricsError)
		}
	}
	return writeReports(o.out, o.htmlOut, res.WriteJSON, res.WriteHTML, stderr)
}

// parseSteps reads -c and -rates for a sweep.
func parseSteps(conc, rates string, cfg *loadtest.Config) ([]int, []float64, error) {
	switch {
	case rates != "":
		var rs []float64
		for _, f := range strings.Split(rates, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || r <= 0 {
				return nil, nil, fmt.Errorf("-rates: %q is not a positive number", f)
			}
			rs = append(rs, r)
		}
		if conc != "" {
			c, err := strconv.Atoi(conc)
			if err != nil {
				return nil, nil, fmt.Errorf("with -rates, -c is one max in-flight count, not %q", conc)
			}
			cfg.Concurrency = c
		}
		return nil, rs, nil
	case conc != "":
		var cs []int
		for _, f := range strings.Split(conc, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || c <= 0 {
				return nil, nil, fmt.Errorf("-c: %q is not a positive integer", f)
			}
			cs = append(cs, c)
		}
		return cs, nil, nil
	default:
		return nil, nil, errors.New("set -c 1,8,50 (concurrency sweep) or -rates 50,100 (rate sweep)")
	}
}

func writeReports(jsonPath, htmlPath string, writeJSON, writeHTML func(io.Writer) error, stderr io.Writer) int {
	code := 0
	for _, f := range []struct {
		path  string
		write func(io.Writer) error
	}{{jsonPath, writeJSON}, {htmlPath, writeHTML}} {
		if f.path == "" {
			continue
		}
		if err := writeFile(f.path, f.write); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			code = 1
		}
	}
	return code
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot write report: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("cannot write report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot write report %s: %w", path, err)
	}
	return nil
}
