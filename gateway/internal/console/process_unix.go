//go:build unix

package console

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// ReadProcess returns the process's CPU time (user and system, seconds) and its resident
// memory (bytes; 0 where /proc/self/statm is not there): what the live view shows of the
// process, read without the whole process exposition (dozens of /proc files).
func ReadProcess() (cpuSeconds, residentBytes float64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpuSeconds = float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := bytes.Fields(b); len(f) > 1 {
			if pages, err := strconv.ParseUint(string(f[1]), 10, 64); err == nil {
				residentBytes = float64(pages) * float64(os.Getpagesize())
			}
		}
	}
	return cpuSeconds, residentBytes
}
