//go:build !linux

package loadtest

import (
	"runtime"
	"time"
)

func lockPacerThread() { runtime.LockOSThread() }

// sleepShort falls back to the runtime's timers (coarser on some systems).
func sleepShort(d time.Duration) { time.Sleep(d) }
