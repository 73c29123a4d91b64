package main

import "testing"

// TestGCPercentFor: GOGC keeps 16 MiB of headroom above a small live heap, stays at 25 above
// 64 MiB live, and is bounded.
func TestGCPercentFor(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, gcPercentMax},
		{1 * mb, gcPercentMax}, // 1600 % would be the headroom; bounded
		{2 * mb, gcPercentMax},
		{4 * mb, 400},
		{8 * mb, 200},
		{16 * mb, 100},
		{30 * mb, 54},
		{64 * mb, 25},
		{500 * mb, 25},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("live %d MiB: GOGC %d, want %d", c.live/mb, got, c.want)
		}
		if c.live >= 4*mb && c.live <= 64*mb {
			if room := c.live * uint64(gcPercentFor(c.live)) / 100; room < gcHeadroom {
				t.Errorf("live %d MiB: headroom %d MiB", c.live/mb, room/mb)
			}
		}
	}
}
