//go:build linux

package ort

/*
#include <malloc.h>
*/
import "C"

import (
	"os"
	"runtime"
)

// trimHeap returns the C heap's free memory to the system. A session's destruction frees tens
// of megabytes (weights, arenas) that glibc would otherwise keep in its arenas, so that a
// process that reloads models grows with every reload though nothing leaks.
func trimHeap() { C.malloc_trim(0) }

// glibc gives each thread that allocates its own malloc arena, up to 8 per CPU. The threads
// that run ONNX Runtime and the image decoders come and go across Go's thread pool, and memory
// freed in one arena is not reused by another: RSS then drifts by tens of megabytes (seen over
// model reloads: 0.86x-1.25x after 50 reloads, 0.92x-1.01x with this bound). One arena per CPU
// (at least 2) keeps contention low. MALLOC_ARENA_MAX in the environment takes precedence.
func init() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" {
		// GOMAXPROCS as Go sets it by default (this runs before main may raise it): the
		// container's CPU limit where there is one, not every CPU of the node.
		C.mallopt(C.M_ARENA_MAX, C.int(max(2, runtime.GOMAXPROCS(0))))
	}
}
