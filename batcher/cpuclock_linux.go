//go:build linux

package batcher

import (
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPUClock returns a Config.CostClock reading the CPU time consumed by the calling OS
// thread (CLOCK_THREAD_CPUTIME_ID): what a single-threaded run on the batch loop's own thread
// costs, undisturbed by preemption. It returns nil where no such clock exists.
func ThreadCPUClock() func() time.Duration {
	return func() time.Duration {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
}
