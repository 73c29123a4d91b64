// Package testutil holds test helpers that need cgo, which a _test.go file cannot use. Only
// tests import it.
package testutil

/*
#include <stdlib.h> // defines __GLIBC__ where it is glibc
#if defined(__GLIBC__)
#include <malloc.h>

// Bytes glibc's malloc has handed out and not taken back, all arenas, mmapped blocks
// included (chunk headers and alignment count: that memory is held). Not static: Go takes
// its address (CHeapProbe).
long long imagegate_c_heap_in_use(void) {
	struct mallinfo2 m = mallinfo2();
	return (long long)(m.uordblks + m.hblkhd);
}
#else
// Another C library: no mallinfo2 to ask.
long long imagegate_c_heap_in_use(void) { return -1; }
#endif
*/
import "C"

import "unsafe"

// CHeapInUse reports the C heap in use by the whole process (glibc's mallinfo2), or -1 where
// the C library cannot tell. Tests read it around a call with nothing else running to
// measure a C library's memory.
func CHeapInUse() int64 { return int64(C.imagegate_c_heap_in_use()) }

// CHeapProbe is CHeapInUse as a C function pointer (long long (*)(void)), for C code that
// must measure at a moment of its own.
func CHeapProbe() unsafe.Pointer { return unsafe.Pointer(C.imagegate_c_heap_in_use) }
