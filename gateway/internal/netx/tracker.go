package netx

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config configures a Tracker.
type Config struct {
	// MaxConns bounds the connections served (server.max_connections).
	MaxConns int
	// Refusal is written, whole, to a connection refused beyond every bound before it is
	// closed (the server's own HTTP 503).
	Refusal []byte
	// Refused, optional, is called for each connection refused at once (beyond every bound,
	// or while descriptors ran out).
	Refused func()
	// ClosedIdle, optional, is called for each idle connection closed to admit a new one.
	ClosedIdle func()
}

// Tracker limits and tracks a server's connections (Config.MaxConns). At the limit, a new
// connection is admitted by closing the connection that has been idle longest (a keep-alive
// connection between requests, or a new one that has sent nothing for newIdleAfter); when none
// is idle the new connection is an overflow connection (Conn.Overflow: the server serves it
// health checks and metrics only). Overflow connections are bounded too; beyond them a
// connection gets Config.Refusal at once. So idle clients cannot lock the server out, and
// health checks always get through. It is safe for concurrent use.
type Tracker struct {
	cfg       Config
	mu        sync.Mutex
	open      int // connections admitted within MaxConns
	overflow  int // overflow connections open
	maxOver   int
	idle      map[*Conn]struct{}
	all       map[*Conn]struct{}
	lingering int // connections in lingerClose

	draining atomic.Int64 // drains under way (Draining)
	// discarded counts the bytes dropped in the kernel (DiscardedBytes).
	discarded atomic.Int64
}

// OverflowConns is how many overflow connections may be open at once beside maxConns.
func OverflowConns(maxConns int) int { return max(16, maxConns/8) }

// NewTracker returns a Tracker for cfg.
func NewTracker(cfg Config) *Tracker {
	t := &Tracker{cfg: cfg, maxOver: OverflowConns(cfg.MaxConns), idle: map[*Conn]struct{}{}, all: map[*Conn]struct{}{}}
	return t
}

// Open is the number of connections open.
func (t *Tracker) Open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open + t.overflow
}

// Idle is the number of open connections waiting for their next request.
func (t *Tracker) Idle() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle)
}

// Lingering is the number of connections closing by lingering.
func (t *Tracker) Lingering() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lingering
}

// DiscardedBytes is the number of bytes dropped in the kernel so far.
func (t *Tracker) DiscardedBytes() int64 { return t.discarded.Load() }

// newIdleAfter: a new connection that has sent nothing for this long counts as idle.
const newIdleAfter = time.Second

// admit places a new connection, closing the longest-idle one at the limit; it reports false
// when the connection must be refused outright.
func (t *Tracker) admit(c *Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.place(c)
	if ok {
		t.all[c] = struct{}{}
	}
	return ok
}

// InterruptReads makes every read of a request in progress fail now (a drain ran out of
// time: requests still receiving their bodies are answered rather than waited for). Idle
// keep-alive connections are left alone: their clients keep the drain's last moment to send
// a request on them, as on any drain; interrupted, they were closed under a client that was
// about to.
func (t *Tracker) InterruptReads() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.all {
		if _, idle := t.idle[c]; !idle {
			c.Conn.SetReadDeadline(time.Now())
		}
	}
}

func (t *Tracker) place(c *Conn) bool {
	if t.open < t.cfg.MaxConns {
		t.open++
		c.counted = true
		t.markIdle(c, time.Now()) // a new connection is idle until its first byte
		return true
	}
	var victim *Conn
	now := time.Now()
	for o := range t.idle {
		if now.Sub(o.idleSince) < newIdleAfter && o.requests == 0 || PendingInput(o.Conn) {
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
		if f := t.cfg.ClosedIdle; f != nil {
			f()
		}
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

// CloseIdle closes the keep-alive connections waiting for their next request (the end of a
// drain), except those on which a request is arriving.
func (t *Tracker) CloseIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.idle {
		// Closed right after the check that no request is arriving on it: a client can only
		// race this with a request sent in the microseconds between the two.
		if c.requests > 0 && !PendingInput(c.Conn) {
			delete(t.idle, c)
			c.evicted = true
			t.open-- // its serving goroutine's close will not count it again
			c.Conn.Close()
		}
	}
}

// CloseQuietNew closes new connections that have sent nothing for newIdleAfter (the end of a
// drain: one that has not sent its request yet is not going to be served).
func (t *Tracker) CloseQuietNew() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for c := range t.idle {
		if c.requests == 0 && now.Sub(c.idleSince) >= newIdleAfter && !PendingInput(c.Conn) {
			delete(t.idle, c)
			c.evicted = true
			t.open--
			c.Conn.Close()
		}
	}
}

func (t *Tracker) markIdle(c *Conn, now time.Time) {
	c.idleSince = now
	t.idle[c] = struct{}{}
}

// Active notes that a request started on nc (fasthttp's ConnState StateActive).
func (t *Tracker) Active(nc net.Conn) {
	if c, ok := nc.(*Conn); ok {
		t.mu.Lock()
		delete(t.idle, c)
		c.requests++
		t.mu.Unlock()
	}
}

// Idled notes that nc waits for its next request (StateIdle).
func (t *Tracker) Idled(nc net.Conn) {
	if c, ok := nc.(*Conn); ok {
		t.mu.Lock()
		if !c.evicted && !c.gone {
			t.markIdle(c, time.Now())
		}
		t.mu.Unlock()
	}
}

// Closed notes that nc is closed or taken over (StateClosed, StateHijacked).
func (t *Tracker) Closed(nc net.Conn) {
	c, ok := nc.(*Conn)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
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

// refuse writes the refusal to a connection beyond every bound and closes it.
func (t *Tracker) refuse(nc net.Conn) {
	nc.SetWriteDeadline(time.Now().Add(time.Second))
	nc.Write(t.cfg.Refusal)
	nc.Close()
}

// Refusal builds the raw HTTP/1.1 answer that a Tracker writes to a connection it refuses: a
// 503 with a JSON body and Retry-After.
func Refusal(jsonBody, retryAfter string) []byte {
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: " + retryAfter +
		"\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(jsonBody)) + "\r\n\r\n" + jsonBody)
}

// listener wraps a server's listener: it admits each connection through the tracker (when it
// has one), and on Close it first accepts the connections already waiting in the kernel's
// backlog (they were accepted by TCP: they are served, not reset).
type listener struct {
	net.Listener
	t         *Tracker // nil: a Handoff listener's
	tls       *TLS     // nil: plain text
	mu        sync.Mutex
	closing   bool // stop has begun
	stopped   bool // the socket no longer listens: pending holds what was left
	closed    bool
	pending   []net.Conn
	done      chan struct{} // closed when stop has drained the backlog
	closedCh  chan struct{} // closed by Close
	stopOnce  sync.Once
	once      sync.Once
	unread    atomic.Int64 // a Handoff's: connections handed out that have not been read yet
	accepting atomic.Int64 // a Handoff's: Accepts under way on the socket

	beforeClose func() // tests: a delay before the close (a goroutine scheduled late)
}

// Listen wraps ln: its connections are admitted by t and are *Conn.
func (t *Tracker) Listen(ln net.Listener) net.Listener {
	return newListener(ln, t)
}

// ListenTLS wraps ln as Listen does, its connections speaking TLS as cfg says. What holds
// for plain text holds for them: the connection limit (a connection whose handshake has not
// finished is a new connection that has sent nothing, closed first at the limit once it has
// been so for a second), the backlog served on close, lingering closes; over every bound a
// connection is closed without an answer (a plain-text 503 would be garbage to a TLS client,
// and a handshake to send it costs what the bound is there to save).
func (t *Tracker) ListenTLS(ln net.Listener, cfg TLS) net.Listener {
	l := newListener(ln, t)
	l.tls = &cfg
	return l
}

func newListener(ln net.Listener, t *Tracker) *listener {
	return &listener{Listener: ln, t: t, done: make(chan struct{}), closedCh: make(chan struct{})}
}

// Handoff is a listener for a server that stops by closing its listener and then drops the
// connections it accepts (grpc-go's GracefulStop): Stop stops the socket listening first and
// hands the backlog to the server while it still serves. It bounds the connections open at
// once: one over the bound is closed as it is accepted (a gRPC client sees UNAVAILABLE and
// backs off), so clients of this listener cannot take the descriptors every listener shares.
type Handoff struct {
	l           *listener
	max         int64
	open        atomic.Int64
	refused     func()
	userTimeout time.Duration
}

// HandoffConfig configures a Handoff.
type HandoffConfig struct {
	// MaxConns bounds the connections open at once (0: no bound).
	MaxConns int
	// Refused, optional, is called for each connection closed over MaxConns.
	Refused func()
	// UserTimeout, where positive, is each connection's TCP_USER_TIMEOUT (Linux): how long
	// written data may stay unacknowledged before the connection is dropped. grpc-go sets it
	// on the connections it accepts itself, which are *net.TCPConn; these are wrapped.
	UserTimeout time.Duration
}

// NewHandoff wraps ln.
func NewHandoff(ln net.Listener, cfg HandoffConfig) *Handoff {
	return &Handoff{l: newListener(ln, nil), max: int64(cfg.MaxConns), refused: cfg.Refused, userTimeout: cfg.UserTimeout}
}

// Accept returns the next connection within the bound.
func (h *Handoff) Accept() (net.Conn, error) {
	for {
		c, err := h.l.Accept()
		if err != nil {
			return nil, err
		}
		if h.max > 0 && h.open.Load() >= h.max {
			if h.refused != nil {
				h.refused() // counted before the client can see the close
			}
			h.l.unread.Add(-1) // dropped unread: nothing for Stop to wait for
			c.Close()
			continue
		}
		h.open.Add(1)
		if h.userTimeout > 0 {
			setUserTimeout(c, h.userTimeout)
		}
		return &handoffConn{Conn: c, h: h}, nil
	}
}

func (h *Handoff) Close() error   { return h.l.Close() }
func (h *Handoff) Addr() net.Addr { return h.l.Addr() }

// Open counts the connections open.
func (h *Handoff) Open() int { return int(h.open.Load()) }

// handoffConn is a connection a Handoff hands out: within its bound until it is closed, and
// unread (Stop waits for it) until the server's first Read, which tells the listener that the
// server has taken it up.
type handoffConn struct {
	net.Conn
	h      *Handoff
	read   sync.Once
	closed sync.Once
}

func (c *handoffConn) taken() { c.h.l.unread.Add(-1) }

func (c *handoffConn) Read(b []byte) (int, error) {
	c.read.Do(c.taken)
	return c.Conn.Read(b)
}

func (c *handoffConn) Unwrap() net.Conn { return c.Conn }

// innermost is the connection c wraps, through every Unwrap.
func innermost(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			return c
		}
		c = u.Unwrap()
	}
}

func (c *handoffConn) Close() error {
	c.read.Do(c.taken) // dropped unread: nothing more to wait for
	c.closed.Do(func() { c.h.open.Add(-1) })
	return c.Conn.Close()
}

// Stop stops the socket listening (on Linux new connections are refused from then on;
// elsewhere they wait in the backlog until Close resets them) and waits, wait at most, until
// the server has accepted every connection that was in the backlog and read from each, as
// from every connection it accepted before: from then on they are the server's to answer (a
// server reads a connection only once it has decided to serve it). Accept then blocks until
// Close.
func (h *Handoff) Stop(wait time.Duration) {
	h.l.stop()
	for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(time.Millisecond) {
		h.l.mu.Lock()
		n := len(h.l.pending)
		h.l.mu.Unlock()
		if n == 0 && h.l.unread.Load() == 0 && h.l.accepting.Load() == 0 {
			return
		}
	}
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.pending) > 0 {
			c := l.pending[0]
			l.pending = l.pending[1:]
			if l.t == nil {
				l.unread.Add(1) // under mu: Stop sees it either pending or unread
				l.mu.Unlock()
				return c, nil // the Handoff wraps it
			}
			l.mu.Unlock()
			if wc := l.wrap(c); wc != nil {
				return wc, nil
			}
			continue
		}
		closed, stopped, closing := l.closed, l.stopped, l.closing
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if stopped {
			<-l.closedCh
			continue
		}
		if l.t == nil {
			l.accepting.Add(1)
		}
		c, err := l.Listener.Accept()
		if l.t == nil {
			if err == nil {
				l.unread.Add(1) // before accepting falls: Stop sees it in one or the other
			}
			l.accepting.Add(-1)
		}
		if err != nil {
			if closing || l.isClosing() {
				<-l.done
				continue // serve what the drain found, then report closed
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOBUFS) {
				// Out of file descriptors (or kernel memory) for a moment: the connection
				// waits in the backlog; fasthttp would take the error as the end of Serve.
				if l.t != nil && l.t.cfg.Refused != nil {
					l.t.cfg.Refused()
				}
				time.Sleep(acceptBackoff)
				continue
			}
			return nil, err
		}
		if l.t == nil {
			return c, nil // unread counted above; the Handoff wraps it
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
	c := newConn(nc, l.t, l.tls)
	if !l.t.admit(c) {
		if f := l.t.cfg.Refused; f != nil {
			f()
		}
		if l.tls != nil {
			nc.Close()
		} else {
			go l.t.refuse(nc)
		}
		return nil
	}
	return c
}

// Close stops accepting: connections already waiting in the backlog are accepted (and
// served) first, and the socket stops listening right after the last of them.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.stop()
		if l.beforeClose != nil {
			l.beforeClose()
		}
		err = l.Listener.Close()
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.closedCh)
	})
	return err
}

// stop takes the backlog into pending and stops the socket listening.
func (l *listener) stop() {
	l.stopOnce.Do(func() {
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
		last := stopListening(l.Listener) // what arrived since, then no more
		l.mu.Lock()
		l.pending = append(l.pending, last...)
		l.stopped = true
		l.mu.Unlock()
		close(l.done)
	})
}

// acceptBackoff is the pause after Accept ran out of file descriptors.
const acceptBackoff = 50 * time.Millisecond

// backlogDrain is how long Close keeps accepting the connections already in the backlog.
const backlogDrain = 20 * time.Millisecond
