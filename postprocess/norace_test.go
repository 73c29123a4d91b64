//go:build !race

package postprocess_test

const raceEnabled = false
