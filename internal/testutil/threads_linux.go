//go:build linux

package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ThreadNices counts the threads of process pid (0: this one) by niceness, from field 19 of
// /proc/PID/task/TID/stat (counted after the command name's closing parenthesis). Threads that
// end while it reads are left out.
func ThreadNices(pid int) (map[int]int, error) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	stats, err := filepath.Glob(dir + "/*/stat")
	if err != nil || len(stats) == 0 {
		return nil, fmt.Errorf("no threads under %s: %v", dir, err)
	}
	nices := map[int]int{}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		n, err := strconv.Atoi(fields[16]) // field 19: state is field 3, the first here
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		nices[n]++
	}
	return nices, nil
}
