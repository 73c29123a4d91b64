//go:build !unix

package ort

import (
	"io"
	"os"
)

// mapFile reads size bytes of f (mmap_unix.go maps them).
func mapFile(f *os.File, size int) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(f, b)
	return b, err
}

func unmapFile([]byte) error { return nil }
