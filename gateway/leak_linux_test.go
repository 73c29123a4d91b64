//go:build linux

package gateway

import (
	"testing"
	"time"

	"github.com/imagegate/imagegate/internal/testutil"
)

// checkNoServerThreads fails unless every thread of the process is back at niceness 0 (the
// threads a Server set nicer end with it; a locked thread ends right after its goroutine).
func checkNoServerThreads(t *testing.T) {
	t.Helper()
	var nicer map[int]int
	for range 200 {
		nices, err := testutil.ThreadNices(0)
		if err != nil {
			t.Fatal(err)
		}
		delete(nices, 0)
		if nicer = nices; len(nicer) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("threads left at a niceness other than 0 (niceness: count): %v", nicer)
}
