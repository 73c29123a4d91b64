//go:build linux

package gateway

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threadSlice(t *testing.T) time.Duration {
	t.Helper()
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Skipf("sched_getattr: %v", err)
	}
	return time.Duration(a.Runtime)
}

// TestCPUBoundSlice: a CPU-bound stretch runs with the slice cpuSlice and its thread goes
// back to the default slice afterwards (it goes on running other goroutines).
func TestCPUBoundSlice(t *testing.T) {
	runtime.LockOSThread() // the same thread before, during and after cpuBound
	defer runtime.UnlockOSThread()
	before := threadSlice(t)
	if before == cpuSlice {
		t.Fatalf("the thread has the slice %v before cpuBound", before)
	}
	var during time.Duration
	if err := cpuBound(func() error { during = threadSlice(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if !sliceOK.Load() {
		t.Skip("the kernel refuses sched_setattr: cpuBound runs without a slice of its own")
	}
	if during != cpuSlice && during == before {
		t.Skipf("the kernel (%s) keeps no slice per thread: sched_getattr reports %v", kernel(), during)
	}
	if during != cpuSlice {
		t.Errorf("slice during cpuBound: %v, want %v", during, cpuSlice)
	}
	if after := threadSlice(t); after != before {
		t.Errorf("slice after cpuBound: %v, want the default %v", after, before)
	}
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
