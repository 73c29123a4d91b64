package loadtest

import (
	"encoding/json"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// Result is the outcome of one run. It is self-contained (it can be written
// as JSON, read back, and rendered) and not modified after Run returns.
type Result struct {
	Tool      string       `json:"tool"`
	Version   int          `json:"version"`
	Config    ReportConfig `json:"config"`
	StartTime time.Time    `json:"start_time"`
	Summary   Summary      `json:"results"`
	// Timeline has one entry per second of the measured phase.
	Timeline []Second `json:"timeline"`
	// Percentiles is the latency percentile curve (from the intended send
	// time), dense in the tail, for plotting.
	Percentiles []PercentilePoint `json:"latency_percentiles"`
	// Histogram holds the non-empty latency buckets.
	Histogram []HistBucket `json:"latency_histogram"`

	latency    *Histogram
	earlySends uint64 // requests sent before their intended time (a bug if > 0)
}

// Latency returns the latency histogram (nanoseconds, from the intended
// send time) of the measured requests; nil for a Result read from JSON.
// The caller must not modify it.
func (r *Result) Latency() *Histogram { return r.latency }

// ReportConfig is the configuration as recorded in a report.
type ReportConfig struct {
	// Protocol is "grpc" for a gRPC run; empty for HTTP.
	Protocol       string     `json:"protocol,omitempty"`
	URL            string     `json:"url"`
	Method         string     `json:"method"`
	Headers        []Header   `json:"headers,omitempty"`
	Bodies         []BodyInfo `json:"bodies,omitempty"`
	Mode           string     `json:"mode"` // "closed" or "open"
	Concurrency    int        `json:"concurrency"`
	Rate           float64    `json:"rate,omitempty"`
	Arrival        Arrival    `json:"arrival,omitempty"`
	Requests       int        `json:"requests,omitempty"`
	DurationS      float64    `json:"duration_s,omitempty"`
	WarmupRequests int        `json:"warmup_requests,omitempty"`
	WarmupS        float64    `json:"warmup_s,omitempty"`
	KeepAlive      bool       `json:"keepalive"`
	TimeoutS       float64    `json:"timeout_s"`
}

// BodyInfo names one payload and its size.
type BodyInfo struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
}

// Summary holds the figures of the measured phase (warm-up excluded).
type Summary struct {
	Sent      uint64 `json:"sent"`
	Completed uint64 `json:"completed"`
	// OK2xx counts the successes: 2xx answers over HTTP, status OK over gRPC.
	OK2xx uint64 `json:"ok_2xx"`
	// Errors counts requests that did not succeed.
	Errors uint64 `json:"errors"`
	// ErrorKinds splits Errors: over HTTP "timeout", "connect", "closed", "other", and
	// "status_4xx"/"status_5xx"/... for non-2xx answers; over gRPC the status code's name
	// (RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED, ...), a failure to connect or a
	// timeout included (UNAVAILABLE, DEADLINE_EXCEEDED).
	ErrorKinds map[string]uint64 `json:"error_kinds"`
	// StatusCodes counts every answer by exact HTTP status code, or by gRPC code name.
	StatusCodes map[string]uint64 `json:"status_codes"`
	// ErrorSamples holds the first error message of each transport kind (HTTP) or of each
	// gRPC code but OK.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Warmup       uint64            `json:"warmup_requests"`

	// DurationS is the measured window: from the start of the measured
	// phase to the last completion.
	DurationS float64 `json:"duration_s"`
	// TargetRate is the configured open-loop rate (0 in closed loop).
	TargetRate float64 `json:"target_rate,omitempty"`
	// SentRate is requests sent per second over the sending window: the measured phase up to
	// the last send, or -duration when it is longer.
	SentRate float64 `json:"sent_rate"`
	// Unsent counts the requests an open loop scheduled within -duration but never sent: every
	// worker was busy until the window ended.
	Unsent uint64 `json:"unsent,omitempty"`
	// CompletedRate is requests completed (any outcome) per second.
	CompletedRate float64 `json:"completed_rate"`
	// Throughput is successful (2xx) requests per second.
	Throughput float64 `json:"throughput"`

	// Latency counts from the intended send time (open loop) or the send
	// time (closed loop) to the end of the response, for every completed
	// request whatever its outcome.
	Latency LatencyStats `json:"latency_ms"`
	// ServiceTime counts from the actual send time; in open loop the gap
	// to Latency is the time requests waited for a free worker.
	ServiceTime LatencyStats `json:"service_time_ms"`
	// SendDelay counts from the intended to the actual send time (open
	// loop): the pacer's own lag plus any wait for a free worker.
	SendDelay LatencyStats `json:"send_delay_ms"`
	// SuccessLatency is Latency of the successes only; RefusalLatency of
	// the refusals (429 and 503 over HTTP, RESOURCE_EXHAUSTED and UNAVAILABLE
	// over gRPC, which a server under overload should give at once rather
	// than after a long wait) but those the server marked as given after the
	// request waited in its line (RefusalHeader: expired), whose latency is
	// ExpiredLatency. Refused counts both; Expired the marked ones.
	SuccessLatency LatencyStats `json:"success_latency_ms"`
	RefusalLatency LatencyStats `json:"refusal_latency_ms"`
	ExpiredLatency LatencyStats `json:"expired_latency_ms"`
	Refused        uint64       `json:"refused"`
	Expired        uint64       `json:"expired,omitempty"`

	BytesIn  int64    `json:"bytes_in"`
	BytesOut int64    `json:"bytes_out"`
	CPU      CPUUsage `json:"cpu"`
}

// LatencyStats are latency figures in milliseconds.
type LatencyStats struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

// CPUUsage is this process's CPU time over the whole run (warm-up
// included), and its share of one core.
type CPUUsage struct {
	UserS   float64 `json:"user_s"`
	SysS    float64 `json:"sys_s"`
	WallS   float64 `json:"wall_s"`
	Percent float64 `json:"percent_of_one_core"`
}

// Second is one second of the measured phase. Sent, Completed, OK and
// Errors count by the second the event happened in; the latency figures
// cover the requests whose intended send time fell in that second, so a
// server stall shows up where the delayed requests were scheduled.
type Second struct {
	T         int     `json:"t"`
	Sent      uint64  `json:"sent"`
	Completed uint64  `json:"completed"`
	OK        uint64  `json:"ok"`
	Errors    uint64  `json:"errors"`
	Scheduled uint64  `json:"scheduled"`
	P50Ms     float64 `json:"p50_ms"`
	P90Ms     float64 `json:"p90_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// PercentilePoint is one point of the latency percentile curve.
type PercentilePoint struct {
	Percentile float64 `json:"percentile"`
	Ms         float64 `json:"ms"`
}

// HistBucket is one non-empty latency bucket [LowMs, HighMs).
type HistBucket struct {
	LowMs  float64 `json:"low_ms"`
	HighMs float64 `json:"high_ms"`
	Count  uint64  `json:"count"`
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadResultJSON reads a Result written by WriteJSON.
func ReadResultJSON(rd io.Reader) (*Result, error) {
	var r Result
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func latencyStats(h *Histogram) LatencyStats {
	if h.Count() == 0 {
		return LatencyStats{}
	}
	return LatencyStats{
		Min:  ms(h.Min()),
		Mean: h.Mean() / 1e6,
		P50:  ms(h.Quantile(0.50)),
		P90:  ms(h.Quantile(0.90)),
		P99:  ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)),
		Max:  ms(h.Max()),
	}
}

// percentileCurve samples h at percentiles spaced evenly in "nines"
// (0, 50, 68, 90, ..., 99.999, 100) for plotting.
func percentileCurve(h *Histogram) []PercentilePoint {
	if h.Count() == 0 {
		return nil
	}
	var pts []PercentilePoint
	maxNines := math.Max(1, math.Log10(float64(h.Count())))
	for x := 0.0; x < maxNines-1e-9; x += 0.125 {
		q := 1 - math.Pow(10, -x)
		pts = append(pts, PercentilePoint{Percentile: q * 100, Ms: ms(h.Quantile(q))})
	}
	pts = append(pts, PercentilePoint{Percentile: 100, Ms: ms(h.Max())})
	return pts
}

type secondStats struct {
	sent, completed, ok, errs uint64
	lat                       *Histogram
}

// collector folds samples into figures. add runs on one goroutine; the
// atomic counters are read by the progress reporter.
type collector struct {
	cfg  *Config
	p    *pacer
	grpc bool // status holds gRPC codes

	lat, svc, delay *Histogram
	okLat, refLat   *Histogram
	expLat          *Histogram // refusals marked expired
	seconds         []*secondStats
	early           uint64

	warm, sent, completed, ok, errs uint64
	kinds                           [numKinds]uint64
	codes                           map[int]uint64
	errSamples                      map[string]string
	firstSend, lastSend, lastDone   int64
	bytesIn, bytesOut               int64

	allDone, allOK, allErr atomic.Uint64
}

func newCollector(cfg *Config, p *pacer) *collector {
	return &collector{
		cfg: cfg, p: p, grpc: cfg.Protocol == ProtocolGRPC,
		lat: NewHistogram(), svc: NewHistogram(), delay: NewHistogram(),
		okLat: NewHistogram(), refLat: NewHistogram(), expLat: NewHistogram(),
		codes:      map[int]uint64{},
		errSamples: map[string]string{},
		firstSend:  math.MaxInt64,
	}
}

func (c *collector) second(t int64) *secondStats {
	i := int(max(t, 0) / int64(time.Second))
	for len(c.seconds) <= i {
		c.seconds = append(c.seconds, nil)
	}
	if c.seconds[i] == nil {
		c.seconds[i] = &secondStats{}
	}
	return c.seconds[i]
}

func (c *collector) add(s sample) {
	c.allDone.Add(1)
	good := s.kind == kindNone && c.success(s.status)
	if good {
		c.allOK.Add(1)
	} else {
		c.allErr.Add(1)
	}
	if s.warm {
		c.warm++
		return
	}
	ms0 := c.p.measureStart.Load()
	c.sent++
	c.completed++
	c.firstSend = min(c.firstSend, s.sent)
	c.lastSend = max(c.lastSend, s.sent)
	c.lastDone = max(c.lastDone, s.done)
	c.lat.Record(s.done - s.intended)
	c.svc.Record(s.done - s.sent)
	c.delay.Record(s.sent - s.intended)
	if s.sent < s.intended {
		c.early++
	}
	c.bytesIn += s.bytesIn
	c.bytesOut += s.bytesOut

	c.second(s.sent-ms0).sent++
	done := c.second(s.done - ms0)
	done.completed++
	sched := c.second(s.intended - ms0)
	if sched.lat == nil {
		sched.lat = NewHistogram()
	}
	sched.lat.Record(s.done - s.intended)

	switch {
	case good:
		c.ok++
		done.ok++
		c.codes[int(s.status)]++
		c.okLat.Record(s.done - s.intended)
	case s.kind != kindNone:
		c.errs++
		done.errs++
		c.kinds[s.kind]++
		if _, seen := c.errSamples[s.kind.String()]; !seen && s.err != nil {
			c.errSamples[s.kind.String()] = s.err.Error()
		}
	default:
		c.errs++
		done.errs++
		c.codes[int(s.status)]++
		switch {
		case c.refusal(s.status) && s.expired:
			c.expLat.Record(s.done - s.intended)
		case c.refusal(s.status):
			c.refLat.Record(s.done - s.intended)
		}
		if name := grpcCodeName(s.status); c.grpc && s.err != nil && c.errSamples[name] == "" {
			c.errSamples[name] = s.err.Error()
		}
	}
}

// success reports whether an answer's status is a success: 2xx, or gRPC's OK.
func (c *collector) success(status int32) bool {
	if c.grpc {
		return status == int32(codes.OK)
	}
	return status >= 200 && status < 300
}

// RefusalHeader is the response header (over gRPC, the trailer x-refusal) in which a server
// tells how it refused a request: RefusalExpired when the request was dropped after it waited
// in the server's line, rather than refused at once (imagegate sends it).
const (
	RefusalHeader  = "X-Refusal"
	RefusalExpired = "expired"
)

// refusal reports whether an answer's status is a refusal under load: 429 or 503, or gRPC's
// RESOURCE_EXHAUSTED or UNAVAILABLE.
func (c *collector) refusal(status int32) bool {
	if c.grpc {
		return status == int32(codes.ResourceExhausted) || status == int32(codes.Unavailable)
	}
	return status == 429 || status == 503
}

func (c *collector) progress(elapsed time.Duration, sent uint64, done bool) Progress {
	cfg := c.cfg
	p := Progress{
		Elapsed:   elapsed,
		Warmup:    c.p.measureStart.Load() < 0 || int64(elapsed) < c.p.measureStart.Load(),
		Sent:      sent,
		Completed: c.allDone.Load(),
		OK:        c.allOK.Load(),
		Errors:    c.allErr.Load(),
		Done:      done,
	}
	if cfg.Requests > 0 {
		total := float64(cfg.Requests + cfg.WarmupRequests)
		if cfg.WarmupDuration > 0 {
			total += float64(cfg.WarmupDuration.Seconds() * cfg.Rate)
		}
		p.Fraction = float64(p.Completed) / total
	}
	if cfg.Duration > 0 {
		p.Fraction = max(p.Fraction, float64(elapsed)/float64(cfg.Duration+cfg.WarmupDuration))
	}
	if done {
		p.Fraction = 1
	}
	p.Fraction = min(p.Fraction, 1)
	return p
}

// redacted is headers with their credentials' values replaced: a report is shared, a key
// must not travel with it.
func redacted(headers []Header) []Header {
	var out []Header
	for _, h := range headers {
		switch strings.ToLower(h.Name) {
		case "authorization", "x-api-key", "proxy-authorization", "cookie":
			h.Value = "(redacted)"
		}
		out = append(out, h)
	}
	return out
}

func (c *collector) result(start, end time.Time, cpu cpuTimes) *Result {
	cfg := c.cfg
	rc := ReportConfig{
		URL: cfg.URL, Method: cfg.Method, Headers: redacted(cfg.Headers),
		Mode: "closed", Concurrency: cfg.Concurrency, Requests: cfg.Requests,
		DurationS: cfg.Duration.Seconds(), WarmupRequests: cfg.WarmupRequests,
		WarmupS: cfg.WarmupDuration.Seconds(), KeepAlive: cfg.KeepAlive,
		TimeoutS: cfg.Timeout.Seconds(),
	}
	if cfg.OpenLoop() {
		rc.Mode, rc.Rate, rc.Arrival = "open", cfg.Rate, cfg.Arrival
	}
	if c.grpc {
		rc.Protocol = string(ProtocolGRPC)
	}
	for _, b := range cfg.Bodies {
		rc.Bodies = append(rc.Bodies, BodyInfo{Name: b.Name, Bytes: len(b.Data)})
	}

	s := Summary{
		Sent: c.sent, Completed: c.completed, OK2xx: c.ok, Errors: c.errs,
		ErrorKinds: map[string]uint64{}, StatusCodes: map[string]uint64{},
		Warmup: c.warm, BytesIn: c.bytesIn, BytesOut: c.bytesOut,
		Latency: latencyStats(c.lat), ServiceTime: latencyStats(c.svc), SendDelay: latencyStats(c.delay),
		SuccessLatency: latencyStats(c.okLat), RefusalLatency: latencyStats(c.refLat), ExpiredLatency: latencyStats(c.expLat),
		Refused: c.refLat.Count() + c.expLat.Count(), Expired: c.expLat.Count(),
	}
	if len(c.errSamples) > 0 {
		s.ErrorSamples = c.errSamples
	}
	for k := kindNone + 1; k < numKinds; k++ {
		if c.kinds[k] > 0 {
			s.ErrorKinds[k.String()] = c.kinds[k]
		}
	}
	for code, n := range c.codes {
		if c.grpc {
			name := grpcCodeName(int32(code))
			s.StatusCodes[name] = n
			if !c.success(int32(code)) {
				s.ErrorKinds[name] += n
			}
			continue
		}
		s.StatusCodes[strconv.Itoa(code)] = n
		if code < 200 || code >= 300 {
			s.ErrorKinds[statusClass(code)] += n
		}
	}
	if cfg.OpenLoop() {
		s.TargetRate = cfg.Rate
		c.p.mu.Lock()
		s.Unsent = c.p.unsent
		c.p.mu.Unlock()
	}
	ms0 := max(c.p.measureStart.Load(), 0)
	if c.completed > 0 {
		window := float64(c.lastDone-ms0) / 1e9
		s.DurationS = window
		if window > 0 {
			s.CompletedRate = float64(c.completed) / window
			s.Throughput = float64(c.ok) / window
		}
		// From the measured phase's start (not the first send: two requests sent at once made a
		// rate of 50,000 a second), and at least -duration, as far as the run lasted.
		sendWindow := float64(c.lastSend-ms0) / 1e9
		if cfg.Duration > 0 {
			sendWindow = max(sendWindow, min(cfg.Duration.Seconds(), float64(end.Sub(start)-time.Duration(ms0))/1e9))
		}
		switch {
		case sendWindow > 1e-3:
			s.SentRate = float64(c.sent) / sendWindow
		case window > 0:
			s.SentRate = float64(c.sent) / window
		}
	}
	wall := end.Sub(start).Seconds()
	s.CPU = CPUUsage{UserS: cpu.user.Seconds(), SysS: cpu.sys.Seconds(), WallS: wall}
	if wall > 0 {
		s.CPU.Percent = (cpu.user + cpu.sys).Seconds() / wall * 100
	}

	r := &Result{
		Tool: "imagegate-loadtest", Version: 1, Config: rc, StartTime: start,
		Summary: s, Percentiles: percentileCurve(c.lat), latency: c.lat, earlySends: c.early,
		Timeline: []Second{},
	}
	for i, sec := range c.seconds {
		row := Second{T: i}
		if sec != nil {
			row.Sent, row.Completed, row.OK, row.Errors = sec.sent, sec.completed, sec.ok, sec.errs
			if sec.lat != nil {
				row.Scheduled = sec.lat.Count()
				row.P50Ms = ms(sec.lat.Quantile(0.5))
				row.P90Ms = ms(sec.lat.Quantile(0.9))
				row.P99Ms = ms(sec.lat.Quantile(0.99))
				row.MaxMs = ms(sec.lat.Max())
			}
		}
		r.Timeline = append(r.Timeline, row)
	}
	c.lat.Buckets(func(lo, hi int64, n uint64) {
		r.Histogram = append(r.Histogram, HistBucket{LowMs: ms(lo), HighMs: ms(hi), Count: n})
	})
	return r
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
