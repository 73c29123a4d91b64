//go:build linux

package gateway

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPUClock returns the CPU time consumed by the calling OS thread. The batcher uses it
// to measure what a single-threaded ONNX Runtime run costs, undisturbed by preemption.
func threadCPUClock() func() time.Duration {
	return func() time.Duration {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
}
