package gateway

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/metricset"
)

// Metrics: static names, closed label sets (model, version, code, reason, stage), counters
// ending in _total, histograms as Prometheus histograms. One metrics.Set holds every series, so
// each family is written once, with its # HELP and # TYPE when the process exposes metadata
// (metrics.ExposeMetadata, a VictoriaMetrics setting for the whole process that cmd/gateway
// turns on); a model's series are registered by newModel and unregistered when the model is
// closed.

// metricsRegistry holds every series of a server.
type metricsRegistry struct {
	set         *metrics.Set
	mu          sync.Mutex
	models      map[string]*modelMetrics // by labels
	unknown     *metricset.Requests      // requests for models that do not exist
	refusals    map[string]*metrics.Counter
	expired     map[string]*metrics.Counter  // waiters for a decode worker dropped after their wait, by reason
	doorLatency *metrics.PrometheusHistogram // refusals at the door: arrival to answer
	reloads     map[bool]*metrics.Counter    // by success
	instances   atomic.Int64                 // runners (sessions) of the model generations alive
}

// loadFailure counts a model version that failed to load.
func (r *metricsRegistry) loadFailure(name string) {
	r.set.GetOrCreateCounter(fmt.Sprintf(`gateway_model_load_failures_total{model=%q}`, name)).Inc()
}

func newMetricsRegistry() *metricsRegistry {
	r := &metricsRegistry{set: metrics.NewSet(), refusals: map[string]*metrics.Counter{}, models: map[string]*modelMetrics{}}
	r.unknown = metricset.NewRequests(r.set, `model="_unknown",version=""`, failureReasons)
	for _, st := range []string{refuseQueue, refuseQueueTime, refuseMemory, refuseDecodeQueue, refuseDeadline, refuseConnections} {
		r.refusals[st] = r.set.NewCounter(fmt.Sprintf(`gateway_refusals_total{stage=%q}`, st))
	}
	r.expired = map[string]*metrics.Counter{}
	for _, reason := range []string{expiredTarget, expiredDeadline, expiredMemory} {
		r.expired[reason] = r.set.NewCounter(fmt.Sprintf(`gateway_decode_expired_total{reason=%q}`, reason))
	}
	r.doorLatency = r.set.NewPrometheusHistogramExt("gateway_refusal_duration_seconds", metricset.RefusalBuckets)
	r.reloads = map[bool]*metrics.Counter{
		true:  r.set.NewCounter(`gateway_reloads_total{result="ok"}`),
		false: r.set.NewCounter(`gateway_reloads_total{result="failed"}`),
	}
	r.set.NewGauge("gateway_model_instances", func() float64 { return float64(r.instances.Load()) })
	return r
}

// Stages at which a request is refused at once (gateway_refusals_total).
const (
	refuseQueue       = "queue"      // the model's queue is full (batching.max_queue_size)
	refuseQueueTime   = "queue_time" // it would wait longer than batching.queue_target
	refuseMemory      = "memory"
	refuseDecodeQueue = "decode_queue"
	refuseDeadline    = "deadline"
	refuseConnections = "connections"
)

// write writes every series with # HELP texts for the gateway's families.
func (r *metricsRegistry) write(w *bytes.Buffer) { metricset.Write(r.set, w) }

// modelMetrics are one model version's series. Successive generations of a version (a
// reload replaces a changed model file) share them; the gauges read the generation serving.
type modelMetrics struct {
	key         string
	gens        int                   // generations alive (under metricsRegistry.mu)
	cur         atomic.Pointer[model] // the generation serving, for the gauges
	names       []string              // every series registered, to unregister them
	req         *metricset.Requests
	preprocess  *metrics.PrometheusHistogram
	queueWait   *metrics.PrometheusHistogram
	inference   *metrics.PrometheusHistogram
	batchSize   *metrics.PrometheusHistogram
	batches     *metrics.Counter
	batchItems  *metrics.Counter
	batchErrors *metrics.Counter
	hungRuns    *metrics.Counter
	dropped     map[string]*metrics.Counter // gateway_queue_dropped_total, by reason
	curve       map[int]bool                // batch sizes whose measured cost has a series
}

// dropQueueTime is gateway_queue_dropped_total's reason for a sample refused before the
// batcher's queue for its queue target (admission's, beside the batcher's own reasons).
const dropQueueTime = "queue_time"

// model returns a model version's series, registering them for its first generation.
func (r *metricsRegistry) model(m *model) *modelMetrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	labels := fmt.Sprintf(`model=%q,version=%q`, m.name, m.version)
	if mm := r.models[labels]; mm != nil {
		mm.gens++
		r.curveGauges(mm, m)
		return mm
	}
	mm := &modelMetrics{key: labels, gens: 1, dropped: map[string]*metrics.Counter{}, curve: map[int]bool{}}
	mm.cur.Store(m)
	r.models[labels] = mm
	set := r.set
	l := "{" + labels + "}"
	mm.req = metricset.NewRequests(set, labels, failureReasons)
	mm.preprocess = set.NewPrometheusHistogramExt("gateway_preprocess_duration_seconds"+l, metricset.LatencyBuckets)
	mm.queueWait = set.NewPrometheusHistogramExt("gateway_queue_wait_seconds"+l, metricset.LatencyBuckets)
	mm.inference = set.NewPrometheusHistogramExt("gateway_inference_duration_seconds"+l, metricset.LatencyBuckets)
	mm.batchSize = set.NewPrometheusHistogramExt("gateway_batch_size"+l, metricset.BatchBuckets(4096))
	mm.batches = set.NewCounter("gateway_batches_total" + l)
	mm.batchItems = set.NewCounter("gateway_batch_items_total" + l)
	mm.batchErrors = set.NewCounter("gateway_batch_errors_total" + l)
	mm.hungRuns = set.NewCounter("gateway_hung_runs_total" + l)
	for _, d := range []string{batcher.DropCanceled.String(), batcher.DropExpired.String(), batcher.DropShed.String(), batcher.DropQueueFull.String(), batcher.DropClosed.String(), dropQueueTime} {
		mm.dropped[d] = set.NewCounter(fmt.Sprintf(`gateway_queue_dropped_total{%s,reason=%q}`, labels, d))
	}
	gauge := func(name string, f func(m *model) float64) {
		set.NewGauge(name+l, func() float64 {
			if m := mm.cur.Load(); m != nil {
				return f(m)
			}
			return 0
		})
	}
	gauge("gateway_queue_length", func(m *model) float64 { return float64(m.impl.queueLen()) })
	gauge("gateway_queue_capacity", func(m *model) float64 { return float64(m.maxQueue) })
	gauge("gateway_pending_samples", func(m *model) float64 { return float64(m.pending.Load()) })
	gauge("gateway_max_batch_size", func(m *model) float64 { return float64(m.maxBatch) })
	gauge("gateway_adaptive_batch_cap", func(m *model) float64 { return float64(m.impl.adaptiveCap()) })
	gauge("gateway_run_age_seconds", func(m *model) float64 { _, age := m.watch.Oldest(time.Now()); return age.Seconds() })
	gauge("gateway_run_hang_bound_seconds", func(m *model) float64 { return m.dog.Bound(&m.watch).Seconds() })
	// The names just added: every name holding this model's labels.
	for _, n := range r.set.ListMetricNames() {
		if strings.Contains(n, l[:len(l)-1]) {
			mm.names = append(mm.names, n)
		}
	}
	r.curveGauges(mm, m)
	return mm
}

// curveGauges adds a series for each batch size of m's measured batch curve that has none yet
// (a later generation of the version may have measured other sizes); each reads the
// generation serving, 0 where it measured no such size. Under r.mu.
func (r *metricsRegistry) curveGauges(mm *modelMetrics, m *model) {
	for _, c := range m.batchCurve {
		if mm.curve[c.Batch] {
			continue
		}
		mm.curve[c.Batch] = true
		name := fmt.Sprintf(`gateway_batch_run_per_image_seconds{%s,batch="%d"}`, mm.key, c.Batch)
		batch := c.Batch
		r.set.NewGauge(name, func() float64 {
			if m := mm.cur.Load(); m != nil {
				for _, c := range m.batchCurve {
					if c.Batch == batch {
						return c.PerImage.Seconds()
					}
				}
			}
			return 0
		})
		mm.names = append(mm.names, name)
	}
}

// serving makes m the generation its version's gauges read.
func (r *metricsRegistry) serving(m *model) { m.met.cur.Store(m) }

// dropModel ends a generation; the version's series go with its last generation.
func (r *metricsRegistry) dropModel(m *model) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mm := m.met
	mm.cur.CompareAndSwap(m, nil)
	if mm.gens--; mm.gens > 0 {
		return
	}
	delete(r.models, mm.key)
	for _, n := range mm.names {
		r.set.UnregisterMetric(n)
	}
}
