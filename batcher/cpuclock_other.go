//go:build !linux

package batcher

import "time"

// ThreadCPUClock returns nil outside Linux: the batcher then measures runs in wall time.
func ThreadCPUClock() func() time.Duration { return nil }
