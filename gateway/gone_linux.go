//go:build linux

package gateway

import (
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// goneWatcher notices clients that close their connection while their request waits in a
// queue, so the request is dropped before it runs (its context is cancelled and the batcher
// removes it). One goroutine polls every registered connection for POLLRDHUP (the peer closed
// or shut down its sending side) every interval, and only while some request is waiting.
//
// What is detected: a TCP client that closes its connection (or half-closes it with
// shutdown(SHUT_WR)) while its request is queued or being decoded. What is not: a client that
// vanishes without a FIN or RST (a dead host: only TCP keep-alive or the request's deadline
// notice it), connections that are not plain *net.TCPConn (TLS, unix sockets), and a client
// gone after its request was taken into a batch (the batch runs; the answer is discarded).
type goneWatcher struct {
	interval time.Duration
	mu       sync.Mutex
	waiters  map[int]*goneWaiter // by fd
	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	pollfds  []unix.PollFd
	polled   []*goneWaiter // the waiter of each pollfds entry when the snapshot was taken
}

type goneWaiter struct {
	fd     int
	cancel func()
}

func newGoneWatcher(interval time.Duration) *goneWatcher {
	w := &goneWatcher{
		interval: interval,
		waiters:  map[int]*goneWaiter{},
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go w.loop()
	return w
}

// watch calls cancel if conn's peer closes before the returned release func is called.
// It returns a no-op release for connections it cannot watch.
func (w *goneWatcher) watch(conn net.Conn, cancel func()) (release func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok || w == nil {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	fd := -1
	raw.Control(func(f uintptr) { fd = int(f) })
	if fd < 0 {
		return func() {}
	}
	wt := &goneWaiter{fd: fd, cancel: cancel}
	w.mu.Lock()
	w.waiters[fd] = wt
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return func() {
		w.mu.Lock()
		if w.waiters[fd] == wt {
			delete(w.waiters, fd)
		}
		w.mu.Unlock()
	}
}

func (w *goneWatcher) loop() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		w.mu.Lock()
		n := len(w.waiters)
		w.mu.Unlock()
		if n == 0 {
			select {
			case <-w.wake:
			case <-w.stop:
				return
			}
		}
		select {
		case <-t.C:
		case <-w.stop:
			return
		}
		w.poll()
	}
}

func (w *goneWatcher) poll() {
	w.mu.Lock()
	w.pollfds, w.polled = w.pollfds[:0], w.polled[:0]
	for fd, wt := range w.waiters {
		w.pollfds = append(w.pollfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLRDHUP})
		w.polled = append(w.polled, wt)
	}
	w.mu.Unlock()
	if len(w.pollfds) == 0 {
		return
	}
	// The fds stay open while they are registered: a handler unregisters before it returns,
	// and fasthttp closes a connection only after its handler returned. An fd unregistered
	// (and even reused by a new registration) during this poll is acted on only if the same
	// waiter still holds it.
	n, err := unix.Poll(w.pollfds, 0)
	if err != nil || n == 0 {
		return
	}
	var gone []*goneWaiter
	w.mu.Lock()
	for i, p := range w.pollfds {
		if p.Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
			if wt := w.waiters[int(p.Fd)]; wt != nil && wt == w.polled[i] {
				delete(w.waiters, int(p.Fd))
				gone = append(gone, wt)
			}
		}
	}
	clear(w.polled)
	w.mu.Unlock()
	for _, wt := range gone {
		wt.cancel()
	}
}

func (w *goneWatcher) close() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}
