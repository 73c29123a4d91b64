//go:build !unix

package loadtest

import "time"

type cpuTimes struct{ user, sys time.Duration }

// readCPU is not implemented on this platform; CPU use reads as zero.
func readCPU() cpuTimes { return cpuTimes{} }

func (c cpuTimes) sub(o cpuTimes) cpuTimes { return cpuTimes{c.user - o.user, c.sys - o.sys} }
