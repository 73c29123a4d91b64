package main

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/runtime/ort"
)

// max_batch_size: auto. The model's first session measures its batch curve (or reads it from
// runtime.cache_dir: runtime/ort's NewSessionAuto), and the cap is chosen from it here:
//
//   - a size is allowed when one run of it takes at most half the queue target (and half the
//     adaptive window's latency target when it is on): a request that arrives as a batch of
//     the cap starts waits for that run, then for its own batch's, and both must fit the
//     target the queue is held to; batch 1 is always allowed;
//   - among the allowed sizes, the smallest whose time per image is within ort.ChoiceTolerance
//     of the lowest (BatchCurve.Choose);
//   - then at least 2 where a run of 2 is allowed, so that a request may carry 2 images as
//     it did before auto (max_batch_size x instances bounds a request; under the adaptive
//     window the cap is an upper bound, and the window forms 2 only when it measures 2 as
//     cheaper per image), and at least the largest of preferred_batch_sizes;
//   - at most max_queue_size (a batch forms from the queue).
//
// The measurement may grow the process's memory by server.max_inflight_bytes at most.

// autoFloor is the least batch size auto chooses where the run limit allows it.
const autoFloor = 2

// batchChoice is how a model version's max_batch_size was chosen by measurement.
type batchChoice struct {
	chosen int
	limit  time.Duration
	curve  ort.BatchCurve
}

// curveOptions are the measurement's bounds for model m.
func curveOptions(m configs.Model, server configs.Server) ort.CurveOptions {
	ceiling := m.Batching.MaxQueueSize
	if len(m.Batching.PreferredBatchSizes) > 0 {
		ceiling = max(ceiling, slices.Max(m.Batching.PreferredBatchSizes))
	}
	return ort.CurveOptions{
		Ceiling:  min(ceiling, configs.MaxBatchSize),
		RunLimit: runLimit(m.Batching),
		Memory:   int64(server.MaxInflightBytes),
	}
}

// runLimit is the longest run a chosen batch size may take: half of the queue target, and of
// the adaptive window's latency target when it is on (0: no limit).
func runLimit(b configs.Batching) time.Duration {
	limit := b.QueueTarget.D()
	if t := b.Adaptive.LatencyTarget.D(); t > 0 && (limit == 0 || t < limit) {
		limit = t
	}
	return limit / 2
}

// chooseBatch is the rule above, for a model with these preferred batch sizes.
func chooseBatch(limit time.Duration, preferred []int) func(ort.BatchCurve) int {
	return func(c ort.BatchCurve) int {
		n := c.Choose(limit)
		if n < autoFloor {
			for _, p := range c.Points {
				if p.Batch == autoFloor && (limit <= 0 || p.Run <= limit) {
					n = autoFloor
				}
			}
		}
		if len(preferred) > 0 {
			n = max(n, slices.Max(preferred))
		}
		return n
	}
}

// autoSession makes the first session of a model whose max_batch_size is auto, and says how
// its size was chosen.
func autoSession[T ort.Elem](cfg ort.SessionConfig, m configs.Model, server configs.Server) (*ort.Session[T], *batchChoice, error) {
	o := curveOptions(m, server)
	s, curve, err := ort.NewSessionAuto[T](cfg, o, chooseBatch(o.RunLimit, m.Batching.PreferredBatchSizes))
	if err != nil {
		return nil, nil, err
	}
	return s, &batchChoice{chosen: s.MaxBatchSize(), limit: o.RunLimit, curve: curve}, nil
}

// report says the choice: a log line with the curve, the model's configuration parameters
// (GET /v2/models/{m}/config) and its metrics.
func (c *batchChoice) report(mo *gateway.ModelOptions, log *slog.Logger, version string) {
	mo.Batching.MaxBatchSize = c.chosen
	how := "measured in " + c.curve.Took.Round(time.Millisecond).String()
	if c.curve.Cached {
		how = "measured by an earlier start (runtime.cache_dir)"
	}
	if mo.Parameters == nil {
		mo.Parameters = map[string]string{}
	}
	src := "default"
	if _, s, ok := strings.Cut(mo.Parameters["batching.max_batch_size"], " ("); ok { // "auto (yaml)"
		src = strings.TrimSuffix(s, ")")
	}
	mo.Parameters["batching.max_batch_size"] = fmt.Sprintf("%d (%s: auto, %s)", c.chosen, src, how)
	mo.Parameters["batching.batch_curve"] = c.describe()
	for _, p := range c.curve.Points {
		mo.BatchCurve = append(mo.BatchCurve, gateway.BatchCost{Batch: p.Batch, PerImage: p.PerImage()})
	}
	args := []any{"model", mo.Name, "version", version, "max_batch_size", c.chosen, "configured", "auto", "curve", c.curve.String(),
		"run_limit", c.limit}
	if c.curve.Cached {
		args = append(args, "cached", true)
	} else {
		args = append(args, "measured_in", c.curve.Took.Round(time.Millisecond))
	}
	log.Info("batch size chosen", args...)
}

// describe is the curve and the rule as the configuration endpoint shows them.
func (c *batchChoice) describe() string {
	limit := "none"
	if c.limit > 0 {
		limit = c.limit.String()
	}
	return fmt.Sprintf("%s; run limit %s; chosen: the smallest size within %.0f %% of the lowest time per image, at least %d", c.curve, limit, 100*ort.ChoiceTolerance, autoFloor)
}

// printChoice makes model version m's first session as a start would, reading the batch curve
// from runtime.cache_dir or measuring it, closes it, and says what max_batch_size: auto chose
// (-print-config keeps auto in the YAML it prints, and says this beside it).
func printChoice(m configs.Model, server configs.Server) (string, error) {
	m.Runtime.Instances = 1
	var release func()
	var c *batchChoice
	var err error
	switch m.Input.Type {
	case "float32":
		_, release, c, err = sessions[float32](m, server)
	case "uint8":
		_, release, c, err = sessions[uint8](m, server)
	default:
		return "", fmt.Errorf("%s.input.type: %s inputs are not served", m.Field(), m.Input.Type)
	}
	if err != nil {
		return "", err
	}
	release()
	return fmt.Sprintf("max_batch_size: auto is %d on this machine: %s", c.chosen, c.describe()), nil
}
