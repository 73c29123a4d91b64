//go:build goexperiment.simd && amd64

package preprocess

import "github.com/imagegate/imagegate/preprocess/internal/resample"

// ResamplerKernels names the resampler's kernels this process runs (for gateway -version).
func ResamplerKernels() string {
	if resample.Vector() {
		return "AVX2"
	}
	return "portable (this CPU has no AVX2)"
}
