//go:build !linux

package gateway

// ModelThread does nothing here (no per-thread niceness).
func ModelThread() {}

// bulkRun runs f on the caller's thread here.
func bulkRun(f func() error) error { return cpuBound(f) }
