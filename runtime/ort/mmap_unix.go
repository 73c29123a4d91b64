//go:build unix

package ort

import (
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only: ONNX Runtime and the rewrite read a cache entry or a
// model through the page cache, without a private copy of each page (each fresh page costs).
func mapFile(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }
