package gateway

import (
	"math/bits"
	"sync"
)

// freeList keeps the byte buffers that requests give back (bodies as read, decoded base64
// images) for the next requests, up to max bytes in all; what does not fit is left to the
// collector. A sync.Pool keeps everything put in it until two collections have passed, and
// this server allocates so little that it collects rarely: an overload's buffers stayed in the
// heap long after it (docs/internals.md, "Free lists"). The list is a stack, so the buffer
// handed out is the one most recently used.
type freeList struct {
	mu    sync.Mutex
	bufs  [][]byte
	bytes int64 // the capacity of the buffers in bufs
	max   int64
}

// freeListBytes is the most a freeList keeps: at c=50 on the article's payload (310 KB
// bodies, 232 KB images) no request has to allocate either buffer.
const freeListBytes = 16 << 20

func newFreeList(max int64) *freeList { return &freeList{max: max} }

// get returns a kept buffer, empty, or nil when none is kept.
func (f *freeList) get() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.bufs)
	if n == 0 {
		return nil
	}
	b := f.bufs[n-1]
	f.bufs[n-1] = nil
	f.bufs = f.bufs[:n-1]
	f.bytes -= int64(cap(b))
	return b[:0]
}

// put keeps b for a later get if it fits within max (and within maxPooledBuffer on its own).
func (f *freeList) put(b []byte) {
	c := int64(cap(b))
	if c == 0 || c > maxPooledBuffer {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bytes+c > f.max {
		return
	}
	f.bufs = append(f.bufs, b[:0])
	f.bytes += c
}

// held reports the bytes kept.
func (f *freeList) held() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes
}

// bufferPool is grpc-go's buffer pool for a Server's gRPC connections (frames read, messages
// assembled, responses marshalled): size classes of powers of two, 256 B to 4 MiB, whose
// buffers are not cleared on Get as grpc-go's default pool's are (every byte handed out is
// overwritten by the read or the marshal it is for; clearing a photo's message buffers was
// 1.2 % of the server's CPU). Larger buffers are not pooled.
type bufferPool struct {
	classes [bufferClasses]sync.Pool // class i holds buffers of capacity 256 << i
}

const (
	bufferMinShift = 8
	bufferClasses  = 15 // up to 4 MiB
)

func (p *bufferPool) class(n int) int {
	if n <= 1<<bufferMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - bufferMinShift
}

func (p *bufferPool) Get(n int) *[]byte {
	c := p.class(n)
	if c >= bufferClasses {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(c+bufferMinShift))
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<bufferMinShift || c&(c-1) != 0 { // not one of the classes' (grpc-go may hand back any)
		return
	}
	if i := bits.Len(uint(c)) - 1 - bufferMinShift; i < bufferClasses {
		p.classes[i].Put(b)
	}
}
