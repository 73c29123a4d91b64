package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The gateway's garbage collection policy. The heap is mostly pooled request buffers (bodies,
// images, tensor rows) reused from request to request, so little is allocated while the pools
// hold enough of them, and Go's default (GOGC 100) lets the heap grow to twice what is live
// before collecting: peak RSS over the benchmark's sequence of runs at c=50 was 160-192 MB with
// GOGC 100 and 144-159 with 25, for the same throughput. So GOGC is gcPercent.
//
// But a GC also empties the pools (sync.Pool keeps its buffers for one more cycle at most), and
// with a small live heap, GOGC 25 leaves little room before the next one: at c=8 on the
// article's payload the live heap was 8 MB, the gateway ran 54 GCs a second (one per 2 MB
// allocated), the pools were emptied before their buffers came back, every request allocated
// its 300-600 KB buffers anew, and throughput fell to 158-162 req/s, against 211-246 with GOGC
// 100 (2 interleaved rounds each). So GOGC is raised while the live heap is small, to keep at
// least gcHeadroom between the live heap and the next GC: at c=50 (25-30 MB live) that changes
// little; at low concurrency the heap stays small anyway.
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
// whichever of the two comes first. (It turned the policy off, and pods ran at GOGC 100:
// peak RSS 140 MB against 125 without it in the same run.)
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
