package gateway

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/imagegate/imagegate/batcher"
)

// Metrics: static names, closed label sets (model, version, code, reason, stage), counters
// ending in _total, histograms as Prometheus histograms. One metrics.Set holds every series, so
// each family is written once with its # HELP and # TYPE; a model's series are registered by
// newModel and unregistered when the model is closed.

func init() { metrics.ExposeMetadata(true) }

// metricHelp is the # HELP text of each of the gateway's families.
var metricHelp = map[string]string{
	"gateway_requests_total":                "Inference requests (/predict, /models/M/predict, /v2/models/M/infer) answered, by model, version and HTTP status; an unknown model or version counts as model _unknown (code 499: the client closed its connection; no response was written).",
	"gateway_request_success_total":         "Inference requests answered 2xx.",
	"gateway_request_failures_total":        "Inference requests not answered 2xx, by reason: bad_input, not_found, overloaded, queue_full, shed, draining, timeout, canceled, internal.",
	"gateway_request_duration_seconds":      "Time from the request's headers to its answer.",
	"gateway_preprocess_duration_seconds":   "Decode, resize and normalize time of one image.",
	"gateway_queue_wait_seconds":            "Time from submission to the batcher until the sample is taken into a batch.",
	"gateway_inference_duration_seconds":    "Duration of one ONNX Runtime call (a whole batch).",
	"gateway_batch_size":                    "Samples per ONNX Runtime call.",
	"gateway_batches_total":                 "ONNX Runtime calls (execution count).",
	"gateway_batch_items_total":             "Samples run (inference count); batch_items/batches is the mean batch size.",
	"gateway_batch_errors_total":            "ONNX Runtime calls that failed.",
	"gateway_queue_dropped_total":           "Queued samples dropped before running, by reason: canceled, expired, shed, queue_full, closed.",
	"gateway_queue_length":                  "Samples waiting in the model's batcher queue.",
	"gateway_queue_capacity":                "Capacity of the model's queue (batching.max_queue_size).",
	"gateway_pending_samples":               "Samples admitted and not yet answered (decoding, queued or running).",
	"gateway_max_batch_size":                "The model's batching.max_batch_size.",
	"gateway_adaptive_batch_cap":            "Largest batch the adaptive window currently forms (the most efficient size measured).",
	"gateway_decode_workers":                "Images decoded at once at most (server.decode_workers).",
	"gateway_decode_busy":                   "Decode workers in use.",
	"gateway_decode_waiting":                "Requests waiting for a decode worker.",
	"gateway_decode_queue_capacity":         "Requests that may wait for a decode worker (server.decode_queue).",
	"gateway_inflight_bytes":                "Memory held by requests in flight: bodies, decode buffers, input rows.",
	"gateway_inflight_bytes_limit":          "The memory budget (server.max_inflight_bytes).",
	"gateway_inflight_requests":             "Inference requests being handled.",
	"gateway_refusals_total":                "Requests refused at once, by stage: memory, decode_queue, deadline, connections.",
	"gateway_connections":                   "Open client connections.",
	"gateway_connections_idle":              "Open client connections waiting for their next request.",
	"gateway_connections_closed_idle_total": "Idle keep-alive connections closed to admit a new one at server.max_connections.",
	"gateway_ready":                         "1 when serving, 0 while draining.",
	"gateway_build_info":                    "The gateway's version (label version), always 1.",
}

// latencyBuckets are the upper bounds, in seconds, of the latency histograms.
var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30}

func batchBuckets(maxSize int) []float64 {
	var b []float64
	for n := 1; n < maxSize; n *= 2 {
		b = append(b, float64(n))
	}
	return append(b, float64(maxSize))
}

// trackedCodes are the statuses counted by name; others count as code="other".
var trackedCodes = []int{200, 400, 404, 405, 408, 413, 415, 429, 499, 500, 503, 504}

// metricsRegistry holds every series of a server.
type metricsRegistry struct {
	set      *metrics.Set
	mu       sync.Mutex
	unknown  *requestMetrics // requests for models that do not exist
	refusals map[string]*metrics.Counter
}

func newMetricsRegistry() *metricsRegistry {
	r := &metricsRegistry{set: metrics.NewSet(), refusals: map[string]*metrics.Counter{}}
	r.unknown = newRequestMetrics(r.set, `model="_unknown",version=""`)
	for _, st := range []string{refuseMemory, refuseDecodeQueue, refuseDeadline, refuseConnections} {
		r.refusals[st] = r.set.NewCounter(fmt.Sprintf(`gateway_refusals_total{stage=%q}`, st))
	}
	return r
}

// Stages at which a request is refused at once (gateway_refusals_total).
const (
	refuseMemory      = "memory"
	refuseDecodeQueue = "decode_queue"
	refuseDeadline    = "deadline"
	refuseConnections = "connections"
)

// write writes every series with # HELP texts for the gateway's families.
func (r *metricsRegistry) write(w *bytes.Buffer) {
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	// VictoriaMetrics writes "# HELP name" without text: add ours.
	for line := range bytes.Lines(b.Bytes()) {
		if name, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = bytes.TrimSpace(name)
			if h, ok := metricHelp[string(name)]; ok {
				w.WriteString("# HELP ")
				w.Write(name)
				w.WriteByte(' ')
				w.WriteString(h)
				w.WriteByte('\n')
				continue
			}
		}
		w.Write(line)
	}
}

// requestMetrics counts one model version's requests by status code and by outcome.
type requestMetrics struct {
	labels   string
	byCode   map[int]*metrics.Counter
	other    *metrics.Counter
	success  *metrics.Counter
	failures map[string]*metrics.Counter
	duration *metrics.PrometheusHistogram
}

func newRequestMetrics(set *metrics.Set, labels string) *requestMetrics {
	rm := &requestMetrics{labels: labels, byCode: map[int]*metrics.Counter{}, failures: map[string]*metrics.Counter{}}
	for _, c := range trackedCodes {
		rm.byCode[c] = set.NewCounter(fmt.Sprintf(`gateway_requests_total{%s,code="%d"}`, labels, c))
	}
	rm.other = set.NewCounter(fmt.Sprintf(`gateway_requests_total{%s,code="other"}`, labels))
	rm.success = set.NewCounter(fmt.Sprintf(`gateway_request_success_total{%s}`, labels))
	for _, r := range failureReasons {
		rm.failures[r] = set.NewCounter(fmt.Sprintf(`gateway_request_failures_total{%s,reason=%q}`, labels, r))
	}
	rm.duration = set.NewPrometheusHistogramExt(fmt.Sprintf(`gateway_request_duration_seconds{%s}`, labels), latencyBuckets)
	return rm
}

// observe counts one answered request: its status and, when it failed, its reason.
func (rm *requestMetrics) observe(status int, reason string, d time.Duration) {
	if c := rm.byCode[status]; c != nil {
		c.Inc()
	} else {
		rm.other.Inc()
	}
	rm.duration.Update(d.Seconds())
	if status < 400 {
		rm.success.Inc()
		return
	}
	if c := rm.failures[reason]; c != nil {
		c.Inc()
	}
}

// modelMetrics are one model version's series.
type modelMetrics struct {
	names       []string // every series registered, to unregister them
	req         *requestMetrics
	preprocess  *metrics.PrometheusHistogram
	queueWait   *metrics.PrometheusHistogram
	inference   *metrics.PrometheusHistogram
	batchSize   *metrics.PrometheusHistogram
	batches     *metrics.Counter
	batchItems  *metrics.Counter
	batchErrors *metrics.Counter
	dropped     map[batcher.DropReason]*metrics.Counter
}

// model registers a model version's series.
func (r *metricsRegistry) model(m *model) *modelMetrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	labels := fmt.Sprintf(`model=%q,version=%q`, m.name, m.version)
	before := len(r.set.ListMetricNames())
	mm := &modelMetrics{dropped: map[batcher.DropReason]*metrics.Counter{}}
	set := r.set
	l := "{" + labels + "}"
	mm.req = newRequestMetrics(set, labels)
	mm.preprocess = set.NewPrometheusHistogramExt("gateway_preprocess_duration_seconds"+l, latencyBuckets)
	mm.queueWait = set.NewPrometheusHistogramExt("gateway_queue_wait_seconds"+l, latencyBuckets)
	mm.inference = set.NewPrometheusHistogramExt("gateway_inference_duration_seconds"+l, latencyBuckets)
	mm.batchSize = set.NewPrometheusHistogramExt("gateway_batch_size"+l, batchBuckets(m.maxBatch))
	mm.batches = set.NewCounter("gateway_batches_total" + l)
	mm.batchItems = set.NewCounter("gateway_batch_items_total" + l)
	mm.batchErrors = set.NewCounter("gateway_batch_errors_total" + l)
	for _, d := range []batcher.DropReason{batcher.DropCanceled, batcher.DropExpired, batcher.DropShed, batcher.DropQueueFull, batcher.DropClosed} {
		mm.dropped[d] = set.NewCounter(fmt.Sprintf(`gateway_queue_dropped_total{%s,reason=%q}`, labels, d.String()))
	}
	set.NewGauge("gateway_queue_length"+l, func() float64 { return float64(m.impl.queueLen()) })
	set.NewGauge("gateway_queue_capacity"+l, func() float64 { return float64(m.queueCap - int64(m.maxBatch*m.instances)) })
	set.NewGauge("gateway_pending_samples"+l, func() float64 { return float64(m.pending.Load()) })
	set.NewGauge("gateway_max_batch_size"+l, func() float64 { return float64(m.maxBatch) })
	set.NewGauge("gateway_adaptive_batch_cap"+l, func() float64 { return float64(m.impl.adaptiveCap()) })
	// The names just added: every name holding this model's labels.
	for _, n := range r.set.ListMetricNames() {
		if bytes.Contains([]byte(n), []byte(l[:len(l)-1])) {
			mm.names = append(mm.names, n)
		}
	}
	_ = before
	return mm
}

// dropModel unregisters a model version's series.
func (r *metricsRegistry) dropModel(m *model) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range m.met.names {
		r.set.UnregisterMetric(n)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
