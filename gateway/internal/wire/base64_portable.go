//go:build !(goexperiment.simd && amd64)

package wire

// Without Go's experimental SIMD package (GOEXPERIMENT=simd on amd64),
// decodeStdBase64 runs its table loop alone.

// decodeStdBase64Vec decodes nothing here.
func decodeStdBase64Vec(dst, src []byte) (n int, ok bool) { return 0, true }
