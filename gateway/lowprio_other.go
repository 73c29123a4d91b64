//go:build !linux

package gateway

// atLowPriority runs f (no per-thread priority here).
func atLowPriority(f func() error) error { return f() }
