package netx

import (
	"io"
	"net"
	"sync"
)

// Drain reads a refused body drainChunk at a time (a loopback segment is 64 KiB; io.Discard's
// 8 KiB took many more read calls). At most drainBig such buffers are in use at once (a slow
// client can hold one until the read timeout, and every connection may be draining); beyond
// them a drain reads drainSmall at a time.
const (
	drainChunk = 64 << 10
	drainSmall = 8 << 10
	drainBig   = BigDrainBuffers
)

// BigDrainBuffers is how many large drain buffers a Tracker lends at once.
const BigDrainBuffers = 32

// drainBuffers are a Tracker's buffers for Drain.
type drainBuffers struct {
	slots chan struct{} // a token per big buffer in use
	big   sync.Pool
	small sync.Pool
}

func (d *drainBuffers) init() {
	d.slots = make(chan struct{}, drainBig)
	d.big.New = func() any { return new([drainChunk]byte) }
	d.small.New = func() any { return new([drainSmall]byte) }
}

// BigDrains is the number of large drain buffers in use (drainBig at most).
func (t *Tracker) BigDrains() int { return len(t.drains.slots) }

// Drain reads and drops what r (a request body arriving on nc) still holds, up to limit
// bytes. Where nc is a *Conn on a socket, what the reads take is dropped in the kernel, never
// copied. It reports whether r ended within limit; false after more than limit bytes, a read
// error, or reads that make no progress (the connection should then be closed by lingering).
func (t *Tracker) Drain(nc net.Conn, r io.Reader, limit int64) bool {
	var buf []byte
	select {
	case t.drains.slots <- struct{}{}:
		b := t.drains.big.Get().(*[drainChunk]byte)
		defer func() { t.drains.big.Put(b); <-t.drains.slots }()
		buf = b[:]
	default:
		b := t.drains.small.Get().(*[drainSmall]byte)
		defer t.drains.small.Put(b)
		buf = b[:]
	}
	if c, ok := nc.(*Conn); ok {
		c.discard = buf // what the stream reads into buf is dropped in the kernel
		defer func() { c.discard = nil }()
	}
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
