package netx

// Linux only: a stopped socket refuses new connections here (stopListening); elsewhere they
// wait in the backlog until the close.

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHandoffSetsUserTimeout: the connections a Handoff hands out (wrapped, so grpc-go does
// not set it itself) carry HandoffConfig.UserTimeout as TCP_USER_TIMEOUT.
func TestHandoffSetsUserTimeout(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandoff(tcp, HandoffConfig{UserTimeout: 20 * time.Second})
	defer h.Close()
	c, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := h.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var got int
	rawConn(innermost(sc)).Control(func(fd uintptr) {
		got, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
	if err != nil || got != 20000 {
		t.Fatalf("TCP_USER_TIMEOUT %d ms (%v), want 20000", got, err)
	}
}

// TestListenerCloseResetsNoWrittenRequest: a client connects and writes its request between
// Close's last accept and the socket's close (where a loaded machine can preempt Close). It
// is either refused before anything is written or served: never reset after writing.
func TestListenerCloseResetsNoWrittenRequest(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(Config{MaxConns: 16, Refusal: Refusal(`{}`, "1")})
	l := tr.Listen(tcp)
	var late net.Conn
	l.(*listener).beforeClose = func() {
		// A dropped SYN is retransmitted after a second: a short timeout sees it refused.
		c, err := net.DialTimeout("tcp", tcp.Addr().String(), 300*time.Millisecond)
		if err != nil {
			return
		}
		if _, err := c.Write([]byte("x")); err != nil {
			c.Close()
			return
		}
		late = c
		time.Sleep(20 * time.Millisecond) // its handshake and request reach the queue
	}
	served := acceptLoop(l.Accept, func(c net.Conn) { answer(c, 0) })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	<-served
	if late == nil {
		t.Log("the late client was refused before it wrote its request")
		return
	}
	defer late.Close()
	late.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(late, make([]byte, 1)); err != nil {
		t.Fatalf("a client whose connection was established wrote its request and got no answer: %v", err)
	}
	t.Log("the late client was served")
}

// TestHandoffServesTheBacklogBeforeTheServerStops: a server that drops the connections it
// accepts once it has begun stopping (as grpc-go's GracefulStop does) still serves those that
// waited in the backlog: Stop hands them over, and returns once the server has read each.
func TestHandoffServesTheBacklogBeforeTheServerStops(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandoff(tcp, HandoffConfig{})
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	time.Sleep(50 * time.Millisecond) // the handshakes complete into the backlog
	var quit atomic.Bool
	stopped := make(chan struct{})
	go func() { h.Stop(2 * time.Second); close(stopped) }()
	time.Sleep(50 * time.Millisecond) // Stop has taken the backlog before the server's first Accept
	served := acceptLoop(h.Accept, func(c net.Conn) {
		// a stopping server drops what it accepts; the others are answered after it began to stop
		if !quit.Load() {
			answer(c, 20*time.Millisecond)
		}
	})
	<-stopped
	quit.Store(true)
	if _, err := net.DialTimeout("tcp", tcp.Addr().String(), time.Second); err == nil {
		t.Error("a new connection was accepted after Stop")
	}
	for i, c := range clients {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Errorf("backlog connection %d got no answer: %v", i, err)
		}
	}
	h.Close()
	<-served
}
