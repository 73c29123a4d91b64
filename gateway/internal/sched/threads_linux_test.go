//go:build linux

package sched

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/imagegate/imagegate/internal/testutil"
)

func threadNice(t *testing.T) int {
	t.Helper()
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	return 20 - p // the raw syscall returns 20 - nice
}

func threadSlice(t *testing.T) time.Duration {
	t.Helper()
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Skipf("sched_getattr: %v", err)
	}
	return time.Duration(a.Runtime)
}

// processNices counts this process's threads by niceness.
func processNices(t *testing.T) map[int]int {
	t.Helper()
	nices, err := testutil.ThreadNices(0)
	if err != nil {
		t.Fatal(err)
	}
	return nices
}

// TestDecodeNicesItsThreadsForGood: a decode runs on a thread at niceness decodeNice with the
// slice cpuSlice, and keeps that niceness decode after decode; the caller's thread is not
// touched; a panic comes back to the caller. Close then ends every decode thread.
func TestDecodeNicesItsThreadsForGood(t *testing.T) {
	th := New()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := threadNice(t)
	for i := range 5 {
		var nice int
		slice := -1
		err := th.Decode(func() error {
			nice = threadNice(t)
			if th.slice.Load() {
				slice = int(threadSlice(t))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if nice != decodeNice {
			t.Fatalf("decode %d ran at niceness %d, want %d", i, nice, decodeNice)
		}
		if th.slice.Load() && slice != int(cpuSlice) {
			t.Fatalf("decode %d ran with the slice %d, want %v", i, slice, cpuSlice)
		}
	}
	if got := threadNice(t); got != caller {
		t.Fatalf("the caller's niceness went from %d to %d", caller, got)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the decode's panic", p)
			}
		}()
		th.Decode(func() error { panic("boom") })
	}()
	if n := processNices(t)[decodeNice]; n < 1 {
		t.Fatalf("no thread at niceness %d before Close", decodeNice)
	}
	th.Close()
	// A locked thread ends right after its goroutine; Close waited for the goroutines.
	for i := 0; processNices(t)[decodeNice] > 0; i++ {
		if i == 1000 {
			t.Fatalf("threads left at niceness %d after Close: %v", decodeNice, processNices(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A decode after Close still runs, on a thread that ends after it.
	if err := th.Decode(func() error { return fmt.Errorf("after close") }); err == nil || err.Error() != "after close" {
		t.Fatalf("decode after Close: %v", err)
	}
	if len(th.idle) != 0 {
		t.Fatal("a thread was kept after Close")
	}
}

// TestHeavyAndModelThreads: a heavy decode runs at heavyNice on a thread that ends with it; a
// model thread is at modelNice.
func TestHeavyAndModelThreads(t *testing.T) {
	th := New()
	defer th.Close()
	var nice int
	if err := th.Heavy(func() error { nice = threadNice(t); return nil }); err != nil || nice != heavyNice {
		t.Fatalf("heavy decode at niceness %d (err %v), want %d", nice, err, heavyNice)
	}
	done := make(chan int)
	th.ModelLoop(func() { done <- threadNice(t) })
	if n := <-done; n != modelNice {
		t.Fatalf("model thread at niceness %d, want %d", n, modelNice)
	}
}

// TestCPUBoundSlice: a CPU-bound stretch runs with the slice cpuSlice and its thread goes
// back to the default slice afterwards (it goes on running other goroutines).
func TestCPUBoundSlice(t *testing.T) {
	th := New()
	defer th.Close()
	runtime.LockOSThread() // the same thread before, during and after CPUBound
	defer runtime.UnlockOSThread()
	before := threadSlice(t)
	if before == cpuSlice {
		t.Fatalf("the thread has the slice %v before CPUBound", before)
	}
	var during time.Duration
	if err := th.CPUBound(func() error { during = threadSlice(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if !th.slice.Load() {
		t.Skip("the kernel refuses sched_setattr: CPUBound runs without a slice of its own")
	}
	if during != cpuSlice && during == before {
		t.Skipf("the kernel (%s) keeps no slice per thread: sched_getattr reports %v", kernel(), during)
	}
	if during != cpuSlice {
		t.Errorf("slice during CPUBound: %v, want %v", during, cpuSlice)
	}
	if after := threadSlice(t); after != before {
		t.Errorf("slice after CPUBound: %v, want the default %v", after, before)
	}
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
