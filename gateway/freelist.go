package gateway

import "sync"

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
