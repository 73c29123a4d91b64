package gateway

import (
	"bytes"
	"net"
	"syscall"
)

// listener wraps the server's listener so that each connection is a *conn.
type listener struct {
	net.Listener
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c}, nil
}

// conn is one client connection as the server sees it. It notes whether the
// request being read has completed its request line, so that a request whose
// header block overflows the read buffer is answered 414 (URI too long) when
// its first line never ended, and 431 (header fields too large) otherwise:
// fasthttp reports both as the same error and forgets the bytes. The note is
// reset when a response is written; only the bytes up to the first line feed of
// a request are scanned. A conn is used by its serving goroutine only.
type conn struct {
	net.Conn
	lineDone bool // the current request's first line has ended
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.lineDone && n > 0 && bytes.IndexByte(b[:n], '\n') >= 0 {
		c.lineDone = true
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	c.lineDone = false
	return c.Conn.Write(b)
}

// SyscallConn exposes the socket of a TCP connection (for the client-gone
// watcher); it fails for other connections.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNotSocket
}

var errNotSocket = &net.OpError{Op: "syscallconn", Err: syscall.EINVAL}
