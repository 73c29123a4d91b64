//go:build !cgo

package testutil

import "unsafe"

// CHeapInUse cannot read the C heap without cgo: -1.
func CHeapInUse() int64 { return -1 }

// CHeapProbe is nil without cgo.
func CHeapProbe() unsafe.Pointer { return nil }
