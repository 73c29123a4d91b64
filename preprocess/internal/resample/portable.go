//go:build !(goexperiment.simd && amd64)

package resample

// Without Go's experimental SIMD package (GOEXPERIMENT=simd on amd64), the
// portable kernels run: HPass3's unrolled loops, VRow and VRowF32.

// simdResampler tells which implementation of the passes runs.
const simdResampler = false

// Vector reports whether the AVX2 kernels run: never in this build.
func Vector() bool { return false }

func hpass3Vec(dst, in []uint8, bpp int, c *Coeffs, xoff int) bool { return false }

// VRowF32Vec writes nothing here.
func VRowF32Vec(d []float32, first []uint8, stride int, k []int32, raw bool, mean, std float32, lut *[256]float32) bool {
	return false
}

// VRowU8Vec writes nothing here.
func VRowU8Vec(d, first []uint8, stride int, k []int32) bool { return false }

// ExpandVec writes nothing here.
func ExpandVec(d []float32, s []uint8, raw bool, mean, std float32) int { return 0 }
