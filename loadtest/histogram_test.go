package loadtest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistogramQuantilesMatchSortedSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, tc := range []struct {
		name string
		gen  func() int64
	}{
		{"lognormal-ms", func() int64 { return int64(math.Exp(rng.NormFloat64()*1.2) * 2e6) }},
		{"uniform-us", func() int64 { return rng.Int64N(5000) }},
		{"bimodal", func() int64 {
			if rng.IntN(10) == 0 {
				return 1e9 + rng.Int64N(1e8)
			}
			return 1e6 + rng.Int64N(1e5)
		}},
		{"tiny", func() int64 { return rng.Int64N(300) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistogram()
			vals := make([]int64, 20000)
			var sum float64
			for i := range vals {
				vals[i] = tc.gen()
				h.Record(vals[i])
				sum += float64(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
				rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
				want := vals[rank-1]
				got := h.Quantile(q)
				if rel := math.Abs(float64(got-want)) / math.Max(float64(want), 1); rel > 0.01 && math.Abs(float64(got-want)) > 1 {
					t.Errorf("q=%v: got %d, want %d (rel err %.4f > 1%%)", q, got, want, rel)
				}
			}
			if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] {
				t.Errorf("min/max = %d/%d, want %d/%d", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
			}
			if h.Count() != uint64(len(vals)) {
				t.Errorf("count = %d", h.Count())
			}
			if math.Abs(h.Mean()-sum/float64(len(vals))) > 1e-6*sum/float64(len(vals)) {
				t.Errorf("mean = %v, want %v", h.Mean(), sum/float64(len(vals)))
			}
		})
	}
}

func TestHistogramBucketsAreContiguousAndNarrow(t *testing.T) {
	prevHi := int64(0)
	for i := range histBuckets {
		lo, hi := bucketBounds(i)
		if lo != prevHi {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi <= lo || (lo >= histSubCount && float64(hi-lo)/float64(lo) > 1.0/histSubCount+1e-12) {
			t.Fatalf("bucket %d [%d,%d) too wide", i, lo, hi)
		}
		if bucketIndex(lo) != i || bucketIndex(hi-1) != i {
			t.Fatalf("bucket %d [%d,%d): index of bounds = %d, %d", i, lo, hi, bucketIndex(lo), bucketIndex(hi-1))
		}
		prevHi = hi
	}
	if bucketIndex(math.MaxInt64) != histBuckets-1 || bucketIndex(-5) != 0 {
		t.Fatal("out-of-range values must clamp")
	}
}

func TestHistogramMergeAndReset(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := int64(1); i <= 1000; i++ {
		v := i * 12345
		all.Record(v)
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(b)
	a.Merge(NewHistogram())
	for _, q := range []float64{0.5, 0.99} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Errorf("merged q%v = %d, want %d", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if a.Count() != 1000 || a.Min() != 12345 || a.Max() != 1000*12345 {
		t.Errorf("merged count/min/max = %d/%d/%d", a.Count(), a.Min(), a.Max())
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 || a.Min() != 0 || a.Max() != 0 || a.Mean() != 0 {
		t.Error("reset histogram not empty")
	}
}

func TestHistogramRecordDoesNotAllocateOnceWarm(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v < 1<<40; v *= 2 {
		h.Record(v) // touch every octave once
	}
	v := int64(1)
	if n := testing.AllocsPerRun(1000, func() { v = v*3 + 1; h.Record(v % 1e10) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := NewHistogram()
	b.ReportAllocs()
	v := int64(12345)
	for b.Loop() {
		v = (v*1103515245 + 12345) & (1<<34 - 1)
		h.Record(v)
	}
}

func BenchmarkHistogramQuantile(b *testing.B) {
	h := NewHistogram()
	for i := range int64(100000) {
		h.Record(i * 997)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Quantile(0.99)
	}
}
