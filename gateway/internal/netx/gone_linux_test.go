//go:build linux

package netx

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection: the server's, then the client's.
func tcpPair(t *testing.T, ln net.Listener) (net.Conn, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestWatcherCancelsOnlyWhoLeft: of many watched connections, exactly those whose client
// closes, half-closes or resets are cancelled, once each; one released before its client
// leaves is not; a connection that sends more data (a pipelined request) is not; and after an
// fd is released and reused by a new connection, only the new registration is acted on.
func TestWatcherCancelsOnlyWhoLeft(t *testing.T) {
	w := NewWatcher()
	if w == nil {
		t.Skip("the kernel refused an epoll set or an eventfd")
	}
	defer w.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	const n = 40
	var servers, clients [n]net.Conn
	var cancels [n]atomic.Int32
	var releases [n]func()
	for i := range n {
		servers[i], clients[i] = tcpPair(t, ln)
		defer servers[i].Close()
		releases[i] = w.Watch(servers[i], func() { cancels[i].Add(1) })
	}
	leave := map[int]func(net.Conn){
		3:  func(c net.Conn) { c.Close() },
		7:  func(c net.Conn) { c.(*net.TCPConn).CloseWrite() },
		11: func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, // RST
		29: func(c net.Conn) { c.Close() },
	}
	releases[17]() // released, then its client leaves: no cancel
	clients[17].Close()
	clients[23].Write([]byte("GET / HTTP/1.1\r\n\r\n")) // data is not a departure
	for i, f := range leave {
		f(clients[i])
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := range leave {
		for cancels[i].Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond) // room for a wrong or repeated cancel
	for i := range n {
		want := int32(0)
		if leave[i] != nil {
			want = 1
		}
		if got := cancels[i].Load(); got != want {
			t.Errorf("connection %d: cancelled %d times, want %d", i, got, want)
		}
	}

	// Release connection 5, close it on both sides, and open connections until one gets its fd
	// number: the new registration is the only one acted on when its peer leaves.
	fd := func(c net.Conn) int {
		raw, _ := c.(*net.TCPConn).SyscallConn()
		var f int
		raw.Control(func(u uintptr) { f = int(u) })
		return f
	}
	oldFD := fd(servers[5])
	releases[5]()
	servers[5].Close()
	clients[5].Close()
	var reused net.Conn
	var reusedClient net.Conn
	for range 20 {
		s, c := tcpPair(t, ln)
		defer s.Close()
		defer c.Close()
		if fd(s) == oldFD { // either end may get it: the watcher takes any TCP connection
			reused, reusedClient = s, c
			break
		}
		if fd(c) == oldFD {
			reused, reusedClient = c, s
			break
		}
	}
	if reused == nil {
		t.Fatalf("no new connection got fd %d again", oldFD)
	}
	var newCancel atomic.Int32
	release := w.Watch(reused, func() { newCancel.Add(1) })
	defer release()
	reusedClient.Close()
	deadline = time.Now().Add(5 * time.Second)
	for newCancel.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if got, old := newCancel.Load(), cancels[5].Load(); got != 1 || old != 0 {
		t.Errorf("fd %d reused: the new registration cancelled %d times (want 1), the released one %d (want 0)", oldFD, got, old)
	}
	for i := range n {
		if leave[i] == nil && i != 17 && i != 5 {
			releases[i]()
		}
	}
	// One event for each departure while registered: a registration acted on is removed from
	// the epoll set (EPOLLRDHUP is level-triggered: left in, it would wake the loop forever).
	time.Sleep(20 * time.Millisecond)
	if e := w.events.Load(); e != int64(len(leave))+1 {
		t.Errorf("%d connection events, want %d", e, len(leave)+1)
	}
}
