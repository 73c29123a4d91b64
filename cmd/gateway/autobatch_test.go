package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/runtime/ort"
)

// The rule on curves of known shape: the run limit, the floor of 2 where a run of 2 fits, the
// preferred sizes.
func TestChooseBatch(t *testing.T) {
	ms := time.Millisecond
	curve := func(runs ...time.Duration) ort.BatchCurve {
		var c ort.BatchCurve
		for i, r := range runs {
			c.Points = append(c.Points, ort.BatchPoint{Batch: 1 << i, Run: r, Samples: 3})
		}
		return c
	}
	for _, c := range []struct {
		curve     ort.BatchCurve
		limit     time.Duration
		preferred []int
		want      int
	}{
		{curve(2*ms, 4*ms, 8*ms), 25 * ms, nil, 2},                // flat: 1, raised to 2
		{curve(2*ms, 4*ms, 8*ms, 18*ms), 25 * ms, nil, 2},         // rising
		{curve(3*ms, 5*ms, 8*ms, 14*ms, 26*ms), 25 * ms, nil, 8},  // falling to 16, which runs over the limit
		{curve(3*ms, 5*ms, 8*ms, 14*ms, 26*ms), 0, nil, 16},       // no limit
		{curve(20*ms, 40*ms), 25 * ms, nil, 1},                    // a run of 2 does not fit
		{curve(30 * ms), 25 * ms, nil, 1},                         // nor one of 1: 1 all the same
		{curve(2*ms, 4*ms, 8*ms), 25 * ms, []int{4}, 4},           // at least the largest preferred size
		{curve(3*ms, 5*ms, 8*ms, 14*ms), 25 * ms, []int{2, 4}, 8}, // the curve's choice when larger
	} {
		if got := chooseBatch(c.limit, c.preferred)(c.curve); got != c.want {
			t.Errorf("%s, limit %s, preferred %v: %d, want %d", c.curve, c.limit, c.preferred, got, c.want)
		}
	}
	for yaml, want := range map[string]time.Duration{
		"{}":                     25 * ms, // half the adaptive window's 50 ms
		"{queue_target: 30ms}":   15 * ms,
		"{max_queue_delay: 2ms}": 50 * ms, // a fixed window: half the queue target's 100 ms
		"{queue_target: 1s, adaptive: {latency_target: 200ms}}": 100 * ms,
	} {
		cfg, err := configs.Parse([]byte("models: [{name: m, path: m.onnx, batching: "+yaml+"}]\n"), "/")
		if err != nil {
			t.Fatal(err)
		}
		if got := runLimit(cfg.Models[0].Batching); got != want {
			t.Errorf("%s: run limit %s, want %s", yaml, got, want)
		}
	}
	// The configuration's documentation states the rule's numbers.
	doc, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("within %.0f %% of the lowest time per image", 100*ort.ChoiceTolerance), "at most half of queue_target",
		fmt.Sprintf("at least %d where a run of %d fits", autoFloor, autoFloor)} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/configuration.md does not say %q", s)
		}
	}
}
