package admit

import (
	"sync/atomic"
)

// Budget is the memory budget shared by the requests in flight (server.max_inflight_bytes):
// bodies as their bytes arrive, decode buffers, input rows. Reservations never block: a
// reservation that does not fit fails at once, and the caller refuses the request (or, in the
// decode gate, waits for a release). It is safe for concurrent use.
type Budget struct {
	limit    int64
	used     atomic.Int64
	released func() // called after every release (the decode gate re-dispatches)
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Limit is the budget's size.
func (b *Budget) Limit() int64 { return b.limit }

// Used is the number of bytes reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// fits reports whether n bytes would fit now (without taking them).
func (b *Budget) fits(n int64) bool { return b.used.Load()+n <= b.limit }

// Reserve takes n bytes if they fit and reports whether they did.
func (b *Budget) Reserve(n int64) bool {
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

// Release returns n bytes taken by Reserve.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	if b.used.Add(-n) < 0 {
		panic("admit: memory budget released more than it reserved")
	}
	if f := b.released; f != nil {
		f()
	}
}
