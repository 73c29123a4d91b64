//go:build linux

package gateway

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkNoServerThreads fails unless every thread of the process is back at niceness 0 (the
// threads a Server set nicer end with it; a locked thread ends right after its goroutine).
func checkNoServerThreads(t *testing.T) {
	t.Helper()
	var nicer map[int]int
	for i := range 200 {
		nicer = map[int]int{}
		stats, _ := filepath.Glob("/proc/self/task/*/stat")
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			s := string(b)
			// Field 19, niceness, counted after the command name's closing parenthesis.
			if n, err := strconv.Atoi(strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[16]); err == nil && n != 0 {
				nicer[n]++
			}
		}
		if len(nicer) == 0 {
			return
		}
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Errorf("threads left at a niceness other than 0 (niceness: count): %v", nicer)
}
