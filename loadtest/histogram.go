package loadtest

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values below 2^histSubBits are counted exactly; above,
// every power of two is split into 2^histSubBits equal buckets, so a bucket
// is never wider than 1/128 (0.78 %) of its lower bound and the midpoint we
// report is within 0.4 % of any value that fell into it.
const (
	histSubBits  = 7
	histSubCount = 1 << histSubBits
	// histMaxBits bounds the recorded range: values at or above 2^histMaxBits
	// nanoseconds (about 137 s) are clamped into the last bucket; Max still
	// reports the exact largest value.
	histMaxBits = 37
	histOctaves = histMaxBits - histSubBits + 1
	histBuckets = histOctaves * histSubCount
)

// Histogram is a log-linear (HDR-style) histogram of non-negative durations
// in nanoseconds with a relative error of at most 1 % (0.4 % in practice).
// Record is O(1); it allocates 1 KiB the first time a value falls into a
// new power of two, and never after. The zero value is not usable; call
// NewHistogram. A Histogram is not safe for concurrent use.
type Histogram struct {
	// octaves[i] holds buckets i*histSubCount ... (i+1)*histSubCount-1,
	// allocated on first use: latencies usually span a few octaves, so a
	// per-second histogram costs a few KiB rather than 31.
	octaves [histOctaves]*[histSubCount]uint64
	total   uint64
	sum     float64 // nanoseconds; float so long runs cannot overflow
	min     int64
	max     int64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{min: math.MaxInt64}
}

func (h *Histogram) inc(i int, n uint64) {
	o := h.octaves[i/histSubCount]
	if o == nil {
		o = new([histSubCount]uint64)
		h.octaves[i/histSubCount] = o
	}
	o[i%histSubCount] += n
}

func bucketIndex(v int64) int {
	if v < histSubCount {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // position of the top bit, >= histSubBits
	if e >= histMaxBits {
		return histBuckets - 1
	}
	mant := int(uint64(v)>>(e-histSubBits)) & (histSubCount - 1)
	return (e-histSubBits+1)*histSubCount + mant
}

// bucketBounds returns the half-open range [lo, hi) of values in bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < histSubCount {
		return int64(i), int64(i) + 1
	}
	e := i/histSubCount + histSubBits - 1
	mant := int64(i % histSubCount)
	width := int64(1) << (e - histSubBits)
	lo = int64(1)<<e + mant*width
	return lo, lo + width
}

// Record adds one value (nanoseconds). Negative values count as zero.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.inc(bucketIndex(v), 1)
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// RecordDuration adds one duration.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Merge adds all values of o into h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for oi, oc := range o.octaves {
		if oc == nil {
			continue
		}
		for j, c := range oc {
			if c != 0 {
				h.inc(oi*histSubCount+j, c)
			}
		}
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Max returns the exact largest recorded value, 0 when empty.
func (h *Histogram) Max() int64 { return h.max }

// Min returns the exact smallest recorded value, 0 when empty.
func (h *Histogram) Min() int64 {
	if h.total == 0 {
		return 0
	}
	return h.min
}

// Mean returns the exact mean of the recorded values, 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return 0
	}
	return h.sum / float64(h.total)
}

// Quantile returns the value at quantile q in [0, 1] using the nearest-rank
// definition (the smallest recorded value with at least q·N values at or
// below it), reported as its bucket's midpoint and clamped to [Min, Max].
// It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	rank = min(rank, h.total)
	var seen uint64
	for oi, oc := range h.octaves {
		if oc == nil {
			continue
		}
		for j, c := range oc {
			seen += c
			if seen >= rank {
				lo, hi := bucketBounds(oi*histSubCount + j)
				v := lo + (hi-lo-1)/2
				return min(max(v, h.min), h.max)
			}
		}
	}
	return h.max
}

// Buckets calls fn for every non-empty bucket in increasing order with the
// bucket's value range [lo, hi) and its count.
func (h *Histogram) Buckets(fn func(lo, hi int64, count uint64)) {
	for oi, oc := range h.octaves {
		if oc == nil {
			continue
		}
		for j, c := range oc {
			if c != 0 {
				lo, hi := bucketBounds(oi*histSubCount + j)
				fn(lo, hi, c)
			}
		}
	}
}

// Reset empties the histogram, keeping its memory.
func (h *Histogram) Reset() {
	for _, oc := range h.octaves {
		if oc != nil {
			clear(oc[:])
		}
	}
	h.total, h.sum, h.min, h.max = 0, 0, math.MaxInt64, 0
}
