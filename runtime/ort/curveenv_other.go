//go:build !linux

package ort

import "time"

// threadCPU is not available here: batch curves are timed by the wall clock.
func threadCPU() time.Duration { return 0 }

const threadCPUClock = false

// residentBytes is unknown here: a batch curve's measurement is bounded by time alone.
func residentBytes() int64 { return -1 }
