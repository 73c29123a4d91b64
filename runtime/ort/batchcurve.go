package ort

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The batch curve: a model's run time per image at batch sizes 1, 2, 4, ... on the machine it
// runs on, with its runtime settings, from which the gateway chooses max_batch_size: auto.
// Whether a batch is cheaper per image depends on the CPU (or GPU), the model and ONNX
// Runtime's kernels: on one 2-core machine it hardly falls, on another it falls by a sixth up to
// 8 and rises beyond, and a GPU rewards far larger batches (docs/benchmarks.md). So it is
// measured, not assumed, and kept in the model cache's folder (curvecache.go) so that a later
// start with the same model, ONNX Runtime, settings and machine reads it instead.
//
// The measurement (measureCurve) runs the sizes in increasing order, each first twice untimed
// (ONNX Runtime's first two runs of a shape allocate and plan its memory: 3 to 7 times slower
// than the next ones here), then once timed, and stops growing at the first of: the ceiling (what the model's batch axis and the configuration
// allow); a run longer than the run limit (larger ones are not allowed either); the memory the
// next size would add to the process beyond its bound; a run that fails (a device out of
// memory: the sizes below it are kept); a time per image 25 % above the best
// (the curve has turned up); three doublings without a gain beyond the tolerance (it is flat);
// the time budget. Then it measures the sizes again in interleaved rounds, in alternating
// order, until the budget is spent (at least three rounds within twice the budget), so that a
// disturbance (another process, a frequency change) spreads over every size rather than
// falling on one, and keeps each size's lower quartile: what other processes do
// to a run (take its CPU's caches, its core's other hyperthread) only adds time, so the fast
// runs are the model's own cost, and a quartile rather than the fastest run is not one lucky
// reading.

// BatchPoint is one batch size's measured run.
type BatchPoint struct {
	Batch int `json:"batch"`
	// Run is the time of one run of Batch images (by the curve's clock): the lower quartile of
	// its runs' times.
	Run time.Duration `json:"run_ns"`
	// Samples is how many runs were timed.
	Samples int `json:"samples"`
}

// PerImage is the run's time per image.
func (p BatchPoint) PerImage() time.Duration { return p.Run / time.Duration(p.Batch) }

// Clocks a curve is measured by.
const (
	// ClockThreadCPU: the CPU time of the thread that calls Run, where ONNX Runtime runs the
	// whole model on it (the CPU provider with one intra-op thread): what a run costs, without
	// the time other processes took the CPU from it.
	ClockThreadCPU = "thread_cpu"
	// ClockWall: wall time (more threads, or a device).
	ClockWall = "wall"
)

// Why a curve's measurement measured no larger size (BatchCurve.Stop).
const (
	StopCeiling   = "ceiling"    // the largest size allowed was measured
	StopRunLimit  = "run_limit"  // the last size's run took longer than the run limit
	StopMemory    = "memory"     // the next size would have grown the process beyond its bound
	StopRising    = "rising"     // the last size cost 25 % more per image than the best
	StopFlat      = "flat"       // three doublings past the best gained nothing beyond the tolerance
	StopBudget    = "budget"     // the time budget was spent
	StopRunFailed = "run_failed" // a run of the next size failed (BatchCurve.Failure says how)
)

// BatchCurve is a model's measured run time by batch size on this machine.
type BatchCurve struct {
	// Points are the sizes measured, in increasing order, the first of them 1.
	Points []BatchPoint `json:"points"`
	// Clock is ClockThreadCPU or ClockWall.
	Clock string `json:"clock"`
	// Stop says why no larger size was measured (Stop* constants).
	Stop string `json:"stop"`
	// Failure is ONNX Runtime's error for the size that could not run (Stop run_failed).
	Failure string `json:"failure,omitempty"`
	// Took is the measurement's wall time, its session's creation included.
	Took time.Duration `json:"took_ns"`
	// Cached: read from the cache folder, measured by an earlier start.
	Cached bool `json:"-"`
}

// ChoiceTolerance is how much more per image than the best a size may cost and still be
// chosen when it is smaller (BatchCurve.Choose): the adaptive window's own (batcher's
// capTolerance), which treats batch sizes within it as equally efficient, so a finer cap would
// not change what it forms; and about what separated repeated measurements of the same nearly
// flat curve on a shared 2-core machine (docs/benchmarks.md, "Issue 37").
const ChoiceTolerance = 0.05

// Choose returns the batch size of lowest cost the run limit allows: among the sizes measured
// whose run takes at most limit (size 1 always qualifies; limit 0: no limit), the smallest
// whose time per image is within ChoiceTolerance of the lowest. The smallest, because between
// sizes that cost the same per image the smaller one costs less latency (a request waits for
// the run in progress, then its own) and less memory (ONNX Runtime keeps the working memory of
// the largest batch it ran); 1 for an empty curve.
func (c BatchCurve) Choose(limit time.Duration) int {
	allowed := make([]BatchPoint, 0, len(c.Points))
	for _, p := range c.Points {
		if p.Batch == 1 || limit <= 0 || p.Run <= limit {
			allowed = append(allowed, p)
		}
	}
	if len(allowed) == 0 {
		return 1
	}
	best := slices.MinFunc(allowed, func(a, b BatchPoint) int { return perImageCmp(a, b) }).PerImage()
	for _, p := range allowed {
		if float64(p.PerImage()) <= float64(best)*(1+ChoiceTolerance) {
			return p.Batch
		}
	}
	return allowed[0].Batch
}

func perImageCmp(a, b BatchPoint) int {
	// Run/Batch compared without the integer division's rounding: a.Run*b.Batch vs b.Run*a.Batch.
	x, y := float64(a.Run)*float64(b.Batch), float64(b.Run)*float64(a.Batch)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// String is the curve as the start-up log and the model's configuration show it:
// "1:1.47ms 2:1.45ms 4:1.52ms per image (thread_cpu, flat)".
func (c BatchCurve) String() string {
	parts := make([]string, len(c.Points))
	for i, p := range c.Points {
		parts[i] = fmt.Sprintf("%d:%s", p.Batch, roundDuration(p.PerImage()))
	}
	return fmt.Sprintf("%s per image (%s, %s)", strings.Join(parts, " "), c.Clock, c.Stop)
}

// roundDuration keeps three significant digits: 1.47ms, 312µs, 12.4ms.
func roundDuration(d time.Duration) time.Duration {
	for r := time.Duration(1); r < d; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d
}

// CurveOptions bound a batch curve's measurement. Every bound and the ceiling are part of the
// cached curve's key.
type CurveOptions struct {
	// Ceiling is the largest batch size measured (what the model's batch axis and the
	// configuration allow); sizes are 1, 2, 4, ... up to it, and it too. At least 1.
	Ceiling int
	// RunLimit: no size larger than the first whose run takes longer is measured (nor chosen).
	// 0: none.
	RunLimit time.Duration
	// Budget bounds the measurement's wall time, the first size's runs excepted (one untimed
	// and one timed run of batch 1 are always made). 0: DefaultCurveBudget.
	Budget time.Duration
	// Memory bounds how much the measurement may grow the process's resident memory (its
	// session's working memory and input rows): a size that would grow it further is not
	// measured. 0: no bound.
	Memory int64
}

// DefaultCurveBudget is the time a batch curve's measurement takes at most (CurveOptions.Budget):
// about as long as a start from an empty model cache takes without it.
const DefaultCurveBudget = time.Second

// Measurement constants.
const (
	curveRising     = 1.25                 // StopRising: this many times the best time per image
	curveFlat       = 8                    // StopFlat: this many times the best size
	curveWarmRuns   = 2                    // untimed runs of a size before it is timed
	curveMinRounds  = 3                    // rounds after the first pass, within twice the budget
	curveSample     = 5 * time.Millisecond // a round runs a size until it has run this long, at least once
	curveMaxRounds  = 12                   // rounds after the first pass
	curveMaxCeiling = 4096
)

// curveRunner is what a measurement drives: a model run over n input rows, with room for
// batches of up to n rows made first by grow (n grows only). The rows hold the warm-up input.
type curveRunner interface {
	grow(n int) error
	run(n int) error
}

// curveEnv is what a measurement reads: the clock that times a run (thread CPU or wall), the
// wall clock that bounds it, and the process's resident memory in bytes (-1: unknown).
type curveEnv struct {
	clock func() time.Duration
	now   func() time.Time
	rss   func() int64
}

// measureCurve measures r's batch curve (see the top of this file). An error of a run ends it.
func measureCurve(r curveRunner, o CurveOptions, env curveEnv) (BatchCurve, error) {
	m := &measurement{r: r, o: o, env: env, start: env.now(), samples: map[int][]time.Duration{}}
	budget := o.Budget
	if budget <= 0 {
		budget = DefaultCurveBudget
	}
	m.deadline = m.start.Add(budget)
	m.o.Ceiling = min(max(o.Ceiling, 1), curveMaxCeiling)
	stop, err := m.explore()
	if err != nil {
		return BatchCurve{}, err
	}
	if err := m.rounds(budget); err != nil {
		return BatchCurve{}, err
	}
	c := BatchCurve{Stop: stop, Failure: m.failure}
	for _, n := range m.sizes {
		c.Points = append(c.Points, BatchPoint{Batch: n, Run: lowQuartile(m.samples[n]), Samples: len(m.samples[n])})
	}
	c.Took = env.now().Sub(m.start)
	return c, nil
}

// measurement is one measureCurve's state.
type measurement struct {
	r               curveRunner
	o               CurveOptions
	env             curveEnv
	start, deadline time.Time
	sizes           []int                   // measured, in increasing order
	samples         map[int][]time.Duration // by size: each timed run's time
	failure         string                  // the error of the size that could not run (StopRunFailed)
}

func (m *measurement) time(n int) error {
	t := m.env.clock()
	if err := m.r.run(n); err != nil {
		return fmt.Errorf("ort: batch curve: run of %d rows: %w", n, err)
	}
	m.samples[n] = append(m.samples[n], m.env.clock()-t)
	return nil
}

// explore measures sizes 1, 2, 4, ... (two untimed runs, then one timed) until one of the
// stops (the top of this file), which it returns.
func (m *measurement) explore() (string, error) {
	base := m.env.rss()
	bestN, bestPer := 0, time.Duration(0)
	for n := 1; ; n = min(2*n, m.o.Ceiling) {
		if len(m.sizes) > 0 && m.o.Memory > 0 && base >= 0 {
			last := m.sizes[len(m.sizes)-1]
			if grown := m.env.rss() - base; grown > 0 && grown*int64(n)/int64(last) > m.o.Memory {
				return StopMemory, nil
			}
		}
		if err := m.first(n); err != nil {
			if n == 1 {
				return "", err
			}
			// A size the model cannot run here (out of memory on a device, say) ends the
			// measurement, not the model: the sizes below it ran.
			m.failure = err.Error()
			delete(m.samples, n)
			return StopRunFailed, nil
		}
		m.sizes = append(m.sizes, n)
		stop, improved := m.verdict(n, bestN, bestPer)
		if stop == StopRising || stop == StopRunLimit { // one slow run must not end it: once more
			if err := m.time(n); err != nil {
				return "", err
			}
			stop, improved = m.verdict(n, bestN, bestPer)
		}
		run := slices.Min(m.samples[n])
		if improved {
			bestN = n
		}
		if per := run / time.Duration(n); bestN == n || per < bestPer {
			bestPer = per
		}
		if stop != "" {
			return stop, nil
		}
	}
}

// first makes room for n rows and runs them: twice untimed, then once timed.
func (m *measurement) first(n int) error {
	if err := m.r.grow(n); err != nil {
		return fmt.Errorf("ort: batch curve: buffers of %d rows: %w", n, err)
	}
	for range curveWarmRuns {
		if err := m.r.run(n); err != nil {
			return fmt.Errorf("ort: batch curve: run of %d rows: %w", n, err)
		}
	}
	return m.time(n)
}

// verdict says whether the exploration stops after size n (its fastest run so far), given the
// best size so far (bestN 0: none), and whether n improves on it beyond the tolerance.
func (m *measurement) verdict(n, bestN int, bestPer time.Duration) (stop string, improved bool) {
	run := slices.Min(m.samples[n])
	per := run / time.Duration(n)
	switch {
	case bestN == 0 || float64(per) < float64(bestPer)*(1-ChoiceTolerance):
		improved = true
	case float64(per) > float64(bestPer)*curveRising:
		return StopRising, false
	case n >= curveFlat*bestN:
		return StopFlat, false
	}
	switch {
	case m.o.RunLimit > 0 && run > m.o.RunLimit:
		return StopRunLimit, improved
	case n >= m.o.Ceiling:
		return StopCeiling, improved
	case !m.env.now().Before(m.deadline):
		return StopBudget, improved
	}
	return "", improved
}

// rounds measures every size again, a sample of at least curveSample each, in rounds whose
// order alternates (a drift of the machine's speed then weighs on every size alike), until
// the deadline; at least curveMinRounds of them when they fit in twice the budget.
func (m *measurement) rounds(budget time.Duration) error {
	if len(m.sizes) < 2 {
		return nil
	}
	late := m.start.Add(2 * budget)
	for round := 0; round < curveMaxRounds; round++ {
		for i := range m.sizes {
			now := m.env.now()
			if !now.Before(m.deadline) && (round >= curveMinRounds || !now.Before(late)) {
				return nil
			}
			n := m.sizes[i]
			if round%2 == 1 {
				n = m.sizes[len(m.sizes)-1-i]
			}
			reps := max(1, int(curveSample/max(lowQuartile(m.samples[n]), time.Microsecond)))
			for range reps {
				if err := m.time(n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// lowQuartile is the lower quartile of ds (not modified): the value a quarter of the way from
// the fastest to the slowest, interpolated; 0 for none.
func lowQuartile(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pos := float64(len(s)-1) / 4
	i := int(pos)
	if i+1 >= len(s) {
		return s[i]
	}
	return s[i] + time.Duration((pos-float64(i))*float64(s[i+1]-s[i]))
}
