//go:build !(goexperiment.simd && amd64)

package preprocess

// Without Go's experimental SIMD package (GOEXPERIMENT=simd on amd64), the
// portable kernels run: hpass3's unrolled loops, vrow and emitPlane.

// simdResampler tells which implementation of the passes runs.
const simdResampler = false

func hpass3Vec(dst, in []uint8, bpp int, c *coeffs, xoff int) bool { return false }

func (p *Preprocessor) vemit(out sink, y, c, ch int, first []uint8, stride int, k []int32) bool {
	return false
}

func (p *Preprocessor) expandVec(d []float32, s []uint8, c int) int { return 0 }

// vectorKernels would turn the vector kernels off; there are none in this build.
var vectorKernels = true
