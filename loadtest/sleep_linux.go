//go:build linux

package loadtest

import (
	"runtime"
	"syscall"
	"time"
)

// lockPacerThread pins the calling goroutine to its OS thread and lowers
// that thread's timer slack to 1µs, so nanosleep wakes within tens of
// microseconds. The goroutine must exit without unlocking: the runtime then
// discards the thread together with its changed slack.
func lockPacerThread() {
	runtime.LockOSThread()
	const prSetTimerSlack = 29
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1000, 0)
}

// sleepShort sleeps for d with the thread's timer precision. Go's own
// timers wake up to a millisecond late (the netpoller waits in whole
// milliseconds), which would show as client-side latency in open loop.
func sleepShort(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
