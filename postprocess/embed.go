package postprocess

import "math"

// L2Normalize scales v in place to unit Euclidean length (the sum of squares in float64) and
// reports whether it could: a vector of zeros, or one holding NaN or an infinity, is left as it
// is and false is returned (the caller answers it as the model gave it, or refuses it).
func L2Normalize(v []float32) bool {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if !(ss > 0) || math.IsInf(ss, 0) {
		return false
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return true
}

// Cosine is the cosine similarity of two vectors of the same length (float64 sums); 0 when
// either is all zeros.
func Cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range min(len(a), len(b)) {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
