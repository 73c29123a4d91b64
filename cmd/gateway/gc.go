package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The gateway's garbage collection policy (the figures: docs/internals.md, "The GC policy").
// The heap is mostly pooled request buffers (bodies, images, tensor rows) reused from request
// to request, so little is allocated while the pools hold enough of them, and Go's default
// (GOGC 100) lets the heap grow to twice what is live before collecting: a lower GOGC lowers
// peak RSS for the same throughput. So GOGC is gcPercent.
//
// But a GC also empties the pools (sync.Pool keeps its buffers for one more cycle at most), and
// with a small live heap a low GOGC leaves little room before the next one: the pools are
// emptied before their buffers come back, every request allocates its buffers anew, and
// throughput falls. So GOGC is raised while the live heap is small, to keep at least
// gcHeadroom between the live heap and the next GC; with a large live heap it stays gcPercent.
const (
	gcPercent    = 25
	gcHeadroom   = 16 << 20
	gcPercentMax = 400
	gcInterval   = 100 * time.Millisecond
)

// Between two readings GOGC is stale: a GC that ends while the live heap has just grown sets
// its next goal with the GOGC chosen for a smaller heap, until the next reading lowers it. The
// excess is what the server allocates in one gcInterval (tens of MB at hundreds of requests a
// second), and gcPercentMax bounds the goal at 5x what is live even then.

// gcPercentFor is the GOGC that keeps gcHeadroom above a live heap of live bytes.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return gcPercentMax
	}
	p := int(min((uint64(gcHeadroom)*100+live-1)/live, gcPercentMax)) // rounded up
	return max(p, gcPercent)
}

// setGC applies the policy unless the environment sets GOGC: GOGC follows gcPercentFor, read
// from the runtime's live-heap metric every gcInterval. A GOMEMLIMIT in the environment (the
// manifests set one below the container's limit) still applies on top: Go collects at
// whichever of the two comes first (it used to turn the policy off, and pods ran at GOGC 100).
func setGC(log *slog.Logger) {
	if os.Getenv("GOGC") != "" {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	cur := gcPercentFor(live())
	debug.SetGCPercent(cur)
	log.Debug("GOGC", "percent", cur)
	go func() {
		for range time.Tick(gcInterval) {
			// Only a change of more than a tenth is applied: SetGCPercent recomputes the
			// pacer, which is cheap but not free.
			if p := gcPercentFor(live()); p*10 > cur*11 || p*11 < cur*10 {
				cur = p
				debug.SetGCPercent(cur)
			}
		}
	}()
}
