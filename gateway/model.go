package gateway

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/preprocess"
)

// model is one served model: its preprocessor, its batcher and its runners.
type model struct {
	name           string
	cfg            configs.Model
	labels         []string
	pre            *preprocess.Preprocessor
	batcher        *batcher.Batcher[*job, struct{}]
	runners        []Runner
	rowLen         int
	uint8Input     bool
	classes        int
	defaultTimeout time.Duration
	pool           sync.Pool

	req           *requestMetrics
	preprocessDur *metrics.PrometheusHistogram
	queueWait     *metrics.PrometheusHistogram
	inferenceDur  *metrics.PrometheusHistogram
	batchSize     *metrics.PrometheusHistogram
	batches       *metrics.Counter
	batchItems    *metrics.Counter
	batchErrors   *metrics.Counter
	dropped       map[batcher.DropReason]*metrics.Counter
}

func newModel(spec ModelSpec, set *metrics.Set) (*model, error) {
	c := spec.Config
	if len(spec.Runners) == 0 {
		return nil, fmt.Errorf("gateway: model %s has no runner", c.Name)
	}
	r0 := spec.Runners[0]
	for i, r := range spec.Runners {
		if r.Classes() != r0.Classes() || r.RowLen() != r0.RowLen() || r.InputType() != r0.InputType() || r.MaxBatchSize() < c.Batching.MaxBatchSize {
			return nil, fmt.Errorf("gateway: model %s: runner %d does not match runner 0 or holds fewer than max_batch_size rows", c.Name, i)
		}
	}
	if len(spec.Labels) != r0.Classes() {
		return nil, fmt.Errorf("gateway: model %s: %d labels in %s, but the model's output has %d classes",
			c.Name, len(spec.Labels), c.Labels, r0.Classes())
	}
	po := preprocess.Options{
		Width:      c.Input.Width,
		Height:     c.Input.Height,
		Resize:     c.Preprocess.Resize,
		Mode:       preprocess.Mode(c.Preprocess.Mode),
		Scale:      preprocess.Scale(c.Preprocess.Scale),
		Layout:     preprocess.Layout(c.Input.Layout),
		MaxPixels:  c.Preprocess.MaxPixels,
		FullDecode: c.Preprocess.FullDecode,
	}
	copy(po.Mean[:], c.Preprocess.Mean)
	copy(po.Std[:], c.Preprocess.Std)
	pre, err := preprocess.New(po)
	if err != nil {
		return nil, fmt.Errorf("gateway: model %s: %w", c.Name, err)
	}
	if pre.SlotLen() != r0.RowLen() {
		return nil, fmt.Errorf("gateway: model %s: preprocessing gives %d values per image, the model's input row holds %d (check input.width/height)",
			c.Name, pre.SlotLen(), r0.RowLen())
	}
	m := &model{
		name:           c.Name,
		cfg:            c,
		labels:         spec.Labels,
		pre:            pre,
		runners:        spec.Runners,
		rowLen:         r0.RowLen(),
		uint8Input:     r0.InputType() == "uint8",
		classes:        r0.Classes(),
		defaultTimeout: c.Batching.DefaultTimeout.D(),
	}
	m.pool.New = func() any {
		j := &job{scores: make([]float32, m.classes)}
		if m.uint8Input {
			j.slotU8 = make([]uint8, m.rowLen)
		} else {
			j.slot = make([]float32, m.rowLen)
		}
		return j
	}
	l := fmt.Sprintf(`{model=%q}`, c.Name)
	m.req = newRequestMetrics(set, c.Name)
	m.preprocessDur = set.NewPrometheusHistogramExt("gateway_preprocess_duration_seconds"+l, latencyBuckets)
	m.queueWait = set.NewPrometheusHistogramExt("gateway_queue_wait_seconds"+l, latencyBuckets)
	m.inferenceDur = set.NewPrometheusHistogramExt("gateway_inference_duration_seconds"+l, latencyBuckets)
	m.batchSize = set.NewPrometheusHistogramExt("gateway_batch_size"+l, batchBuckets(c.Batching.MaxBatchSize))
	m.batches = set.NewCounter("gateway_batches_total" + l)
	m.batchItems = set.NewCounter("gateway_batch_items_total" + l)
	m.batchErrors = set.NewCounter("gateway_batch_errors_total" + l)
	m.dropped = map[batcher.DropReason]*metrics.Counter{}
	for _, r := range []batcher.DropReason{batcher.DropCanceled, batcher.DropExpired, batcher.DropShed, batcher.DropQueueFull, batcher.DropClosed} {
		m.dropped[r] = set.NewCounter(fmt.Sprintf(`gateway_queue_dropped_total{model=%q,reason=%q}`, c.Name, r.String()))
	}

	bc := batcher.Config{
		MaxBatchSize:        c.Batching.MaxBatchSize,
		MaxQueueDelay:       c.Batching.MaxQueueDelay.D(),
		MaxQueueSize:        c.Batching.MaxQueueSize,
		PreferredBatchSizes: c.Batching.PreferredBatchSizes,
		Instances:           len(spec.Runners),
		Priorities:          c.Batching.Priorities,
	}
	if t := c.Batching.Adaptive.LatencyTarget.D(); t > 0 {
		bc.Adaptive = &batcher.AdaptiveConfig{LatencyTarget: t}
		// A run on the CPU provider with one intra-op thread executes on the batch loop's
		// own thread, whose CPU time is then its true cost (other threads preempting it on a
		// busy machine would inflate wall time at random).
		if c.Runtime.IntraOpThreads == 1 && c.Runtime.ExecutionProvider == "cpu" {
			bc.CostClock = threadCPUClock()
		}
	}
	hooks := batcher.Hooks{
		QueueWait: func(d time.Duration) { m.queueWait.Update(d.Seconds()) },
		Batch: func(instance, size int, run time.Duration, err error) {
			m.batches.Inc()
			m.batchItems.Add(size)
			m.batchSize.Update(float64(size))
			m.inferenceDur.Update(run.Seconds())
			if err != nil {
				m.batchErrors.Inc()
			}
		},
		Dropped: func(r batcher.DropReason) {
			if c := m.dropped[r]; c != nil {
				c.Inc()
			}
		},
	}
	b, err := batcher.New(bc, m.run, hooks)
	if err != nil {
		return nil, fmt.Errorf("gateway: model %s: %w", c.Name, err)
	}
	m.batcher = b
	set.NewGauge("gateway_queue_length"+l, func() float64 { return float64(b.QueueLen()) })
	set.NewGauge("gateway_queue_capacity"+l, func() float64 { return float64(c.Batching.MaxQueueSize) })
	set.NewGauge("gateway_max_batch_size"+l, func() float64 { return float64(c.Batching.MaxBatchSize) })
	if bc.Adaptive != nil {
		set.NewGauge("gateway_adaptive_batch_cap"+l, func() float64 { return float64(b.Stats().AdaptiveCap) })
	}
	return m, nil
}

// run is the batcher's run function: it stacks the jobs' rows into the instance's input
// tensor, runs it once and copies each job's scores back.
func (m *model) run(instance int, jobs []*job, _ []struct{}) error {
	r := m.runners[instance]
	for i, j := range jobs {
		if m.uint8Input {
			copy(r.InputUint8(i), j.slotU8)
		} else {
			copy(r.Input(i), j.slot)
		}
	}
	scores, err := r.Run(len(jobs))
	if err != nil {
		return err
	}
	k := m.classes
	for i, j := range jobs {
		copy(j.scores, scores[i*k:(i+1)*k])
	}
	return nil
}

func (m *model) getJob() *job { return m.pool.Get().(*job) }

// maxInferSamples bounds the samples of one Open Inference Protocol request: as many as the
// model's instances run at once.
func (m *model) maxInferSamples() int {
	return m.cfg.Batching.MaxBatchSize * len(m.runners)
}

func (m *model) putJob(j *job) {
	if cap(j.img) > maxPooledBytes {
		j.img = nil
	}
	if cap(j.scratch) > maxPooledBytes {
		j.scratch = nil
	}
	if cap(j.buf) > 64<<10 {
		j.buf = nil
	}
	m.pool.Put(j)
}

var latencyBuckets = []float64{0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30}

func batchBuckets(maxSize int) []float64 {
	var b []float64
	for n := 1; n < maxSize; n *= 2 {
		b = append(b, float64(n))
	}
	return append(b, float64(maxSize))
}

// Failure reasons: a closed set, used as metric labels.
const (
	reasonRejected  = "rejected"
	reasonTimeout   = "timeout"
	reasonCancelled = "cancelled"
	reasonBadInput  = "bad_input"
	reasonInternal  = "internal"
)

var trackedCodes = []int{200, 400, 404, 405, 408, 413, 415, 429, 499, 500, 503, 504}

// requestMetrics counts a model's requests by status code and by outcome.
type requestMetrics struct {
	byCode   map[int]*metrics.Counter
	other    *metrics.Counter
	success  *metrics.Counter
	failures map[string]*metrics.Counter
	duration *metrics.PrometheusHistogram
}

func newRequestMetrics(set *metrics.Set, name string) *requestMetrics {
	rm := &requestMetrics{byCode: map[int]*metrics.Counter{}, failures: map[string]*metrics.Counter{}}
	for _, c := range trackedCodes {
		rm.byCode[c] = set.NewCounter(fmt.Sprintf(`gateway_requests_total{model=%q,code="%d"}`, name, c))
	}
	rm.other = set.NewCounter(fmt.Sprintf(`gateway_requests_total{model=%q,code="other"}`, name))
	rm.success = set.NewCounter(fmt.Sprintf(`gateway_request_success_total{model=%q}`, name))
	for _, r := range []string{reasonRejected, reasonTimeout, reasonCancelled, reasonBadInput, reasonInternal} {
		rm.failures[r] = set.NewCounter(fmt.Sprintf(`gateway_request_failures_total{model=%q,reason=%q}`, name, r))
	}
	rm.duration = set.NewPrometheusHistogramExt(fmt.Sprintf(`gateway_request_duration_seconds{model=%q}`, name), latencyBuckets)
	return rm
}

func (rm *requestMetrics) observe(status int, d time.Duration) {
	if c := rm.byCode[status]; c != nil {
		c.Inc()
	} else {
		rm.other.Inc()
	}
	if d > 0 {
		rm.duration.Update(d.Seconds())
	}
	switch {
	case status < 400:
		rm.success.Inc()
	case status == 429 || status == 503:
		rm.failures[reasonRejected].Inc()
	case status == 504:
		rm.failures[reasonTimeout].Inc()
	case status == statusClientClosed:
		rm.failures[reasonCancelled].Inc()
	case status >= 500:
		rm.failures[reasonInternal].Inc()
	default:
		rm.failures[reasonBadInput].Inc()
	}
}

// appendPrediction writes {"prediction": label} and, with topK > 0, the top k softmax scores.
func appendPrediction(b []byte, m *model, scores []float32, topK int) []byte {
	best := 0
	for i, v := range scores {
		if v > scores[best] {
			best = i
		}
	}
	b = append(b, `{"prediction":`...)
	b = appendJSONString(b, m.labels[best])
	if topK > 0 {
		b = append(b, `,"top_k":[`...)
		probs := softmax(scores)
		idx := topIndices(probs, topK)
		for n, i := range idx {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"label":`...)
			b = appendJSONString(b, m.labels[i])
			b = append(b, `,"score":`...)
			if math.IsNaN(probs[i]) || math.IsInf(probs[i], 0) {
				b = append(b, "null"...) // a model output holding NaN or Inf
			} else {
				b = strconv.AppendFloat(b, probs[i], 'g', 6, 64)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func softmax(scores []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range scores {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(scores))
	sum := 0.0
	for i, v := range scores {
		p[i] = math.Exp(float64(v) - mx)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// topIndices returns the indices of the k largest values, largest first (ties: lower index).
func topIndices(p []float64, k int) []int {
	idx := make([]int, 0, k)
	for i := range p {
		pos := len(idx)
		for pos > 0 && p[idx[pos-1]] < p[i] {
			pos--
		}
		if pos >= k {
			continue
		}
		if len(idx) < k {
			idx = append(idx, 0)
		}
		copy(idx[pos+1:], idx[pos:len(idx)-1])
		idx[pos] = i
	}
	return idx
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
