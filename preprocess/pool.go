package preprocess

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Pixel buffers come from size-classed pools (powers of two from 64 KiB to
// 16 MiB). Requests above the largest class are allocated and left to the
// garbage collector, so a rare huge image does not pin its memory.
const (
	minClassBits = 16
	maxClassBits = 24
)

var bufPools [maxClassBits - minClassBits + 1]sync.Pool

func classOf(n int) int {
	if n <= 1<<minClassBits {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassBits
}

// getBuf returns a buffer of length n. Release it with putBuf.
func getBuf(n int) *[]byte {
	c := classOf(n)
	if c >= len(bufPools) {
		b := make([]byte, n)
		return &b
	}
	if v, ok := bufPools[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<(c+minClassBits))
	return &b
}

// putBuf returns a buffer obtained from getBuf; b must not be used after.
func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	c := cap(*b)
	if c < 1<<minClassBits || c > 1<<maxClassBits || c&(c-1) != 0 {
		return
	}
	bufPools[classOf(c)].Put(b)
}

// scratch is the per-call working memory, pooled. Nothing in it carries
// meaning from one call to the next: every byte a call reads from dec, rot,
// in, tmp and row was written by the same call (the decoders fill the whole
// buffer or fail, the resampler writes each row before reading it), except
// that vector loads may read up to tmpSlack bytes past the rows they use,
// into lanes whose results are dropped.
type scratch struct {
	dec, rot *[]byte // decoded and oriented pixels (size-classed pools)
	in       *[]byte // a copy of the input (PNG without its ancillary chunks)
	tmp      []uint8 // output of the horizontal pass
	row      []uint8 // one output row of one plane
	// fresh: this call uses no pooled memory and no pooled decoder handle
	// (everything is allocated for it and dropped after); the differential
	// tests compare it with the pooled path.
	fresh bool
	// stop, when not nil, turns non-zero when the caller's context ends
	// (ProcessContext): the JPEG and PNG decoders then stop within a few rows.
	stop *int32
}

// stopped reports whether the caller's context has ended.
func (s *scratch) stopped() bool { return s.stop != nil && atomic.LoadInt32(s.stop) != 0 }

// buf returns a pixel buffer of length n, pooled unless s is fresh.
func (s *scratch) buf(n int) *[]byte {
	if s.fresh {
		b := make([]byte, n)
		return &b
	}
	return getBuf(n)
}

// maxScratchKeep bounds the small scratch slices kept in the pool.
const maxScratchKeep = 8 << 20

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(s *scratch) {
	if s.fresh {
		return
	}
	putBuf(s.dec)
	putBuf(s.rot)
	putBuf(s.in)
	s.dec, s.rot, s.in, s.stop = nil, nil, nil, nil
	if cap(s.tmp) > maxScratchKeep {
		s.tmp = nil
	}
	if cap(s.row) > maxScratchKeep {
		s.row = nil
	}
	scratchPool.Put(s)
}

// grow returns b resized to n, reallocating only when its capacity is short.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
