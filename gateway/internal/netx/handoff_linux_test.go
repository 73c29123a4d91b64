package netx

import (
	"net"
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
	rawConn(sc.(interface{ Unwrap() net.Conn }).Unwrap()).Control(func(fd uintptr) {
		got, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
	if err != nil || got != 20000 {
		t.Fatalf("TCP_USER_TIMEOUT %d ms (%v), want 20000", got, err)
	}
}
