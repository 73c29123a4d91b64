//go:build linux

package gateway

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cpuSlice is the scheduler slice a CPU-bound stretch (an image decode, a model run) asks for.
//
// Linux's EEVDF scheduler (6.12 and later) lets a thread choose its slice, without privileges
// (sched_setattr's sched_runtime for SCHED_NORMAL; the default is 0.7 ms scaled by the CPU
// count, 1.4 ms on 2 CPUs). Its weight, so its share of the CPUs, does not change; a longer
// slice puts its virtual deadline further out, so that a thread waking with the default slice
// preempts it at once instead of waiting for its slice to run out. Those threads are the ones
// that accept connections, refuse requests, answer probes and write answers, and the clients
// on the same machine. With 2 CPUs saturated by decodes and model runs (4x overload, the
// shipped config), refusals took 17.8-21.2 ms at p99 seen by the client; with this and
// GOMAXPROCS above the CPU count (cmd/gateway), 7.7-9.3 ms (docs/reliability.md). Older
// kernels ignore the attribute.
const cpuSlice = 5 * time.Millisecond

// sliceOK turns false when the kernel (or a seccomp profile) refuses sched_setattr.
var sliceOK atomic.Bool

func init() { sliceOK.Store(true) }

// setSlice sets the calling thread's slice to d (0: the default), keeping its policy and its
// niceness (sched_setattr sets both: a zero Nice field made a bulk thread's niceness 0 again).
func setSlice(d time.Duration) bool {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return false
	}
	a.Size, a.Runtime = uint32(unsafe.Sizeof(unix.SchedAttr{})), uint64(d)
	return unix.SchedSetAttr(0, a, 0) == nil
}

// cpuBound runs f, a CPU-bound stretch, on its thread with the slice cpuSlice, and gives the
// thread back with the default slice.
func cpuBound(f func() error) error {
	if !sliceOK.Load() {
		return f()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !setSlice(cpuSlice) {
		sliceOK.Store(false)
		return f()
	}
	defer setSlice(0) // 0: the default slice
	return f()
}
