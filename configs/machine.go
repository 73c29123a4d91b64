package configs

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// CPUs is the number of CPUs the process may use: the container's CPU limit (cgroup quota,
// rounded up) where there is one, else the CPUs it may run on, as Go's default GOMAXPROCS
// counts them, read before cmd/gateway raises GOMAXPROCS (a package variable is set before
// main runs). runtime.NumCPU would count every CPU of the node. GOMAXPROCS in the environment
// sets it.
var CPUs = runtime.GOMAXPROCS(0)

// MemoryLimit returns the memory this process may use: the tightest limit of its cgroup and
// the cgroups above it (cgroup v2's memory.max, or v1's memory.limit_in_bytes, as container
// runtimes set them), at most the machine's total memory; else 4 GiB.
func MemoryLimit() int64 { return memoryLimit("/") }

// memoryLimit is MemoryLimit with the file system's root at root (tests use a tree of their
// own).
func memoryLimit(root string) int64 {
	read := func(path string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(root, path))
		return string(b), err == nil
	}
	limit := int64(0)
	if mi, ok := read("/proc/meminfo"); ok {
		for line := range strings.Lines(mi) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if v, err := strconv.ParseInt(f[0], 10, 64); err == nil && v > 0 {
						limit = v << 10
					}
				}
			}
		}
	}
	take := func(file string) {
		b, ok := read(file)
		if !ok {
			return
		}
		v, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64) // "max" (v2): no limit
		if err != nil || v <= 0 || v >= 1<<62 {                  // v1 says "no limit" with about 2^63
			return
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	// The cgroup's own limit and those of the cgroups above it (each bounds it). Inside a
	// container the path /proc/self/cgroup gives may be the host's, while the container sees
	// its own cgroup at the mount's root: both are read.
	walk := func(mount, path, file string) {
		take(filepath.Join(mount, file))
		for p := filepath.Clean("/" + path); p != "/"; p = filepath.Dir(p) {
			take(filepath.Join(mount, p, file))
		}
	}
	if cg, ok := read("/proc/self/cgroup"); ok {
		for line := range strings.Lines(cg) {
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "": // v2 (unified)
				walk("/sys/fs/cgroup", f[2], "memory.max")
			case slices.Contains(strings.Split(f[1], ","), "memory"): // v1
				walk("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")
			}
		}
	} else {
		take("/sys/fs/cgroup/memory.max")
		take("/sys/fs/cgroup/memory/memory.limit_in_bytes")
	}
	if limit == 0 {
		return 4 << 30
	}
	return limit
}
