//go:build !(goexperiment.simd && amd64)

package wire

// Without Go's experimental SIMD package (GOEXPERIMENT=simd on amd64), str's word loop
// scans JSON strings alone.

// plainPrefix finds nothing here.
func plainPrefix(b []byte) int { return 0 }
