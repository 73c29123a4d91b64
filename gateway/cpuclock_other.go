//go:build !linux

package gateway

import "time"

// threadCPUClock is not available here: the batcher measures runs in wall time.
func threadCPUClock() func() time.Duration { return nil }
