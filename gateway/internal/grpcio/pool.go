package grpcio

import (
	"math/bits"
	"sync"
)

// BufferPool is grpc-go's buffer pool (experimental.BufferPool) for a server's connections (frames read, messages
// assembled, responses marshalled): size classes of powers of two, 256 B to 4 MiB, whose
// buffers are not cleared on Get as grpc-go's default pool's are (every byte handed out is
// overwritten by the read or the marshal it is for; clearing a photo's message buffers cost
// CPU for nothing: bench/history.md). Larger buffers are not pooled.
type BufferPool struct {
	classes [bufferClasses]sync.Pool // class i holds buffers of capacity 256 << i
}

const (
	bufferMinShift = 8
	bufferClasses  = 15 // up to 4 MiB
)

func (p *BufferPool) class(n int) int {
	if n <= 1<<bufferMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - bufferMinShift
}

func (p *BufferPool) Get(n int) *[]byte {
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

func (p *BufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<bufferMinShift || c&(c-1) != 0 { // not one of the classes' (grpc-go may hand back any)
		return
	}
	if i := bits.Len(uint(c)) - 1 - bufferMinShift; i < bufferClasses {
		p.classes[i].Put(b)
	}
}
