package netx

import (
	"errors"
	"net"
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
