//go:build linux

package gateway

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func threadNice(t *testing.T) int {
	t.Helper()
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	return 20 - p // the raw syscall returns 20 - nice
}

// TestBulkRunNicesItsThreadsForGood: a decode handed to bulkRun runs on a thread at niceness
// bulkNice with the slice cpuSlice, and keeps that niceness stretch after stretch (resetting
// the slice once set it back to 0); the caller's thread is not touched; a panic comes back
// to the caller.
func TestBulkRunNicesItsThreadsForGood(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := threadNice(t)
	for i := range 5 {
		var nice int
		slice := -1
		err := bulkRun(func() error {
			nice = threadNice(t)
			if sliceOK.Load() {
				slice = int(threadSlice(t))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if nice != bulkNice {
			t.Fatalf("stretch %d ran at niceness %d, want %d", i, nice, bulkNice)
		}
		if sliceOK.Load() && slice != int(cpuSlice) {
			t.Fatalf("stretch %d ran with the slice %d, want %v", i, slice, cpuSlice)
		}
	}
	if got := threadNice(t); got != caller {
		t.Fatalf("the caller's niceness went from %d to %d", caller, got)
	}
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want the stretch's panic", p)
		}
	}()
	bulkRun(func() error { panic("boom") })
}
