package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/sched"
	"github.com/imagegate/imagegate/gateway/internal/stats"
	"github.com/imagegate/imagegate/gateway/internal/watchdog"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/preprocess"
)

// model is one served model version. It owns its preprocessor, its batcher (whose loops call
// its runners) and its metric series: newModel creates them together and close releases them
// together, so a model's lifetime has one owner.
type model struct {
	name, version  string
	labels         []string
	classes        int // values per sample of the scores (a classifier's output: outputs[0])
	outputs        []Output
	rowLen         int
	elemSize       int    // bytes per input value
	datatype       string // the input's Open Inference Protocol datatype: FP32 or UINT8
	inputName      string
	outputName     string                 // outputs[0]'s
	task           modelTask              // what it answers (task.go)
	parameters     map[string]string      // ModelOptions.Parameters
	batchCurve     []BatchCost            // ModelOptions.BatchCurve
	config         *inference.ModelConfig // ModelOptions.Config
	shape          []int64                // one sample's input shape, e.g. [3 224 224]
	pre            *preprocess.Preprocessor
	defaultTimeout time.Duration
	maxBatch       int
	instances      int
	// maxQueue (max_queue_size) bounds the samples admitted and not yet in a run: the door
	// admits while pending is within maxQueue plus the samples running, so that the batcher,
	// which holds the same bound on its queue, never refuses a sample admitted (nor one whose
	// body was read). queueCap, maxQueue plus a batch per instance, is the most pending reaches.
	maxQueue, queueCap int64
	running            atomic.Int64 // samples in a running batch
	// queueTarget bounds the time a request may wait in line, for a decode worker and in the
	// batcher (batching.queue_target; 0: no bound but its deadline).
	queueTarget time.Duration
	pending     atomic.Int64 // samples admitted and not yet answered
	// refs counts the requests holding the model, times 2; its low bit is set once the model
	// is closing: no acquire succeeds then, and the release that brings the count to zero
	// closes idle.
	refs    atomic.Int64
	idle    chan struct{}
	closing atomic.Bool
	met     *modelMetrics
	stats   *stats.Model // the statistics extension's counters
	impl    modelImpl
	release func()
	// fingerprint identifies what the model was built from (see ModelSpec).
	fingerprint string
	tracer      trace.Tracer  // nil: not traced
	spanName    string        // its requests' server spans
	watch       watchdog.Runs // its runs in progress, for the liveness watchdog
	dog         *watchdog.Dog
	closeOnce   sync.Once
	closeErr    error
}

// modelImpl is the part of a model that depends on its input's element type.
type modelImpl interface {
	// samples returns n pooled samples, for images or for tensor data (see imageRowBytes);
	// release them with sampleSet.release.
	samples(n int, images bool) sampleSet
	predict(priority int) (time.Duration, bool)
	// predictWait is the batcher's predicted wait before a sample submitted now runs.
	predictWait(priority int) (time.Duration, bool)
	// warm runs every instance once at the full batch size, before the model takes traffic.
	warm() error
	queueLen() int
	adaptiveCap() int
	close(ctx context.Context) error
}

// sampleSet is one request's samples: an input row each, and its values of each of the model's
// outputs.
type sampleSet interface {
	len() int
	// decode preprocesses an encoded image into sample i's row (samples for images).
	decode(ctx context.Context, i int, img []byte) error
	// tensorJSON fills every row from JSON tensor data (flat or nested numbers, row-major;
	// samples for tensor data).
	tensorJSON(data []byte) error
	// tensorBinary fills every row from raw little-endian tensor data.
	tensorBinary(raw []byte) error
	// submit runs every sample (they may share batches) and waits for their outputs; span is
	// the request's span context (zero: not traced), which their batches' spans link.
	submit(ctx context.Context, priority int, span trace.SpanContext) error
	// output is sample i's values of the model's output k (its shape: model.outputs[k]),
	// valid until release.
	output(i, k int) []float32
	// geometry is where sample i's image went in the input (a detector's decode reports it;
	// zero for tensor data and for the other tasks).
	geometry(i int) preprocess.Geometry
	// stage is what sample i's submission and batch run tell (set by submit).
	stage(i int) *sampleStage
	release()
}

// scoresOutput is the output a classifier answers with: its first, the scores, one per label.
const scoresOutput = 0

// sampleStage is what a sample's submission and batch run tell its request: when it was
// submitted, when its batch ran and its size, how the run's time divides (filling the input
// tensor, the model's run; the rest is copying the scores out), and the spans that link them.
type sampleStage struct {
	submitted, runStart, runEnd time.Time
	runInput, runInfer          time.Duration
	batch                       int
	span                        trace.SpanContext // the request's (the batch span links it)
	batchSpan                   trace.SpanContext // the batch run's
}

// newModel builds a model version of server s and starts its batcher, whose loops run on
// model threads of s's; s's tracer, when it has one, traces its batch runs, and its watchdog
// watches them.
func newModel(o ModelOptions, s *Server) (*model, error) {
	met, threads := s.met, s.threads
	if o.Version == "" {
		o.Version = "1"
	}
	pre, err := preprocess.New(o.Preprocess)
	if err != nil {
		return nil, fmt.Errorf("gateway: model %s: %w", o.Name, err)
	}
	po := pre.Options()
	m := &model{
		name: o.Name, version: o.Version, labels: o.Labels, inputName: o.InputName,
		pre: pre, defaultTimeout: o.DefaultTimeout, maxBatch: o.Batching.MaxBatchSize, release: o.Release,
		idle: make(chan struct{}), parameters: o.Parameters, config: o.Config, tracer: s.tracer, dog: s.dog, spanName: "infer " + o.Name,
		batchCurve: o.BatchCurve,
	}
	if _, ok := m.parameters["task"]; !ok {
		// The configuration says the task (a console reads it there), the settings' source
		// where cmd/gateway noted one.
		m.parameters = maps.Clone(m.parameters)
		if m.parameters == nil {
			m.parameters = map[string]string{}
		}
		m.parameters["task"] = o.Task.String()
	}
	m.shape = []int64{3, int64(po.Height), int64(po.Width)}
	if po.Layout == preprocess.NHWC {
		m.shape = []int64{int64(po.Height), int64(po.Width), 3}
	}
	// What differs between the input's element types is how an image becomes a row: decoded
	// into float32 values (kept as the resampler's bytes until the run expands them), or into
	// the bytes a uint8 model takes as they are.
	switch r := o.Runners.(type) {
	case RunnersOf[float32]:
		m.impl, err = newTypedModel(m, r, o, threads, elemCodec[float32]{decode: pre.ProcessContext, geometry: pre.ProcessGeometry, expand: pre.Expand})
		m.elemSize, m.datatype = 4, "FP32"
	case RunnersOf[uint8]:
		m.impl, err = newTypedModel(m, r, o, threads, elemCodec[uint8]{decode: pre.ProcessUint8Context, geometry: pre.ProcessUint8Geometry})
		m.elemSize, m.datatype = 1, "UINT8"
	default:
		err = errors.New("no runners")
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: model %s: %w", o.Name, err)
	}
	m.maxQueue = int64(o.Batching.MaxQueueSize)
	m.queueCap = m.maxQueue + int64(m.maxBatch*m.instances)
	m.queueTarget = o.QueueTarget
	m.met = met.model(m)
	m.stats = stats.New(m.maxBatch)
	met.instances.Add(int64(m.instances))
	m.watch.Model, m.watch.Version, m.watch.OnHung = m.name, m.version, m.met.hungRuns.Inc
	s.dog.Add(&m.watch)
	return m, nil
}

// acquire counts a request on the model; it reports false once the model is closing.
func (m *model) acquire() bool {
	for {
		r := m.refs.Load()
		if r&1 != 0 {
			return false
		}
		if m.refs.CompareAndSwap(r, r+2) {
			return true
		}
	}
}

// done releases a request counted by acquire.
func (m *model) done() {
	if m.refs.Add(-2) == 1 { // closing, and this was the last request
		close(m.idle)
	}
}

// startClosing refuses further acquires and returns a channel closed once no request holds
// the model.
func (m *model) startClosing() <-chan struct{} {
	m.closing.Store(true)
	if m.refs.Or(1) == 0 { // nobody held it
		close(m.idle)
	}
	return m.idle
}

// capNow bounds the samples pending now: max_queue_size waiting beyond those running.
func (m *model) capNow() int64 { return m.maxQueue + m.running.Load() }

// admit counts n more samples against the model's queue bound.
func (m *model) admit(n int) error {
	for {
		p, running := m.pending.Load(), m.running.Load()
		if p+int64(n) > m.maxQueue+running {
			return fmt.Errorf("%w: model %s has %d samples waiting (batching.max_queue_size)", errQueueFull, m.name, p-running)
		}
		if m.pending.CompareAndSwap(p, p+int64(n)) {
			return nil
		}
	}
}

func (m *model) unadmit(n int) { m.pending.Add(int64(-n)) }

// rowBytes is the memory of one input row of tensor data.
func (m *model) rowBytes() int64 { return int64(m.rowLen * m.elemSize) }

// imageRowBytes is the memory of one image's row until its batch runs: a byte per value
// (a float32 model's image is kept as the bytes the resampler computes and expanded into the
// input tensor by the run, bit for bit what decoding straight into float32 gives).
func (m *model) imageRowBytes() int64 { return int64(m.rowLen) }

// close stops taking requests, waits for those in flight (until ctx ends), runs what is
// queued, stops the batcher and releases the runners and the metric series.
func (m *model) close(ctx context.Context, met *metricsRegistry) error {
	m.closeOnce.Do(func() { m.closeErr = m.doClose(ctx, met) })
	return m.closeErr
}

func (m *model) doClose(ctx context.Context, met *metricsRegistry) error {
	select {
	case <-m.startClosing():
	case <-ctx.Done():
	}
	err := m.impl.close(ctx)
	if err == nil {
		m.dog.Remove(&m.watch) // no run is left (one that outlived a timed-out close stays watched)
	}
	if err == nil && m.release != nil {
		// A batch may still run after a close that timed out: the runners are then left
		// to the process rather than freed under it.
		m.release()
	}
	met.dropModel(m)
	met.instances.Add(int64(-m.instances))
	return err
}

// typedModel is a model whose input elements are T: one implementation for both element
// types, what differs between them being its elemCodec.
type typedModel[T Elem] struct {
	m       *model
	threads *sched.Threads
	runners []Runner[T]
	codec   elemCodec[T]
	b       *batcher.Batcher[*job[T], struct{}]
	jobs    sync.Pool // jobs with a row of T: tensor data, and images when the codec has no expand
	images  sync.Pool // jobs for images kept as bytes (px), expanded by the run
	sets    sync.Pool
}

// elemCodec is how an image becomes an input row of T: decode writes the row (geometry too,
// and reports where the image went in it); expand, when set, writes it at run time from the
// bytes an image was decoded into (a float32 row from its 0..255 values, a quarter of the
// memory while it waits), and images are then decoded into bytes.
type elemCodec[T Elem] struct {
	decode   func(ctx context.Context, img []byte, row []T) error
	geometry func(ctx context.Context, img []byte, row []T) (preprocess.Geometry, error)
	expand   func(dst []T, px []uint8) error
}

// dynamicTooLarge reports whether a job's dynamic outputs grew past what a pool keeps.
func (t *typedModel[T]) dynamicTooLarge(j *job[T]) bool {
	for k, o := range t.m.outputs {
		if o.Size() == 0 && cap(j.outs[k]) > maxDynamicKeep {
			return true
		}
	}
	return false
}

// job is one sample's pooled memory: its input row and its values of each output. Both are
// fully written before they are read (the row by a decode or a tensor fill, the outputs by the
// run), so nothing of an earlier request survives in them. An image of a model whose codec
// expands is kept as bytes (px) and expanded into the input tensor when its batch runs; row is
// nil then.
type job[T Elem] struct {
	row  []T
	px   []uint8
	outs [][]float32 // by output, each its per-sample size (a dynamic output's: the last run's)
	st   sampleStage // set by submit and the run
	geo  preprocess.Geometry
}

// newJob returns a job with a row of T, or of bytes for an image to expand (px), and room
// for each output's values (one allocation).
func (t *typedModel[T]) newJob(px bool) *job[T] {
	m := t.m
	j := &job[T]{outs: make([][]float32, len(m.outputs))}
	if px {
		j.px = make([]uint8, m.rowLen)
	} else {
		j.row = make([]T, m.rowLen)
	}
	total := 0
	for _, o := range m.outputs {
		total += o.Size()
	}
	vals := make([]float32, total)
	for k, o := range m.outputs {
		j.outs[k], vals = vals[:o.Size():o.Size()], vals[o.Size():] // a dynamic output (Size 0): grown by the run
	}
	return j
}

func newTypedModel[T Elem](m *model, runners RunnersOf[T], o ModelOptions, threads *sched.Threads, codec elemCodec[T]) (*typedModel[T], error) {
	if len(runners) == 0 {
		return nil, errors.New("no runner")
	}
	r0 := runners[0]
	outs := r0.Outputs()
	for i, r := range runners {
		if !sameOutputs(r.Outputs(), outs) || r.RowLen() != r0.RowLen() || r.MaxBatchSize() < o.Batching.MaxBatchSize {
			return nil, fmt.Errorf("runner %d does not match runner 0 or holds fewer than max_batch_size rows", i)
		}
	}
	if len(outs) == 0 {
		return nil, errors.New("the model has no output")
	}
	po := m.pre.Options()
	task, err := newModelTask(o, outs, po.Width, po.Height)
	if err != nil {
		return nil, err
	}
	if m.pre.SlotLen() != r0.RowLen() {
		return nil, fmt.Errorf("preprocessing gives %d values per image, the model's input row holds %d (check input.width/height)",
			m.pre.SlotLen(), r0.RowLen())
	}
	m.outputs, m.outputName, m.classes, m.task = outs, outs[0].Name, outs[0].Size(), task
	m.rowLen, m.instances = r0.RowLen(), len(runners)
	m.watch.Init(len(runners))
	t := &typedModel[T]{m: m, threads: threads, runners: runners, codec: codec}
	t.jobs.New = func() any { return t.newJob(false) }
	t.images.New = func() any { return t.newJob(codec.expand != nil) }
	t.sets.New = func() any { return &samplesOf[T]{t: t} }
	bc := o.Batching
	bc.Instances = len(runners)
	if bc.StartLoop == nil {
		// Model runs go after the threads that accept, refuse and answer, and before decodes.
		bc.StartLoop = threads.ModelLoop
	}
	hooks := batcher.Hooks{
		QueueWait: func(d time.Duration) { m.met.queueWait.Update(d.Seconds()) },
		Batch: func(_, size int, run time.Duration, err error) {
			m.met.batches.Inc()
			m.met.batchItems.Add(size)
			m.met.batchSize.Update(float64(size))
			m.met.inference.Update(run.Seconds())
			if err != nil {
				m.met.batchErrors.Inc()
			}
		},
		Dropped: func(r batcher.DropReason) {
			if c := m.met.dropped[r.String()]; c != nil {
				c.Inc()
			}
		},
	}
	b, err := batcher.New(bc, t.run, hooks)
	if err != nil {
		return nil, err
	}
	t.b = b
	return t, nil
}

// run is the batcher's run function: it stacks the jobs' rows into the instance's input
// tensor, runs it once and copies each job's values of each output back. It tells each job when its batch
// ran (its stage times, the batch span), the watchdog when a run starts and ends, and the
// model's statistics how long its three steps took.
func (t *typedModel[T]) run(instance int, jobs []*job[T], _ []struct{}) (err error) {
	start := time.Now()
	var filled, inferred time.Time // the input tensor filled; the model run
	t.m.watch.Begin(instance, start)
	t.m.running.Add(int64(len(jobs)))
	defer t.m.running.Add(-int64(len(jobs)))
	var span trace.Span
	if tr := t.m.tracer; tr != nil {
		span = batchSpan(tr, t.m, instance, len(jobs), start, func(yield func(trace.SpanContext) bool) {
			for _, j := range jobs {
				if !yield(j.st.span) {
					return
				}
			}
		})
	}
	defer func() {
		end := time.Now()
		t.m.watch.End(instance, end.Sub(start), err == nil)
		var bsc trace.SpanContext
		if span != nil {
			endBatchSpan(span, end, err)
			bsc = span.SpanContext()
		}
		var input, infer time.Duration
		if err == nil {
			input, infer = filled.Sub(start), inferred.Sub(filled)
			t.m.stats.Batch(len(jobs), input, infer, end.Sub(inferred))
		}
		for _, j := range jobs {
			j.st.runStart, j.st.runEnd, j.st.batch, j.st.batchSpan = start, end, len(jobs), bsc
			j.st.runInput, j.st.runInfer = input, infer
		}
	}()
	r := t.runners[instance]
	for i, j := range jobs {
		if j.px == nil {
			copy(r.Input(i), j.row)
			continue
		}
		if err := t.codec.expand(r.Input(i), j.px); err != nil {
			return err
		}
	}
	filled = time.Now()
	var outs [][]float32
	err = t.threads.CPUBound(func() (err error) {
		outs, err = r.Run(len(jobs))
		return err
	})
	if err != nil {
		return err
	}
	inferred = time.Now()
	for k, out := range outs {
		size := t.m.outputs[k].Size()
		if size == 0 {
			// A dynamic output (a model with NMS built in): n equal parts, each the length
			// this run gave; the jobs' slices grow to it.
			if len(out)%len(jobs) != 0 {
				return fmt.Errorf("output %q holds %d values, not %d equal parts", t.m.outputs[k].Name, len(out), len(jobs))
			}
			size = len(out) / len(jobs)
			for i, j := range jobs {
				j.outs[k] = append(j.outs[k][:0], out[i*size:(i+1)*size]...)
			}
			continue
		}
		if len(out) != size*len(jobs) {
			return fmt.Errorf("output %q holds %d values; %d samples of %d expected", t.m.outputs[k].Name, len(out), len(jobs), size)
		}
		for i, j := range jobs {
			copy(j.outs[k], out[i*size:(i+1)*size])
		}
	}
	return nil
}

func (t *typedModel[T]) samples(n int, images bool) sampleSet {
	s := t.sets.Get().(*samplesOf[T])
	s.pool = &t.jobs
	if images {
		s.pool = &t.images
	}
	for range n {
		j := s.pool.Get().(*job[T])
		j.st, j.geo = sampleStage{}, preprocess.Geometry{}
		s.jobs = append(s.jobs, j)
	}
	return s
}

func (t *typedModel[T]) predict(priority int) (time.Duration, bool) { return t.b.Predict(priority) }

func (t *typedModel[T]) predictWait(priority int) (time.Duration, bool) {
	return t.b.PredictWait(priority)
}

func (t *typedModel[T]) warm() error {
	for i, r := range t.runners {
		// The watchdog watches warm-up runs too (bounded by server.watchdog.max_run: the
		// model has no typical run time yet), and takes their time as the first typical one.
		start := time.Now()
		t.m.watch.Begin(i, start)
		_, err := r.Run(t.m.maxBatch)
		t.m.watch.End(i, time.Since(start), err == nil)
		if err != nil {
			return fmt.Errorf("instance %d: %w", i, err)
		}
	}
	return nil
}
func (t *typedModel[T]) queueLen() int                   { return t.b.QueueLen() }
func (t *typedModel[T]) adaptiveCap() int                { return t.b.Stats().AdaptiveCap }
func (t *typedModel[T]) close(ctx context.Context) error { return t.b.Close(ctx) }

// samplesOf is a request's samples for a model of element type T (pooled).
type samplesOf[T Elem] struct {
	t    *typedModel[T]
	pool *sync.Pool // where jobs came from
	jobs []*job[T]
	errs []error
}

func (s *samplesOf[T]) len() int { return len(s.jobs) }

func (s *samplesOf[T]) decode(ctx context.Context, i int, img []byte) error {
	j, pre := s.jobs[i], s.t.m.pre
	if s.t.m.task.task == TaskDetect {
		// A detector's boxes are mapped back to the image with where it went in the input.
		var err error
		if j.px != nil {
			j.geo, err = pre.ProcessUint8Geometry(ctx, img, j.px)
		} else {
			j.geo, err = s.t.codec.geometry(ctx, img, j.row)
		}
		return err
	}
	if j.px != nil {
		return pre.ProcessUint8Context(ctx, img, j.px)
	}
	return s.t.codec.decode(ctx, img, j.row)
}

func (s *samplesOf[T]) tensorJSON(data []byte) error {
	return wire.FillJSON(s.rows(), data)
}

func (s *samplesOf[T]) tensorBinary(raw []byte) error {
	return wire.FillBinary(s.rows(), raw)
}

func (s *samplesOf[T]) rows() [][]T {
	rows := make([][]T, len(s.jobs))
	for i, j := range s.jobs {
		rows[i] = j.row
	}
	return rows
}

func (s *samplesOf[T]) submit(ctx context.Context, priority int, span trace.SpanContext) error {
	b, opts := s.t.b, batcher.SubmitOptions{Priority: priority}
	now := time.Now()
	for _, j := range s.jobs {
		j.st = sampleStage{submitted: now, span: span}
	}
	if len(s.jobs) == 1 {
		_, err := b.Submit(ctx, s.jobs[0], opts)
		return err
	}
	// The samples are submitted together so that they can share a batch; the first failure
	// cancels the others (the request fails as a whole).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.errs = append(s.errs[:0], make([]error, len(s.jobs))...)
	var wg sync.WaitGroup
	for i, j := range s.jobs {
		wg.Go(func() {
			if _, s.errs[i] = b.Submit(ctx, j, opts); s.errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	var first error
	for _, err := range s.errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return first
}

func (s *samplesOf[T]) output(i, k int) []float32 { return s.jobs[i].outs[k] }

func (s *samplesOf[T]) stage(i int) *sampleStage { return &s.jobs[i].st }

func (s *samplesOf[T]) geometry(i int) preprocess.Geometry { return s.jobs[i].geo }

// maxDynamicKeep bounds the values a pooled job keeps for its dynamic outputs.
const maxDynamicKeep = 1 << 16

func (s *samplesOf[T]) release() {
	for i, j := range s.jobs {
		s.jobs[i] = nil
		if s.t.dynamicTooLarge(j) {
			continue // one run made it large: left to the collector
		}
		s.pool.Put(j)
	}
	s.pool = nil
	s.jobs = s.jobs[:0]
	clear(s.errs)
	s.errs = s.errs[:0]
	s.t.sets.Put(s)
}

// sameOutputs reports whether two runners' outputs are alike: names and per-sample shapes.
func sameOutputs(a, b []Output) bool {
	return slices.EqualFunc(a, b, func(x, y Output) bool { return x.Name == y.Name && slices.Equal(x.Shape, y.Shape) })
}

// versionNumber orders versions: numeric ones by value, others after them by name.
func versionNumber(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

func versionLess(a, b string) bool {
	na, oka := versionNumber(a)
	nb, okb := versionNumber(b)
	switch {
	case oka && okb:
		return na < nb
	case oka != okb:
		return oka
	}
	return a < b
}
