package batcher

import "math/bits"

// efficiency learns, in adaptive mode, which batch sizes give the lowest run time per item,
// so that the adaptive window does not build batches larger than the hardware rewards. On a
// GPU or a large model the fixed cost of a run dominates and bigger batches are cheaper per
// item; on a small CPU the opposite can hold (activations of a large batch fall out of the
// caches; docs/internals.md, "Batch sizes on a CPU"), and a linear fit a + b·n cannot tell.
//
// Batch sizes are grouped in power-of-two classes: class k holds sizes in (2^(k-1), 2^k].
// Each class keeps an exponentially weighted mean of run time per item. The cap is the upper
// bound of the largest measured class whose mean is within capTolerance of the best measured
// class (MaxBatchSize before any measurement). Exploration forms a batch of a neighbouring
// class on purpose: the best class's smaller neighbour when it was never measured, else the
// class just above the cap (the window may wait for it to fill); every other batch while such a
// neighbour was never measured, else once every exploreEvery batches, so the cap follows
// changes (a larger batch becoming worth it, or no longer).
type efficiency struct {
	max       int       // MaxBatchSize
	perItem   []float64 // per class: weighted mean ns per item
	samples   []int     // per class: observations
	alpha     float64   // weight of a new observation
	sinceProb int       // batches since the last exploration above the cap
}

const (
	capTolerance = 0.05
	exploreEvery = 16
)

func newEfficiency(maxBatch int, alpha float64) efficiency {
	n := sizeClass(maxBatch) + 1
	return efficiency{max: maxBatch, perItem: make([]float64, n), samples: make([]int, n), alpha: alpha}
}

// sizeClass returns the class of batch size n >= 1: 0 for 1, 1 for 2, 2 for 3..4, 3 for 5..8 …
func sizeClass(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// classTop is the largest size of class k, bounded by max.
func (e *efficiency) classTop(k int) int {
	return min(1<<k, e.max)
}

func (e *efficiency) observe(n int, ns float64) {
	capK, kb := e.capClass()
	k := sizeClass(n)
	v := ns / float64(n)
	if e.samples[k] == 0 {
		e.perItem[k] = v
	} else {
		e.perItem[k] += e.alpha * (v - e.perItem[k])
	}
	e.samples[k]++
	if k > capK || kb >= 0 && k < kb {
		e.sinceProb = 0 // an exploration (or a batch that served as one)
	} else {
		e.sinceProb++
	}
}

// limit returns the largest batch to form now: a size to explore when an exploration is due,
// else the cap. It does not change e: a batch counts as an exploration when observed.
func (e *efficiency) limit() int {
	capK, kb := e.capClass()
	down := kb > 0 && e.samples[kb-1] == 0 // the best class's smaller neighbour is unmeasured
	up := capK+1 < len(e.samples)
	every := exploreEvery
	if down || up && e.samples[capK+1] == 0 {
		every = 2 // unmeasured neighbours are explored quickly
	}
	if kb >= 0 && e.sinceProb >= every {
		switch {
		case down:
			return e.classTop(kb - 1)
		case up:
			// The window may wait for the larger batch to fill, within the latency target.
			return e.classTop(capK + 1)
		}
	}
	return e.classTop(capK)
}

// capClass returns the cap's class, the largest measured class whose cost per item is within
// capTolerance of the best measured class, and that best class (-1 and the largest class
// when nothing is measured yet).
func (e *efficiency) capClass() (capK, best int) {
	best = -1
	for k, s := range e.samples {
		if s > 0 && (best < 0 || e.perItem[k] < e.perItem[best]) {
			best = k
		}
	}
	if best < 0 {
		return len(e.samples) - 1, -1
	}
	capK = best
	for k := best + 1; k < len(e.samples); k++ {
		if e.samples[k] > 0 && e.perItem[k] <= e.perItem[best]*(1+capTolerance) {
			capK = k
		}
	}
	return capK, best
}

// worthWaiting reports whether waiting for n queued items to grow towards m is expected to
// lower the run time per item by more than capTolerance; unmeasured sizes count as worth it
// (the window then decides, within the latency target, and the wait measures them).
// Within one class the fitted S(n) = a + b·n (model) compares the two sizes instead.
func (e *efficiency) worthWaiting(n, m int, model *serviceModel) bool {
	kn, km := sizeClass(n), sizeClass(m)
	if kn == km {
		if model.samples == 0 {
			return true
		}
		perN := float64(model.predict(n)) / float64(n)
		perM := float64(model.predict(m)) / float64(m)
		return perM < perN*(1-capTolerance)
	}
	if e.samples[kn] == 0 || e.samples[km] == 0 {
		return true
	}
	return e.perItem[km] < e.perItem[kn]*(1-capTolerance)
}

// cap reports the current cap (for Stats).
func (e *efficiency) cap() int {
	k, _ := e.capClass()
	return e.classTop(k)
}
