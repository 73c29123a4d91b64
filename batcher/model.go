package batcher

import "time"

// serviceModel fits the run time of a batch of n items as a + b·n by
// exponentially weighted least squares over the observed (n, duration) pairs
// of successful runs. Each observation moves the running means of n, d, n²
// and n·d by the factor alpha towards the new sample; the first observation
// sets them. It is not safe for concurrent use (the Batcher guards it).
type serviceModel struct {
	alpha            float64
	mn, md, mnn, mnd float64 // weighted means of n, d, n², n·d (d in ns)
	a, b             float64 // fitted intercept and slope, ns and ns/item
	samples          int
	hasGap           bool
	gap              float64 // weighted mean inter-arrival gap, ns
	lastArrival      time.Time
	gapCap           float64 // each gap sample is capped at this (ns)
}

// observe adds one successful run of n items that took d.
func (m *serviceModel) observe(n int, d time.Duration) {
	x, y := float64(n), float64(d)
	if m.samples == 0 {
		m.mn, m.md, m.mnn, m.mnd = x, y, x*x, x*y
	} else {
		a := m.alpha
		m.mn += a * (x - m.mn)
		m.md += a * (y - m.md)
		m.mnn += a * (x*x - m.mnn)
		m.mnd += a * (x*y - m.mnd)
	}
	if m.samples < 1<<30 {
		m.samples++
	}
	m.fit()
}

func (m *serviceModel) fit() {
	varN := m.mnn - m.mn*m.mn
	if varN > 1e-6*(1+m.mn*m.mn) {
		m.b = (m.mnd - m.mn*m.md) / varN
		m.a = m.md - m.b*m.mn
	} else {
		// Only one batch size seen: the split between fixed and per-item
		// cost is unknown; assume the cost is proportional to the size.
		m.a, m.b = 0, m.md/m.mn
	}
	if m.b < 0 { // a larger batch never costs less
		m.a, m.b = m.md, 0
	}
	if m.a < 0 {
		m.a, m.b = 0, m.md/m.mn
	}
}

// predict returns the expected run time of a batch of n items, 0 before the
// first observation.
func (m *serviceModel) predict(n int) time.Duration {
	if m.samples == 0 {
		return 0
	}
	return time.Duration(m.a + m.b*float64(n))
}

// arrival records an accepted item at now and updates the mean gap.
func (m *serviceModel) arrival(now time.Time) {
	if !m.lastArrival.IsZero() {
		g := float64(now.Sub(m.lastArrival))
		if g > m.gapCap {
			g = m.gapCap
		}
		if g < 0 {
			g = 0
		}
		if !m.hasGap {
			m.gap, m.hasGap = g, true
		} else {
			m.gap += m.alpha * (g - m.gap)
		}
	}
	m.lastArrival = now
}

// meanGap returns the expected time to the next arrival; before two arrivals
// have been seen it is gapCap (no evidence that more items will come).
func (m *serviceModel) meanGap() time.Duration {
	if !m.hasGap {
		return time.Duration(m.gapCap)
	}
	return time.Duration(m.gap)
}
