//go:build !linux

package gateway

// BulkThread does nothing here (no per-thread niceness).
func BulkThread() {}

// bulkRun runs f on the caller's thread here.
func bulkRun(f func() error) error { return cpuBound(f) }
