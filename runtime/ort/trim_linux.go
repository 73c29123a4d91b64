//go:build linux

package ort

/*
#include <malloc.h>
*/
import "C"

// trimHeap returns the C heap's free memory to the system. A session's destruction frees tens
// of megabytes (weights, arenas) that glibc would otherwise keep in its arenas, so that a
// process that reloads models grows with every reload though nothing leaks.
func trimHeap() { C.malloc_trim(0) }
