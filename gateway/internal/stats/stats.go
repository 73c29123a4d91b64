package stats

import (
	"sync/atomic"
	"time"
)

// Duration is a count of events and the nanoseconds they took together (Triton's
// StatisticDuration).
type Duration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

// Infer is the requests' statistics (Triton's InferStatistics). Success and Fail count
// requests and their times from arrival to answer; Queue and the Compute entries count the
// successful requests and sum the time each spent there (a request counts the whole of its
// batch's run, as in Triton).
type Infer struct {
	Success       Duration `json:"success"`
	Fail          Duration `json:"fail"`
	Queue         Duration `json:"queue"`
	ComputeInput  Duration `json:"compute_input"`
	ComputeInfer  Duration `json:"compute_infer"`
	ComputeOutput Duration `json:"compute_output"`
}

// Batch is the successful executions of one batch size and their summed times (Triton's
// InferBatchStatistics): each Count is the number of executions.
type Batch struct {
	BatchSize     uint64   `json:"batch_size"`
	ComputeInput  Duration `json:"compute_input"`
	ComputeInfer  Duration `json:"compute_infer"`
	ComputeOutput Duration `json:"compute_output"`
}

// Snapshot is a model version's statistics at one moment (Triton's ModelStatistics less its
// name and version). LastInference is in milliseconds since the Unix epoch (0: none yet);
// InferenceCount counts the samples of successful executions, ExecutionCount the executions.
// BatchStats lists the batch sizes that ran, smallest first. The counters are read one by one
// while requests update them, so a snapshot taken under load may be off by the requests in
// flight.
type Snapshot struct {
	LastInference  uint64  `json:"last_inference"`
	InferenceCount uint64  `json:"inference_count"`
	ExecutionCount uint64  `json:"execution_count"`
	InferenceStats Infer   `json:"inference_stats"`
	BatchStats     []Batch `json:"batch_stats"`
}

// Request is one request's times, as Model.Request takes them.
type Request struct {
	Start time.Time     // its arrival
	Total time.Duration // from arrival to answer
	// The stages of a successful request (ignored for a failed one).
	Queue, Input, Infer, Output time.Duration
}

// Model is one model version's counters. Its methods are safe for concurrent use.
type Model struct {
	last          atomic.Int64 // ms since the epoch
	success, fail counter
	queue, input  atomic.Uint64
	infer, output atomic.Uint64
	inferences    atomic.Uint64
	batches       []batchCounter // index: batch size - 1
}

type counter struct{ n, ns atomic.Uint64 }

type batchCounter struct{ n, input, infer, output atomic.Uint64 }

// New returns counters for a model whose batches hold 1 to maxBatch samples.
func New(maxBatch int) *Model {
	return &Model{batches: make([]batchCounter, max(maxBatch, 1))}
}

// Request counts a request that reached the model, successful (ok) or not.
func (m *Model) Request(r Request, ok bool) {
	m.seen(r.Start)
	if !ok {
		m.fail.add(r.Total)
		return
	}
	m.success.add(r.Total)
	m.queue.Add(ns(r.Queue))
	m.input.Add(ns(r.Input))
	m.infer.Add(ns(r.Infer))
	m.output.Add(ns(r.Output))
}

// Batch counts a successful execution of size samples and its stages' times. A size outside
// 1..maxBatch (a bug) is counted in the inference count only.
func (m *Model) Batch(size int, input, infer, output time.Duration) {
	m.inferences.Add(uint64(max(size, 0)))
	if size < 1 || size > len(m.batches) {
		return
	}
	b := &m.batches[size-1]
	b.n.Add(1)
	b.input.Add(ns(input))
	b.infer.Add(ns(infer))
	b.output.Add(ns(output))
}

// seen moves the last inference time forward to t.
func (m *Model) seen(t time.Time) {
	ms := t.UnixMilli()
	for {
		last := m.last.Load()
		if ms <= last || m.last.CompareAndSwap(last, ms) {
			return
		}
	}
}

// Snapshot returns the counters' values now.
func (m *Model) Snapshot() Snapshot {
	var s Snapshot
	s.LastInference = uint64(max(m.last.Load(), 0))
	s.InferenceCount = m.inferences.Load()
	st := &s.InferenceStats
	st.Success = m.success.load()
	st.Fail = m.fail.load()
	n := st.Success.Count
	st.Queue = Duration{n, m.queue.Load()}
	st.ComputeInput = Duration{n, m.input.Load()}
	st.ComputeInfer = Duration{n, m.infer.Load()}
	st.ComputeOutput = Duration{n, m.output.Load()}
	s.BatchStats = []Batch{}
	for i := range m.batches {
		b := &m.batches[i]
		c := b.n.Load()
		if c == 0 {
			continue
		}
		s.ExecutionCount += c
		s.BatchStats = append(s.BatchStats, Batch{
			BatchSize:     uint64(i + 1),
			ComputeInput:  Duration{c, b.input.Load()},
			ComputeInfer:  Duration{c, b.infer.Load()},
			ComputeOutput: Duration{c, b.output.Load()},
		})
	}
	return s
}

func (c *counter) add(d time.Duration) {
	c.n.Add(1)
	c.ns.Add(ns(d))
}

func (c *counter) load() Duration { return Duration{c.n.Load(), c.ns.Load()} }

// ns is d in nanoseconds; a negative duration (clock trouble) counts as 0.
func ns(d time.Duration) uint64 { return uint64(max(d, 0)) }
