package netx

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// Conn is one client connection as the server sees it. It notes whether the request being
// read has completed its request line (LineDone), so that a request whose header block
// overflows the read buffer can be answered 414 (URI too long) when its first line never
// ended, and 431 (header fields too large) otherwise: fasthttp reports both as the same error
// and forgets the bytes. The note is reset when a response is written; only the bytes up to
// the first line feed of a request are scanned. The fields below discard belong to the
// Tracker (under its mu).
type Conn struct {
	net.Conn // the socket
	t        *Tracker
	// tls, on a TLS listener, carries the connection's reads and writes (the handshake is
	// made on the first read, under the read deadline the server set); sock is its view of
	// the socket, which checks that the client opens with a TLS handshake.
	tls      *tls.Conn
	sock     *tlsSocket
	lineDone bool    // the current request's first line has ended (serving goroutine only)
	linger   bool    // close by lingerClose: the request's body was left unread (serving goroutine only)
	opening  opening // the connection's first request line, checked as it arrives (serving goroutine only)
	// discard is a buffer whose reader drops what lands in it (Drain's, lingerClose's): a
	// read into it is discarded in the kernel, never copied (serving goroutine only).
	discard []byte

	idleSince time.Time
	requests  int
	counted   bool // within MaxConns
	overflow  bool // over it: health and metrics only
	evicted   bool // closed by the tracker to make room
	gone      bool // closed
}

// Overflow reports whether the connection was admitted over Config.MaxConns: the server
// serves it health checks and metrics only.
func (c *Conn) Overflow() bool { return c.overflow }

// LineDone reports whether the request being read has completed its request line.
func (c *Conn) LineDone() bool { return c.lineDone }

// LingerOnClose makes the connection's close a lingering one: the client may still be sending
// a body the server did not read (serving goroutine only).
func (c *Conn) LingerOnClose() { c.linger = true }

func (c *Conn) Read(b []byte) (int, error) {
	var n int
	var err error
	switch {
	case c.tls != nil && !c.sock.plain:
		n, err = c.tls.Read(b)
		if c.sock.handshaken == 0 {
			c.sock.handshakeRead(err)
		}
	case c.opening.done && c.tls == nil && inBuffer(b, c.discard):
		// Bytes that nobody will look at (fasthttp's stream hands a read straight to the
		// socket when its buffer is empty; it never asks for more than the body has left).
		// Under TLS they must be decrypted: only a plain socket drops them in the kernel.
		if n, ok, err := c.discardRead(b); ok {
			return n, err
		}
		n, err = c.Conn.Read(b)
	default:
		n, err = c.Conn.Read(b)
	}
	if !c.opening.done && n > 0 {
		if perr := c.opening.check(b[:n]); perr != nil {
			return 0, perr // fasthttp answers it through the server's error handler, and closes
		}
	}
	if !c.lineDone && n > 0 && bytes.IndexByte(b[:n], '\n') >= 0 {
		c.lineDone = true
	}
	return n, err
}

// opening checks the first request line of a connection as its bytes arrive, for the two
// openings that fasthttp would wait on until read_timeout and then answer 408: a client that
// is not speaking HTTP/1.x at all (most often a TLS handshake, from an https:// URL pointed at
// this plain-HTTP port), whose first byte cannot begin a method; and a request line ended by a
// bare LF, as hand-written requests (printf | nc) send it: fasthttp waits for a header block
// ended by CRLFCRLF, which such a client never sends. Both fail the read at once with an error
// that says what was wrong. Only the connection's first line is checked: a client that opens
// well does not switch, and a request line can only be told from body bytes at the start of a
// connection.
type opening struct {
	started bool // a byte has arrived
	done    bool // the first line ended, or the check gave up
	n       int  // bytes of the current line so far (empty lines before the request are skipped)
	last    byte // the last byte seen
}

func (o *opening) check(b []byte) error {
	if !o.started {
		o.started = true
		if c := b[0]; c != '\r' && c != '\n' && !isTokenByte(c) {
			o.done = true
			if c == 0x16 { // a TLS record carrying a handshake
				return ErrTLSOnPlainPort
			}
			return ErrNotHTTP
		}
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			o.n += len(b)
			o.last = b[len(b)-1]
			return nil
		}
		prev := o.last
		if i > 0 {
			prev = b[i-1]
		}
		if line := o.n + i; line == 0 || line == 1 && prev == '\r' {
			// An empty line before the request line (RFC 9112 lets a server skip it).
			o.n, o.last, b = 0, '\n', b[i+1:]
			continue
		}
		o.done = true
		if prev != '\r' { // a line with bytes, ended by a bare LF
			return ErrBareLF
		}
		return nil
	}
	return nil
}

// isTokenByte reports whether c may appear in an HTTP token (RFC 9110's tchar), as a method's
// bytes must.
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Errors of a connection's opening bytes (Conn.Read).
var (
	ErrTLSOnPlainPort = errors.New("netx: a TLS handshake on a plain-HTTP port")
	ErrNotHTTP        = errors.New("netx: not an HTTP/1.x request")
	ErrBareLF         = errors.New("netx: a request line ended by a bare LF")
)

func (c *Conn) Write(b []byte) (int, error) {
	c.lineDone = false
	if c.tls != nil && !c.sock.plain {
		return c.tls.Write(b)
	}
	return c.Conn.Write(b) // plain, or the answer to plain text on a TLS port
}

// Close closes the connection; one closed with the client's bytes still coming (a refused
// body left unread, a pipelined request) is closed by lingerClose, so that the client gets
// the answer written to it: a socket closed with unread input, or that receives input after
// its close, is reset, and a reset discards what the client had not read yet (a client that
// writes its whole body before it reads, as Python's http.client does, got a reset instead of
// the 413 for a body over max_body_bytes).
func (c *Conn) Close() error {
	if (c.linger || PendingInput(c.Conn)) && c.t != nil && c.t.lingerStart() {
		c.linger = false
		go c.lingerClose()
		return nil
	}
	if c.tls != nil && !c.sock.plain {
		return c.tls.Close() // close_notify first, once the handshake is done
	}
	return c.Conn.Close()
}

// Lingering closes: at most maxLingering at once (beyond, a connection is closed at once);
// each lasts until the client closes or stops sending for lingerIdle, at most lingerTime,
// and reads at most lingerBytes (docs/internals.md, "Lingering closes").
const (
	maxLingering = 64
	lingerIdle   = time.Second
	lingerTime   = 10 * time.Second
	lingerBytes  = 256 << 20
)

// lingerClose sends the end of the stream after the answer, reads and drops what the client
// still sends, then closes.
func (c *Conn) lingerClose() {
	defer c.t.lingerDone()
	defer c.Conn.Close()
	if c.tls != nil && !c.sock.plain && c.sock.handshaken == 1 {
		c.tls.CloseWrite() // close_notify: the client reads a clean end of the answer
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() // the client reads the answer, then end of stream
	}
	withDiscard(c.lingerRead)
}

// lingerRead reads and drops into buf what the client sends, until it stops or closes.
func (c *Conn) lingerRead(buf []byte) {
	end := time.Now().Add(lingerTime)
	for n := 0; n < lingerBytes; {
		d := time.Now().Add(lingerIdle)
		if d.After(end) {
			d = end
		}
		c.Conn.SetReadDeadline(d)
		k, ok, err := c.discardRead(buf)
		if !ok {
			k, err = c.Conn.Read(buf)
		}
		n += k
		if err != nil {
			return
		}
	}
}

// lingerStart takes a place for a lingering close; false when all are taken.
func (t *Tracker) lingerStart() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lingering >= maxLingering {
		return false
	}
	t.lingering++
	return true
}

func (t *Tracker) lingerDone() {
	t.mu.Lock()
	t.lingering--
	t.mu.Unlock()
}

// SyscallConn exposes the socket of a TCP connection (for the client-gone watcher); it fails
// for other connections.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNotSocket
}

var errNotSocket = errors.New("netx: not a socket")

// TLS configures a listener's TLS (Tracker.ListenTLS, ListenTLS).
type TLS struct {
	// Config serves the handshakes (a GetConfigForClient over files that may be replaced).
	Config *tls.Config
	// Failed, optional, is called for each handshake that fails: a client that is refused
	// (no certificate, an old TLS version), that sends something else, or stalls past the
	// read deadline. A client that closes before sending a byte is not counted (a TCP
	// health check, a port scan).
	Failed func()
}

// Errors of a TLS listener's opening bytes: the client did not start with a TLS handshake.
var (
	ErrHTTPOnTLSPort = errors.New("netx: plain HTTP on a TLS port")
	ErrNotTLS        = errors.New("netx: not a TLS handshake")
)

// tlsSocket is the socket as a TLS connection reads it: it checks the first byte (a TLS
// record carrying a handshake, 0x16) so that a plain-text client is told at once, in plain
// text, instead of getting a TLS alert it cannot read (the server's error handler answers
// ErrHTTPOnTLSPort; Conn.Write then writes to the socket directly), and notes whether the
// handshake failed. Serving goroutine only.
type tlsSocket struct {
	net.Conn
	cfg        *TLS
	tc         *tls.Conn
	started    bool // a byte has arrived
	plain      bool // the client does not speak TLS: reads and writes skip the TLS layer
	handshaken int8 // 0: under way, 1: done, -1: failed
}

func (s *tlsSocket) Read(b []byte) (int, error) {
	n, err := s.Conn.Read(b)
	if !s.started && n > 0 {
		s.started = true
		if b[0] != 0x16 {
			s.plain = true
			if isTokenByte(b[0]) {
				return 0, ErrHTTPOnTLSPort
			}
			return 0, ErrNotTLS
		}
	}
	return n, err
}

// handshakeRead notes the outcome of the connection's first read through TLS.
func (s *tlsSocket) handshakeRead(err error) {
	if s.tc.ConnectionState().HandshakeComplete {
		s.handshaken = 1
		return
	}
	if err == nil {
		return
	}
	s.handshaken = -1
	if s.cfg.Failed != nil && (s.started || !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed)) {
		s.cfg.Failed()
	}
}

// newConn wraps a connection accepted by a listener with tracker t (nil: none) and TLS cfg
// (nil: plain text).
func newConn(nc net.Conn, t *Tracker, cfg *TLS) *Conn {
	c := &Conn{Conn: nc, t: t}
	if cfg != nil {
		c.sock = &tlsSocket{Conn: nc, cfg: cfg}
		c.tls = tls.Server(c.sock, cfg.Config)
		c.sock.tc = c.tls
	}
	return c
}

// Plain reports whether a TLS listener's client sent plain text instead of a handshake.
func (c *Conn) Plain() bool { return c.sock != nil && c.sock.plain }

// ListenTLS wraps ln (a listener without a Tracker: the admin API's) so that its connections
// speak TLS as cfg says; they are *Conn.
func ListenTLS(ln net.Listener, cfg TLS) net.Listener { return &tlsListener{Listener: ln, cfg: &cfg} }

type tlsListener struct {
	net.Listener
	cfg *TLS
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newConn(c, nil, l.cfg), nil
}
