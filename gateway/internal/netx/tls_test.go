package netx

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imagegate/imagegate/internal/testcert"
)

// tlsListener serves TLS on a tracked loopback listener; failed counts failed handshakes.
func newTLSListener(t *testing.T, maxConns int) (net.Listener, *Tracker, *testcert.CA, *atomic.Int64) {
	t.Helper()
	ca := testcert.NewCA(t, "netx")
	pair := ca.Server(t, "server")
	cert := pair.TLS(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	tr := NewTracker(Config{MaxConns: maxConns, Refusal: Refusal(`{}`, "1")})
	l := tr.ListenTLS(tcp, TLS{Config: &tls.Config{Certificates: []tls.Certificate{cert}}, Failed: func() { failed.Add(1) }})
	t.Cleanup(func() { l.Close() })
	return l, tr, ca, &failed
}

// TestTLSConnections: a TLS client is served through the tracked listener (its connection a
// *Conn, counted by the tracker, its request line checked on the decrypted bytes).
func TestTLSConnections(t *testing.T) {
	l, tr, ca, failed := newTLSListener(t, 16)
	served := acceptLoop(l.Accept, func(c net.Conn) {
		if _, ok := c.(*Conn); !ok {
			t.Errorf("accepted a %T", c)
		}
		answer(c, 0)
	})
	c, err := tls.Dial("tcp", l.Addr().String(), ca.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("G"))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); string(b) != "y" || err != nil {
		t.Fatalf("answer %q %v", b, err)
	}
	if tr.Open() != 1 || failed.Load() != 0 {
		t.Fatalf("open %d (the server's ConnState closes it, not here), failed handshakes %d", tr.Open(), failed.Load())
	}
	l.Close()
	<-served
}

// TestTLSOpenings: a TLS listener's client that does not start with a handshake is told at
// once (plain HTTP gets a plain-text answer); a broken handshake fails at once; a stalled
// one at the read deadline; each is counted as a failed handshake, except a client that
// closes before sending anything.
func TestTLSOpenings(t *testing.T) {
	l, _, ca, failed := newTLSListener(t, 16)
	type result struct {
		err     error
		elapsed time.Duration
	}
	results := make(chan result, 1)
	acceptLoop(l.Accept, func(c net.Conn) {
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 64))
		if errors.Is(err, ErrHTTPOnTLSPort) {
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}
		results <- result{err, time.Since(start)}
	})
	hello := ca.ClientHello()
	for _, tc := range []struct {
		name    string
		send    []byte
		want    func(error) bool
		counted int64
		quick   bool
	}{
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), func(e error) bool { return errors.Is(e, ErrHTTPOnTLSPort) }, 1, true},
		{"binary", []byte{0, 1, 2, 3, 4, 5}, func(e error) bool { return errors.Is(e, ErrNotTLS) }, 1, true},
		{"a handshake record of garbage", []byte("\x16\x03\x01\x00\x05hello"), func(e error) bool { return e != nil }, 1, true},
		{"half a ClientHello, then nothing", hello[:len(hello)/2], isTimeout, 1, false},
		{"nothing, then a close", nil, func(e error) bool { return errors.Is(e, io.EOF) }, 0, true},
	} {
		before := failed.Load()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if tc.send != nil {
			c.Write(tc.send)
		} else {
			c.Close()
		}
		r := <-results
		if !tc.want(r.err) {
			t.Errorf("%s: %v", tc.name, r.err)
		}
		if tc.quick && r.elapsed > 500*time.Millisecond || !tc.quick && r.elapsed < 900*time.Millisecond {
			t.Errorf("%s: the read ended after %v (quick: %v)", tc.name, r.elapsed, tc.quick)
		}
		if got := failed.Load() - before; got != tc.counted {
			t.Errorf("%s: %d failed handshakes counted, want %d", tc.name, got, tc.counted)
		}
		if tc.name == "plain HTTP" {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			if !strings.HasPrefix(line, "HTTP/1.1 400") {
				t.Errorf("plain HTTP: the answer reads %q, not in plain text", line)
			}
		}
		c.Close()
	}
}

// TestTLSBacklogServedOnClose: TLS clients waiting in the backlog when the listener closes
// are accepted, make their handshake and are answered.
func TestTLSBacklogServedOnClose(t *testing.T) {
	l, _, ca, _ := newTLSListener(t, 16)
	var clients []*tls.Conn
	for range 3 {
		raw, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(raw, func() *tls.Config { cfg := ca.ClientConfig(); cfg.ServerName = "localhost"; return cfg }())
		defer c.Close()
		clients = append(clients, c)
	}
	time.Sleep(50 * time.Millisecond) // the TCP handshakes complete into the backlog
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range clients {
			c := clients[i]
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write([]byte("G")) // the handshake, then the request
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Errorf("backlog client %d: %v", i, err)
			}
		}
	}()
	l.Close()
	served := acceptLoop(l.Accept, func(c net.Conn) { answer(c, 0) })
	<-done
	<-served
}

// TestTLSBeyondEveryBoundIsClosed: over MaxConns and the overflow connections, a TLS
// listener closes a new connection without writing (a plain-text 503 would be garbage to it).
func TestTLSBeyondEveryBoundIsClosed(t *testing.T) {
	l, tr, _, _ := newTLSListener(t, 1)
	acceptLoop(l.Accept, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c)
	})
	n := 1 + OverflowConns(1)
	for range n {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); tr.Open() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Fatalf("beyond every bound: read %q, %v; want a close without bytes", b, err)
	}
}
