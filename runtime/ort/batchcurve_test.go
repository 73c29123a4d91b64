package ort

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeModel is a curveRunner whose runs cost cost(n) of a fake clock, and whose memory grows by
// perRow for each row of the largest batch it ran.
type fakeModel struct {
	cost   func(n int) time.Duration
	perRow int64
	fail   int // a run of this many rows fails

	elapsed time.Duration
	rows    int // buffers' rows
	ran     int // the largest batch run
	runs    map[int]int
	grows   []int
	seq     []int // every run's size, in order
}

func (f *fakeModel) grow(n int) error {
	if n <= f.rows {
		return errors.New("grow to fewer rows")
	}
	f.rows = n
	f.grows = append(f.grows, n)
	return nil
}

func (f *fakeModel) run(n int) error {
	if n > f.rows {
		return errors.New("run of more rows than grown")
	}
	if n == f.fail {
		return errors.New("boom")
	}
	f.elapsed += f.cost(n)
	f.ran = max(f.ran, n)
	if f.runs == nil {
		f.runs = map[int]int{}
	}
	f.runs[n]++
	f.seq = append(f.seq, n)
	return nil
}

func (f *fakeModel) env() curveEnv {
	t0 := time.Unix(1e9, 0)
	return curveEnv{
		clock: func() time.Duration { return f.elapsed },
		now:   func() time.Time { return t0.Add(f.elapsed) },
		rss:   func() int64 { return 100<<20 + f.perRow*int64(f.ran) },
	}
}

func measureFake(t *testing.T, f *fakeModel, o CurveOptions) BatchCurve {
	t.Helper()
	c, err := measureCurve(f, o, f.env())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func batches(c BatchCurve) []int {
	var out []int
	for _, p := range c.Points {
		out = append(out, p.Batch)
	}
	return out
}

func perImage(ms ...float64) func(int) time.Duration {
	return func(n int) time.Duration {
		k := 0
		for 1<<k < n {
			k++
		}
		return time.Duration(float64(n) * ms[min(k, len(ms)-1)] * float64(time.Millisecond))
	}
}

// A curve measured on fakes: where each measurement stops, what it chooses.
func TestMeasureCurveStops(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		cost    func(int) time.Duration
		perRow  int64
		o       CurveOptions
		stop    string
		batches []int
		choose  int
	}{
		// A CPU where a batch costs as much per image: three doublings gain nothing.
		{"flat", perImage(1.50, 1.49, 1.51, 1.48, 1.6), 0, CurveOptions{Ceiling: 64}, StopFlat, []int{1, 2, 4, 8}, 1},
		// Falling to 8, then rising past 25 % above the best.
		// (Zen 4's figures, issue 37: 2.40 at 4 is within 5 % of 2.30 at 8.)
		{"rising", perImage(2.72, 2.60, 2.40, 2.30, 2.60, 3.25), 0, CurveOptions{Ceiling: 64}, StopRising, []int{1, 2, 4, 8, 16, 32}, 4},
		// A device: a fixed cost per run, falling per image up to the ceiling (not a power of 2).
		{"ceiling", func(n int) time.Duration { return 4*ms + time.Duration(n)*50*time.Microsecond }, 0, CurveOptions{Ceiling: 48}, StopCeiling,
			[]int{1, 2, 4, 8, 16, 32, 48}, 48},
		// Another under a run limit of 4 ms: 32 (5.2 ms) is measured and not allowed.
		{"run limit", func(n int) time.Duration { return 2*ms + time.Duration(n)*100*time.Microsecond }, 0, CurveOptions{Ceiling: 256, RunLimit: 4 * ms}, StopRunLimit,
			[]int{1, 2, 4, 8, 16, 32}, 16},
		// 10 MiB per row, a bound of 100 MiB: 8 rows grew it by 80, 16 would by 160.
		{"memory", func(n int) time.Duration { return ms + time.Duration(n)*100*time.Microsecond }, 10 << 20, CurveOptions{Ceiling: 256, Memory: 100 << 20}, StopMemory,
			[]int{1, 2, 4, 8}, 8},
		// A run of one image longer than the limit: 1, unmeasured beyond.
		{"slow", perImage(200), 0, CurveOptions{Ceiling: 64, RunLimit: 50 * ms}, StopRunLimit, []int{1}, 1},
		// A model whose batch axis allows 1.
		{"ceiling 1", perImage(1), 0, CurveOptions{Ceiling: 1}, StopCeiling, []int{1}, 1},
		// A time budget of 250 ms and runs of 40 ms per image: 1 (3 runs), 2 (3 runs), then out of time.
		{"budget", perImage(40, 30, 20), 0, CurveOptions{Ceiling: 64, Budget: 250 * ms}, StopBudget, []int{1, 2}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeModel{cost: c.cost, perRow: c.perRow}
			curve := measureFake(t, f, c.o)
			if curve.Stop != c.stop || !equalInts(batches(curve), c.batches) {
				t.Fatalf("stop %q at %v, want %q at %v (%s)", curve.Stop, batches(curve), c.stop, c.batches, curve)
			}
			if got := curve.Choose(c.o.RunLimit); got != c.choose {
				t.Errorf("chose %d, want %d (%s)", got, c.choose, curve)
			}
			if !equalInts(f.grows, c.batches) {
				t.Errorf("grew to %v, want %v", f.grows, c.batches)
			}
			for _, p := range curve.Points {
				if want := c.cost(p.Batch); p.Run != want {
					t.Errorf("batch %d: run %s, want %s", p.Batch, p.Run, want)
				}
				if p.Samples < 1 || p.Samples != f.runs[p.Batch]-curveWarmRuns {
					t.Errorf("batch %d: %d samples of %d runs", p.Batch, p.Samples, f.runs[p.Batch])
				}
			}
			// Past the budget: the size begun (two untimed runs and one timed), or the
			// rounds' minimum within twice the budget, and a sample begun.
			budget := cmpDuration(c.o.Budget, DefaultCurveBudget)
			if over := curve.Took - 2*budget; over > 3*c.cost(c.batches[len(c.batches)-1])+curveSample {
				t.Errorf("took %s, budget %s", curve.Took, budget)
			}
		})
	}
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A disturbance on one run does not move the curve: the rounds interleave the sizes and each
// keeps its lower quartile.
func TestMeasureCurveMedianOfRounds(t *testing.T) {
	n := 0
	f := &fakeModel{cost: func(b int) time.Duration {
		n++
		if n == curveWarmRuns+1+curveWarmRuns+1 { // batch 2's first timed run, slowed down
			return 50 * time.Millisecond
		}
		return time.Duration(b) * time.Millisecond
	}}
	curve := measureFake(t, f, CurveOptions{Ceiling: 64})
	for _, p := range curve.Points {
		if p.Run != time.Duration(p.Batch)*time.Millisecond || p.Samples < curveMinRounds+1 {
			t.Errorf("batch %d: run %s over %d samples", p.Batch, p.Run, p.Samples)
		}
	}
	if curve.Took > DefaultCurveBudget+curveSample+50*time.Millisecond {
		t.Errorf("took %s", curve.Took)
	}
	// Exploration: 1, 2, 4, 8 (flat), each 3 runs, 2 once more (its slow run looked like a
	// rise); then rounds ascending, descending, ..., each size run for 5 ms by its lower quartile
	// so far (5, 2, 1, 1 runs; 2 once in the first round, its quartile then 14 ms).
	want := []int{1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8, 1, 1, 1, 1, 1, 2, 4, 8, 8, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2}
	if len(f.seq) < len(want) || !equalInts(f.seq[:len(want)], want) {
		t.Errorf("runs %v..., want %v...", f.seq[:min(len(f.seq), len(want))], want)
	}
}

// A run of 1 that fails fails the measurement (and the model); a larger one ends it, keeping
// the sizes below.
func TestMeasureCurveRunError(t *testing.T) {
	f := &fakeModel{cost: perImage(1), fail: 1}
	if _, err := measureCurve(f, CurveOptions{Ceiling: 64}, f.env()); err == nil || !strings.Contains(err.Error(), "run of 1 rows: boom") {
		t.Errorf("a run of 1 failing: err = %v", err)
	}
	f = &fakeModel{cost: perImage(3, 2, 1), fail: 4}
	c := measureFake(t, f, CurveOptions{Ceiling: 64})
	if c.Stop != StopRunFailed || !equalInts(batches(c), []int{1, 2}) || !strings.Contains(c.Failure, "run of 4 rows: boom") || c.Choose(0) != 2 {
		t.Errorf("a run of 4 failing: %+v", c)
	}
}

// The rule: the smallest size within ChoiceTolerance of the lowest time per image among those
// the run limit allows.
func TestChoose(t *testing.T) {
	ms := time.Millisecond
	pts := func(runs ...time.Duration) BatchCurve {
		var c BatchCurve
		for i, r := range runs {
			c.Points = append(c.Points, BatchPoint{Batch: 1 << i, Run: r, Samples: 3})
		}
		return c
	}
	for _, c := range []struct {
		curve BatchCurve
		limit time.Duration
		want  int
	}{
		{pts(10*ms, 19*ms, 36*ms, 64*ms), 0, 8},                      // 10, 9.5, 9, 8 per image
		{pts(10*ms, 19*ms, 36*ms, 64*ms), 40 * ms, 4},                // 8 runs 64 ms
		{pts(10*ms, 19*ms, 36*ms, 71*ms), 0, 4},                      // 9 at 4 is within 5 % of 8.875 at 8
		{pts(10*ms, 20*ms, 40*ms, 80*ms), 0, 1},                      // flat: the smallest
		{pts(10*ms, 20*ms, 39*ms, 80*ms), 0, 1},                      // 9.75 per image at 4: within 5 % of it
		{pts(10*ms, 20*ms, 38*ms, 80*ms), 0, 4},                      // 9.5 at 4: 10 is not within 5 %
		{pts(10*ms, 20*ms, 38600*time.Microsecond, 80*ms), 0, 1},     // 9.65 at 4: 10 is within 5 % (not 3 %)
		{pts(100*ms, 150*ms, 200*ms), 50 * ms, 1},                    // nothing within the limit: 1
		{pts(10*ms, 12*ms, 14*ms, 16*ms), 13 * ms, 2},                // 4 and 8 over the limit
		{BatchCurve{}, 0, 1},                                         // nothing measured
		{pts(10*ms, 18*ms, 36*ms, 76*ms), 40 * ms, 2},                // 9 at 2 and 4: the smaller
		{pts(10*ms, 18*ms, 35*ms, 76*ms), 40 * ms, 2},                // 8.75 at 4: 9 within 5 %
		{pts(10*ms, 18*ms, 34*ms, 76*ms), 40 * ms, 4},                // 8.5 at 4: 9 not within 5 %
		{pts(10*ms, 18*ms, 34*ms, 76*ms), -1 * ms, 4},                // a negative limit is none
		{pts(10*ms, 30*ms, 60*ms, 120*ms), 0, 1},                     // rising
		{pts(10*ms, 9*ms, 60*ms, 120*ms), 5 * ms, 1},                 // only 1 within the limit (it always is)
		{pts(10*ms, 9*ms, 60*ms, 120*ms), 9 * ms, 2},                 // 2 runs exactly at the limit
		{pts(3*ms, 4*ms, 8*ms, 16*ms, 32*ms), 0, 2},                  // 2 ms per image at 2 and beyond
		{pts(3*ms, 4*ms, 8*ms, 16*ms, 31500*time.Microsecond), 0, 2}, // 2 is within 5 % of 1.97 at 16
		{pts(3*ms, 4*ms, 8*ms, 16*ms, 30*ms), 0, 16},                 // 1.875: 2 is not within 5 %
		{pts(3*ms, 4*ms, 8*ms, 16*ms, 30*ms), 29 * ms, 2},            // 16 over the limit
	} {
		if got := c.curve.Choose(c.limit); got != c.want {
			t.Errorf("%s, limit %s: chose %d, want %d", c.curve, c.limit, got, c.want)
		}
	}
}

func TestCurveString(t *testing.T) {
	c := BatchCurve{Points: []BatchPoint{{1, 1473456 * time.Nanosecond, 3}, {2, 2 * 1449999 * time.Nanosecond, 3}, {4, 4 * 312345 * time.Nanosecond, 3}},
		Clock: ClockThreadCPU, Stop: StopFlat}
	if got, want := c.String(), "1:1.47ms 2:1.45ms 4:312µs per image (thread_cpu, flat)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestLowQuartile(t *testing.T) {
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{{nil, 0}, {[]time.Duration{7}, 7}, {[]time.Duration{9, 1}, 3}, {[]time.Duration{5, 1, 9, 3, 7}, 3}, {[]time.Duration{50, 2, 2, 2, 2, 2}, 2}} {
		if got := lowQuartile(c.in); got != c.want {
			t.Errorf("lowQuartile(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
