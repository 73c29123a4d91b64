//go:build linux

package ort

/*
#include <stdlib.h> // defines __GLIBC__ where it is glibc
#if defined(__GLIBC__)
#include <malloc.h>
static void ig_trim(void) { malloc_trim(0); }
static void ig_arena_max(int n) { mallopt(M_ARENA_MAX, n); }
#else
// Another C library (musl): no per-thread arenas to bound, no trim to ask for.
static void ig_trim(void) {}
static void ig_arena_max(int n) { (void)n; }
#endif
*/
import "C"

import (
	"os"
	"runtime"
)

// trimHeap returns the C heap's free memory to the system. A session's destruction frees tens
// of megabytes (weights, arenas) that glibc would otherwise keep in its arenas, so that a
// process that reloads models grows with every reload though nothing leaks.
func trimHeap() { C.ig_trim() }

// LimitMallocArenas bounds glibc's malloc arenas to one per CPU (at least 2), unless
// MALLOC_ARENA_MAX is set in the environment. glibc gives each thread that allocates its own
// arena, up to 8 per CPU; the threads that run ONNX Runtime and the image decoders come and go
// across Go's thread pool, and memory freed in one arena is not reused by another, so RSS
// drifts over model reloads (docs/internals.md, "malloc arenas"). It changes the whole
// process: main calls it, before it raises GOMAXPROCS (GOMAXPROCS as Go sets it by default is
// the container's CPU limit where there is one). Elsewhere than glibc it does nothing.
func LimitMallocArenas() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" {
		C.ig_arena_max(C.int(max(2, runtime.GOMAXPROCS(0))))
	}
}
