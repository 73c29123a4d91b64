//go:build race

package loadtest

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts are meaningless under it.
const raceEnabled = true
