package gateway

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// connTracker limits and tracks the server's connections (server.max_connections). At the
// limit, a new connection is admitted by closing the connection that has been idle longest
// (a keep-alive connection between requests, or a new one that has sent nothing for a
// second); when none is idle the new connection is an overflow connection: it is served
// health checks and metrics, and a JSON 503 with Retry-After for anything else, then closed.
// Overflow connections are bounded too; beyond them a connection gets the JSON 503 at once.
// So idle clients cannot lock the server out, and health checks always get through.
type connTracker struct {
	mu         sync.Mutex
	max        int
	open       int // connections admitted within max
	overflow   int // overflow connections open
	maxOver    int
	idle       map[*conn]struct{}
	all        map[*conn]struct{}
	closedIdle *metrics.Counter
	met        *metricsRegistry
	lingering  int // connections in lingerClose
}

// overflowConns is how many overflow connections may be open at once.
func overflowConns(maxConns int) int { return max(16, maxConns/8) }

func newConnTracker(maxConns int, met *metricsRegistry) *connTracker {
	t := &connTracker{max: maxConns, maxOver: overflowConns(maxConns), idle: map[*conn]struct{}{}, all: map[*conn]struct{}{}, met: met}
	set := met.set
	set.NewGauge("gateway_connections", func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(t.open + t.overflow)
	})
	set.NewGauge("gateway_connections_idle", func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.idle))
	})
	t.closedIdle = set.NewCounter("gateway_connections_closed_idle_total")
	set.NewGauge("gateway_connections_lingering", func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(t.lingering)
	})
	return t
}

// newIdleAfter: a new connection that has sent nothing for this long counts as idle.
const newIdleAfter = time.Second

// admit places a new connection, closing the longest-idle one at the limit; it reports false
// when the connection must be refused outright.
func (t *connTracker) admit(c *conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.place(c)
	if ok {
		t.all[c] = struct{}{}
	}
	return ok
}

// interruptReads makes every read of a request in progress fail now (the drain ran out of
// time: requests still receiving their bodies are answered rather than waited for). Idle
// keep-alive connections are left alone: their clients keep the drain's last moment
// (connCloseGrace) to send a request on them, as on any drain; interrupted, they were closed
// under a client that was about to.
func (t *connTracker) interruptReads() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.all {
		if _, idle := t.idle[c]; !idle {
			c.Conn.SetReadDeadline(time.Now())
		}
	}
}

func (t *connTracker) place(c *conn) bool {
	if t.open < t.max {
		t.open++
		c.counted = true
		t.markIdle(c, time.Now()) // a new connection is idle until its first byte
		return true
	}
	var victim *conn
	now := time.Now()
	for o := range t.idle {
		if now.Sub(o.idleSince) < newIdleAfter && o.requests == 0 || pendingInput(o) {
			continue // a new connection still about to send its request, or a request arriving
		}
		if victim == nil || o.idleSince.Before(victim.idleSince) {
			victim = o
		}
	}
	if victim != nil {
		delete(t.idle, victim)
		victim.evicted = true
		victim.Conn.Close() // its serving goroutine sees the close and releases it
		t.closedIdle.Inc()
		c.counted = true // takes the victim's place: open stays the same
		t.markIdle(c, now)
		return true
	}
	if t.overflow < t.maxOver {
		t.overflow++
		c.overflow = true
		return true
	}
	return false
}

// closeIdle closes the keep-alive connections waiting for their next request (the end of a
// drain), except those on which a request is arriving.
func (t *connTracker) closeIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.idle {
		// Closed right after the check that no request is arriving on it: a client can only
		// race this with a request sent in the microseconds between the two.
		if c.requests > 0 && !pendingInput(c) {
			delete(t.idle, c)
			c.evicted = true
			t.open-- // its serving goroutine's close will not count it again
			c.Conn.Close()
		}
	}
}

// closeQuietNew closes new connections that have sent nothing for newIdleAfter (the end of a
// drain: one that has not sent its request yet is not going to be served).
func (t *connTracker) closeQuietNew() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for c := range t.idle {
		if c.requests == 0 && now.Sub(c.idleSince) >= newIdleAfter && !pendingInput(c) {
			delete(t.idle, c)
			c.evicted = true
			t.open--
			c.Conn.Close()
		}
	}
}

// count is the number of connections open.
func (t *connTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open + t.overflow
}

func (t *connTracker) markIdle(c *conn, now time.Time) {
	c.idleSince = now
	t.idle[c] = struct{}{}
}

// state is fasthttp's ConnState hook.
func (t *connTracker) state(nc net.Conn, st fasthttp.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case fasthttp.StateActive:
		delete(t.idle, c)
		c.requests++
	case fasthttp.StateIdle:
		if !c.evicted && !c.gone {
			t.markIdle(c, time.Now())
		}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		if c.gone {
			return
		}
		c.gone = true
		delete(t.idle, c)
		delete(t.all, c)
		switch {
		case c.overflow:
			t.overflow--
		case c.counted && !c.evicted:
			t.open--
		}
	}
}

// refuse answers a connection beyond every bound with our JSON 503 and closes it.
func refuse(nc net.Conn, retryAfter string) {
	body := `{"error":"the server has too many connections open (server.max_connections); try again"}`
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	nc.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: " + retryAfter +
		"\r\nConnection: close\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body))
	nc.Close()
}

// listener wraps the server's listener: it admits each connection through the tracker, and
// on Close it first accepts the connections already waiting in the kernel's backlog (they were
// accepted by TCP: they are served, not reset).
type listener struct {
	net.Listener
	t          *connTracker
	retryAfter string
	mu         sync.Mutex
	closing    bool
	closed     bool
	pending    []net.Conn
	done       chan struct{} // closed when Close has drained the backlog
	once       sync.Once
}

func (t *connTracker) listen(ln net.Listener, retryAfter string) net.Listener {
	return &listener{Listener: ln, t: t, retryAfter: retryAfter, done: make(chan struct{})}
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.pending) > 0 {
			c := l.pending[0]
			l.pending = l.pending[1:]
			l.mu.Unlock()
			if wc := l.wrap(c); wc != nil {
				return wc, nil
			}
			continue
		}
		closed, closing := l.closed, l.closing
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			if closing || l.isClosing() {
				<-l.done
				continue // serve what the drain found, then report closed
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOBUFS) {
				// Out of file descriptors (or kernel memory) for a moment: the connection
				// waits in the backlog; fasthttp would take the error as the end of Serve.
				l.t.met.refusals[refuseConnections].Inc()
				time.Sleep(acceptBackoff)
				continue
			}
			return nil, err
		}
		if wc := l.wrap(c); wc != nil {
			return wc, nil
		}
	}
}

func (l *listener) isClosing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closing
}

// wrap admits a connection; nil if it was refused.
func (l *listener) wrap(nc net.Conn) net.Conn {
	c := &conn{Conn: nc, t: l.t}
	if !l.t.admit(c) {
		l.t.met.refusals[refuseConnections].Inc()
		go refuse(nc, l.retryAfter)
		return nil
	}
	return c
}

// Close stops accepting: connections already waiting in the backlog are accepted (and
// served) first.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.mu.Lock()
		l.closing = true
		l.mu.Unlock()
		if d, ok := l.Listener.(interface{ SetDeadline(time.Time) error }); ok {
			// A deadline in the past fails Accept before it calls accept(2): a short one ahead
			// lets it take every connection already queued, then time out.
			d.SetDeadline(time.Now().Add(backlogDrain))
			for {
				c, e := l.Listener.Accept()
				if e != nil {
					break
				}
				l.mu.Lock()
				l.pending = append(l.pending, c)
				l.mu.Unlock()
			}
		}
		last := acceptQueued(l.Listener) // what arrived since, without the poller's delay
		err = l.Listener.Close()
		l.mu.Lock()
		l.pending = append(l.pending, last...)
		l.closed = true
		l.mu.Unlock()
		close(l.done)
	})
	return err
}

// acceptBackoff is the pause after Accept ran out of file descriptors.
const acceptBackoff = 50 * time.Millisecond

// backlogDrain is how long Close keeps accepting the connections already in the backlog.
const backlogDrain = 20 * time.Millisecond

// conn is one client connection as the server sees it. It notes whether the request being
// read has completed its request line, so that a request whose header block overflows the
// read buffer is answered 414 (URI too long) when its first line never ended, and 431 (header
// fields too large) otherwise: fasthttp reports both as the same error and forgets the bytes.
// The note is reset when a response is written; only the bytes up to the first line feed of
// a request are scanned. The fields below lineDone belong to the connTracker (under its mu).
type conn struct {
	net.Conn
	t        *connTracker
	lineDone bool    // the current request's first line has ended (serving goroutine only)
	linger   bool    // close by lingerClose: the request's body was left unread (serving goroutine only)
	opening  opening // the connection's first request line, checked as it arrives (serving goroutine only)
	// discard is a buffer whose reader drops what lands in it (drainBody's, lingerClose's):
	// a read into it is discarded in the kernel, never copied (serving goroutine only).
	discard []byte

	idleSince time.Time
	requests  int
	counted   bool // within max_connections
	overflow  bool // over it: health and metrics only
	evicted   bool // closed by the tracker to make room
	gone      bool // closed
}

func (c *conn) Read(b []byte) (int, error) {
	if c.opening.done && inBuffer(b, c.discard) {
		// Bytes that nobody will look at (fasthttp's stream hands a read straight to the
		// socket when its buffer is empty; it never asks for more than the body has left).
		if n, ok, err := c.discardRead(b); ok {
			return n, err
		}
	}
	n, err := c.Conn.Read(b)
	if !c.opening.done && n > 0 {
		if perr := c.opening.check(b[:n]); perr != nil {
			return 0, perr // fasthttp answers it through handleParseError, and closes
		}
	}
	if !c.lineDone && n > 0 && bytes.IndexByte(b[:n], '\n') >= 0 {
		c.lineDone = true
	}
	return n, err
}

// opening checks the first request line of a connection as its bytes arrive, for the two
// openings that fasthttp would wait on until read_timeout (30 s) and then answer 408: a
// client that is not speaking HTTP/1.x at all (most often a TLS handshake, from an https://
// URL pointed at this plain-HTTP port), whose first byte cannot begin a method; and a request
// line ended by a bare LF, as hand-written requests (printf | nc) send it: fasthttp waits
// for a header block ended by CRLFCRLF, which such a client never sends. Both get a 400 at
// once that says what was wrong. Only the connection's first line is checked: a client
// that opens well does not switch, and a request line can only be told from body bytes at
// the start of a connection.
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
				return errTLSOnPlainPort
			}
			return errNotHTTP
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
			return errBareLF
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

var (
	errTLSOnPlainPort = errors.New("gateway: a TLS handshake on a plain-HTTP port")
	errNotHTTP        = errors.New("gateway: not an HTTP/1.x request")
	errBareLF         = errors.New("gateway: a request line ended by a bare LF")
)

func (c *conn) Write(b []byte) (int, error) {
	c.lineDone = false
	return c.Conn.Write(b)
}

// Close closes the connection; one closed with the client's bytes still coming (a refused
// body left unread, a pipelined request) is closed by lingerClose, so that the client gets
// the answer written to it: a socket closed with unread input, or that receives input after
// its close, is reset, and a reset discards what the client had not read yet. (A client that
// writes its whole body before it reads, as Python's http.client does, got a connection reset
// instead of the 413 for a body over max_body_bytes.)
func (c *conn) Close() error {
	if (c.linger || pendingInput(c)) && c.t != nil && c.t.lingerStart() {
		c.linger = false
		go c.lingerClose()
		return nil
	}
	return c.Conn.Close()
}

// Lingering closes: at most maxLingering at once (beyond, a connection is closed at once);
// each lasts until the client closes or stops sending for lingerIdle, at most lingerTime,
// and reads at most lingerBytes (a body over max_body_bytes of 16 MiB is some 10 ms of
// reading on loopback).
const (
	maxLingering = 64
	lingerIdle   = time.Second
	lingerTime   = 10 * time.Second
	lingerBytes  = 256 << 20
)

// lingerClose sends the end of the stream after the answer, reads and drops what the client
// still sends, then closes.
func (c *conn) lingerClose() {
	defer c.t.lingerDone()
	defer c.Conn.Close()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() // the client reads the answer, then end of stream
	}
	buf := lingerBufs.Get().(*[drainChunk]byte)
	defer lingerBufs.Put(buf)
	end := time.Now().Add(lingerTime)
	for n := 0; n < lingerBytes; {
		d := time.Now().Add(lingerIdle)
		if d.After(end) {
			d = end
		}
		c.Conn.SetReadDeadline(d)
		k, ok, err := c.discardRead(buf[:])
		if !ok {
			k, err = c.Conn.Read(buf[:])
		}
		n += k
		if err != nil {
			return
		}
	}
}

var lingerBufs = sync.Pool{New: func() any { return new([drainChunk]byte) }}

// lingerStart takes a place for a lingering close; false when all are taken.
func (t *connTracker) lingerStart() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lingering >= maxLingering {
		return false
	}
	t.lingering++
	return true
}

// lingeringNow is the number of connections in lingerClose.
func (t *connTracker) lingeringNow() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lingering
}

func (t *connTracker) lingerDone() {
	t.mu.Lock()
	t.lingering--
	t.mu.Unlock()
}

// lingerOnClose closes the request's connection after the answer, lingering: the client may
// still be sending the body the server did not read.
func lingerOnClose(fc *fasthttp.RequestCtx) {
	fc.SetConnectionClose()
	if c, ok := fc.Conn().(*conn); ok {
		c.linger = true
	}
}

// SyscallConn exposes the socket of a TCP connection (for the client-gone watcher); it fails
// for other connections.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errNotSocket
}

var errNotSocket = errors.New("gateway: not a socket")
