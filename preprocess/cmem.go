package preprocess

/*
#include <malloc.h>

// Bytes glibc's malloc has handed out and not taken back, all arenas, mmapped
// blocks included (chunk headers and alignment count: that memory is held).
static size_t ig_malloc_in_use(void) {
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}
*/
import "C"

// cMallocInUse reports the C heap in use by the whole process. Tests read it
// around a decode (nothing else running) to measure a C codec's memory.
func cMallocInUse() int64 { return int64(C.ig_malloc_in_use()) }
