//go:build linux

package gateway

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// heavyNice is the scheduling niceness of a heavy image's decode (seconds of CPU for a huge
// canvas): when it competes for the CPUs with ordinary requests, they go first.
const heavyNice = 10

// atLowPriority runs f on an OS thread of its own at niceness heavyNice and returns its error.
// The thread ends with f: a thread made nicer cannot be made less nice again without
// privileges, so it is not returned to the pool of threads that run ordinary work.
func atLowPriority(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), heavyNice)
		done <- f()
	}()
	return <-done
}
