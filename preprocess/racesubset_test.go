package preprocess

// raceStride: under the race detector, the long single-goroutine comparisons (every PNG
// variant against image/png, every hostile variant after a valid image, ...) run one case in
// raceStride. The detector finds nothing in a loop that shares no memory between goroutines and
// only slows it down (TestPNGStreamMatchesFullDecode took 129 s with it, 4 s without, on a
// 2-core Xeon; the package's race run took ten minutes), and make test runs this package once
// more without it, every case. The concurrent tests (TestHostileAcrossGoroutines,
// TestConcurrent) keep every case under the detector.
const raceStride = 8

// raceSkips reports whether case k (counted from 0 by the caller) is left out of a race run.
func raceSkips(k int) bool { return raceEnabled && k%raceStride != 0 }
