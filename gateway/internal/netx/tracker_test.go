package netx

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestListenerCloseServesBacklog: connections that completed their handshake before the
// listener closed (waiting in the kernel's backlog) are accepted and served, not reset.
func TestListenerCloseServesBacklog(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(Config{MaxConns: 16, Refusal: Refusal(`{}`, "1")})
	l := tr.Listen(tcp)
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	time.Sleep(50 * time.Millisecond) // the handshakes complete into the backlog
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range clients {
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("backlog connection %d: %v", i, err)
		}
		c.Close()
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after the backlog: %v", err)
	}
	if _, err := net.Dial("tcp", tcp.Addr().String()); err == nil {
		t.Fatal("a new connection was accepted after Close")
	}
}

// TestHandoffBoundsConnections: over MaxConns a new connection is closed as it is accepted
// (and counted); once one closes, the next is served.
func TestHandoffBoundsConnections(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	h := NewHandoff(tcp, HandoffConfig{MaxConns: 2, Refused: func() { refused.Add(1) }, UserTimeout: 20 * time.Second})
	defer h.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := h.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	first, second := <-accepted, <-accepted
	defer second.Close()
	over := dial()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a third connection over a bound of 2: read %v, want it closed", err)
	}
	if refused.Load() != 1 || h.Open() != 2 {
		t.Fatalf("refused %d, open %d; want 1 and 2", refused.Load(), h.Open())
	}
	first.Close()
	first.Close() // counted once
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection under the bound again was not accepted")
	}
	if h.Open() != 1 {
		t.Fatalf("open %d after one of two closed and one more closed, want 1", h.Open())
	}
}

// acceptLoop accepts until accept fails, serving each connection on a goroutine of its own
// (which closes it); the channel is closed once accept has failed.
func acceptLoop(accept func() (net.Conn, error), serve func(net.Conn)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return done
}

// answer reads a one-byte request and, delay later, writes a one-byte answer (within 5 s).
func answer(c net.Conn, delay time.Duration) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err == nil {
		time.Sleep(delay)
		c.Write([]byte("y"))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHandoffWaitsForConnectionsAcceptedDuringStop: a connection the server accepted itself
// (its Accept was already waiting when Stop began) but has not read yet when Stop is called
// is waited for too: a server that drops what it has not started serving once it stops
// (grpc-go) would reset it.
func TestHandoffWaitsForConnectionsAcceptedDuringStop(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandoff(tcp, HandoffConfig{})
	var quit atomic.Bool
	accepted := make(chan struct{}, 1)
	acceptLoop(h.Accept, func(c net.Conn) {
		accepted <- struct{}{}
		time.Sleep(100 * time.Millisecond) // the serving goroutine starts late
		// a stopping server drops what it has not begun to serve
		if !quit.Load() {
			answer(c, 0)
		}
	})
	c, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	<-accepted
	h.Stop(2 * time.Second)
	quit.Store(true)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("a connection accepted before Stop got no answer: %v", err)
	}
	h.Close()
}
