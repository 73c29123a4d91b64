package netx

import (
	"io"
	"net"
	"sync"
)

// Drains and lingering closes read what they drop into the discard region (discardRegion):
// on a plain socket such a read is dropped in the kernel and never writes it (discardRead), so
// one read call takes all that has arrived, up to discardLen bytes, where a 64 KiB buffer took a
// call per loopback segment. Nothing reads the region, so every drain shares it, and it costs
// no memory per drain. Where it cannot be had, a drain reads into a buffer of fallbackLen.
const (
	discardLen  = 1 << 20
	fallbackLen = 64 << 10
)

var fallbackBufs = sync.Pool{New: func() any { return new([fallbackLen]byte) }}

// withDiscard calls f with the discard region, or with a pooled buffer where there is none.
func withDiscard(f func(buf []byte)) {
	if r := discardRegion(); r != nil {
		f(r)
		return
	}
	b := fallbackBufs.Get().(*[fallbackLen]byte)
	defer fallbackBufs.Put(b)
	f(b[:])
}

// Draining is the number of drains under way.
func (t *Tracker) Draining() int { return int(t.draining.Load()) }

// Drain reads and drops what r (a request body arriving on nc) still holds, up to limit
// bytes. Where nc is a *Conn on a socket, what the reads take is dropped in the kernel, never
// copied. It reports whether r ended within limit; false after more than limit bytes, a read
// error, or reads that make no progress (the connection should then be closed by lingering).
func (t *Tracker) Drain(nc net.Conn, r io.Reader, limit int64) (ended bool) {
	t.draining.Add(1)
	defer t.draining.Add(-1)
	withDiscard(func(buf []byte) {
		if c, ok := nc.(*Conn); ok {
			c.discard = buf // what the stream reads into buf is dropped in the kernel
			defer func() { c.discard = nil }()
		}
		ended = drain(r, buf, limit)
	})
	return ended
}

// drain reads r into buf until it ends, within limit bytes.
func drain(r io.Reader, buf []byte, limit int64) bool {
	var n int64
	empty := 0
	for n <= limit {
		k, err := r.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if k == 0 && err == nil {
			empty++
		} else {
			empty = 0
		}
		if err != nil || empty >= 100 { // 100 empty reads: no progress (as bufio decides)
			return false
		}
	}
	return n <= limit
}
