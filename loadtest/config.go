package loadtest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
)

// Arrival is the distribution of intended send times in open-loop mode.
type Arrival string

const (
	// ArrivalConstant spaces requests exactly 1/Rate apart.
	ArrivalConstant Arrival = "constant"
	// ArrivalPoisson draws exponentially distributed gaps with mean 1/Rate.
	ArrivalPoisson Arrival = "poisson"
)

// Header is one request header line.
type Header struct {
	Name  string
	Value string
}

// Body is one request payload. Bodies are shared read-only between workers.
type Body struct {
	Name string // where it came from (file name), for reports
	Data []byte
	// Headers are set on each request that carries this body, after Config.Headers: values
	// that differ from body to body, such as the Inference-Header-Content-Length of an Open
	// Inference Protocol request with binary data.
	Headers []Header
}

// Protocol is how a run's requests travel.
type Protocol string

const (
	// ProtocolHTTP sends each body to URL with Method over HTTP/1.1, one connection per
	// worker; success is a 2xx status.
	ProtocolHTTP Protocol = "http"
	// ProtocolGRPC sends each body, a marshalled ModelInferRequest of the Open Inference
	// Protocol (see PrepareGRPC), with the ModelInfer RPC to URL (grpc://host:port) over
	// GRPCConns HTTP/2 connections that the workers share, many calls in flight on each;
	// success is status OK, and answers are counted by gRPC status code.
	ProtocolGRPC Protocol = "grpc"
)

// Config describes one load run. Zero values mean defaults where noted.
// A Config must not be modified while Run uses it.
type Config struct {
	// Protocol is ProtocolHTTP (the default) or ProtocolGRPC.
	Protocol Protocol
	URL      string
	Method   string // HTTP: default GET, or POST when Bodies is set; gRPC: ModelInfer
	// Headers are HTTP headers, or with gRPC metadata (names lower-cased; Host sets the
	// :authority, Content-Type is left out: gRPC sets its own).
	Headers []Header
	// Bodies are sent in rotation: request i carries Bodies[i % len].
	Bodies []Body
	// Params are Open Inference Protocol request parameters that PrepareV2 and PrepareGRPC
	// put in every request (string, bool, integer or float values): a detector's
	// "detections": true, its "score_threshold", ... Other runs leave it nil.
	Params map[string]any
	// GRPCConns is the number of gRPC connections the workers share, round robin (default
	// 1; at most Concurrency). HTTP runs use one connection per worker and leave it 0.
	GRPCConns int

	// Concurrency is the number of workers: in closed-loop mode the number
	// of requests kept in flight, in open-loop mode the most requests in
	// flight at once. Default 1 closed-loop, 100 open-loop.
	Concurrency int
	// Rate > 0 selects open-loop mode: requests per second.
	Rate float64
	// Arrival is the open-loop arrival process (default constant).
	Arrival Arrival
	// Seed makes Poisson arrivals reproducible (0 picks 1).
	Seed uint64

	// Requests is the number of measured requests; Duration the measured
	// time. At least one must be set; when both are, the first reached ends
	// the run.
	Requests int
	Duration time.Duration
	// WarmupRequests or WarmupDuration requests are sent first and left
	// out of every figure.
	WarmupRequests int
	WarmupDuration time.Duration

	// KeepAlive reuses connections (default false in the zero Config; the
	// CLI defaults to true). A gRPC run always keeps its connections and
	// needs it set.
	KeepAlive bool
	// ExpectContinue sends each HTTP request with "Expect: 100-continue": its body only after
	// the server's "100 Continue", none when the server answers first (a refusal costs the
	// server no upload). Plain http:// only; not with gRPC.
	ExpectContinue bool
	// Timeout bounds each request, dial included (default 30s).
	Timeout time.Duration
	// TLS configures https:// and grpcs:// URLs (the CA to trust, a client certificate);
	// nil: the system's CAs (https://, grpcs://), plain text (grpc://). Setting it makes a
	// gRPC run speak TLS.
	TLS *tls.Config

	// Progress, when set, is called about every ProgressInterval (default
	// 250ms) from one goroutine, and once at the end.
	Progress         func(Progress)
	ProgressInterval time.Duration
}

// OpenLoop reports whether c describes an open-loop (fixed-rate) run.
func (c *Config) OpenLoop() bool { return c.Rate > 0 }

// MaxConcurrency bounds the workers (connections) of one run: each has its goroutine, its
// connection and its buffers (a billion made the generator run out of memory).
const MaxConcurrency = 1 << 20

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("loadtest: invalid config")

func (c *Config) normalize() error {
	switch c.Protocol {
	case "":
		c.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return fmt.Errorf("%w: protocol %q must be %q or %q", ErrConfig, c.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if c.Protocol == ProtocolGRPC {
		if err := c.normalizeGRPC(); err != nil {
			return err
		}
	} else {
		u, err := url.Parse(c.URL)
		if err != nil {
			return fmt.Errorf("%w: cannot parse URL %q: %v", ErrConfig, c.URL, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("%w: URL %q must be http:// or https:// with a host", ErrConfig, c.URL)
		}
		if c.ExpectContinue && u.Scheme != "http" {
			return fmt.Errorf("%w: Expect: 100-continue is sent over http:// only, got %q", ErrConfig, c.URL)
		}
		if c.GRPCConns != 0 {
			return fmt.Errorf("%w: gRPC connections (%d) set for an HTTP run", ErrConfig, c.GRPCConns)
		}
		if c.Method == "" {
			c.Method = "GET"
			if len(c.Bodies) > 0 {
				c.Method = "POST"
			}
		}
		c.Method = strings.ToUpper(c.Method)
	}
	if !(c.Rate >= 0) || math.IsInf(c.Rate, 1) { // also NaN
		return fmt.Errorf("%w: rate %v must be a finite number >= 0", ErrConfig, c.Rate)
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		return fmt.Errorf("%w: concurrency %d must be in [0, %d]", ErrConfig, c.Concurrency, MaxConcurrency)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
		if c.OpenLoop() {
			c.Concurrency = 100
		}
	}
	if c.Protocol == ProtocolGRPC {
		if c.GRPCConns == 0 {
			c.GRPCConns = 1
		}
		if c.GRPCConns < 0 || c.GRPCConns > c.Concurrency {
			return fmt.Errorf("%w: gRPC connections %d must be in [1, %d] (the concurrency)", ErrConfig, c.GRPCConns, c.Concurrency)
		}
	}
	switch c.Arrival {
	case "":
		c.Arrival = ArrivalConstant
	case ArrivalConstant, ArrivalPoisson:
	default:
		return fmt.Errorf("%w: arrival %q must be %q or %q", ErrConfig, c.Arrival, ArrivalConstant, ArrivalPoisson)
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Requests < 0 || c.Duration < 0 || c.WarmupRequests < 0 || c.WarmupDuration < 0 {
		return fmt.Errorf("%w: requests, duration and warmup must be >= 0", ErrConfig)
	}
	if c.Requests == 0 && c.Duration == 0 {
		return fmt.Errorf("%w: set a number of requests or a duration", ErrConfig)
	}
	if c.WarmupRequests > 0 && c.WarmupDuration > 0 {
		return fmt.Errorf("%w: warmup is a number of requests or a duration, not both", ErrConfig)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: timeout %v must be >= 0 (0: 30s)", ErrConfig, c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 250 * time.Millisecond
	}
	return nil
}
