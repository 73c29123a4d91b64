//go:build goexperiment.simd && amd64

package preprocess

// ResamplerKernels names the resampler's kernels this process runs (for gateway -version).
func ResamplerKernels() string {
	if hasAVX2 {
		return "AVX2"
	}
	return "portable (this CPU has no AVX2)"
}
