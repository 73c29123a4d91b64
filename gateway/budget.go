package gateway

import (
	"sync/atomic"
)

// budget is the memory budget shared by the requests in flight (server.max_inflight_bytes):
// bodies as their bytes arrive, decode buffers, input rows. Reservations never block: a
// reservation that does not fit fails at once, and the caller refuses the request (or, in the
// decode gate, waits for a release). It is safe for concurrent use.
type budget struct {
	limit    int64
	used     atomic.Int64
	released func() // called after every release (the decode gate re-dispatches)
}

func newBudget(limit int64) *budget { return &budget{limit: limit} }

// reserve takes n bytes if they fit and reports whether they did.
func (b *budget) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// release returns n bytes taken by reserve.
func (b *budget) release(n int64) {
	if n <= 0 {
		return
	}
	if b.used.Add(-n) < 0 {
		panic("gateway: memory budget released more than it reserved")
	}
	if f := b.released; f != nil {
		f()
	}
}
