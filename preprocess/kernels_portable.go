//go:build !(goexperiment.simd && amd64)

package preprocess

// ResamplerKernels names the resampler's kernels this process runs (for gateway -version).
func ResamplerKernels() string { return "portable (built without GOEXPERIMENT=simd on amd64)" }
