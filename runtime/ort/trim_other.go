//go:build !linux

package ort

func trimHeap() {}

// LimitMallocArenas does nothing here (glibc's malloc arenas; see trim_linux.go).
func LimitMallocArenas() {}
