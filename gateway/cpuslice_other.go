//go:build !linux

package gateway

// cpuBound runs f (no per-thread scheduler slice here).
func cpuBound(f func() error) error { return f() }
