//go:build linux

package netx

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Watcher notices clients that close their connection while their request waits in a queue,
// so the request is dropped before it runs (its context is cancelled and the batcher removes
// it). Each waiting request's connection is registered, for EPOLLRDHUP only (the peer closed
// or shut down its sending side; a reset comes as EPOLLHUP/EPOLLERR), in an epoll set of the
// watcher's own, beside Go's poller; one goroutine waits on it. The cost is two epoll_ctl
// calls a request and nothing while no client leaves (docs/internals.md, "The client-gone
// watcher").
//
// What is detected: a TCP client that closes its connection (or half-closes it with
// shutdown(SHUT_WR)) while its request is queued or being decoded. What is not: a client that
// vanishes without a FIN or RST (a dead host: only TCP keep-alive or the request's deadline
// notice it), connections that are not plain *net.TCPConn (TLS, unix sockets), and a client
// gone after its request was taken into a batch (the batch runs; the answer is discarded).
// Its methods are safe for concurrent use; Close it to end its goroutine and descriptors.
type Watcher struct {
	epfd, stopfd int // the epoll set; an eventfd in it that stops the loop
	mu           sync.Mutex
	waiters      map[int]*goneWaiter // by fd
	gen          uint32              // registrations so far: tells an fd's waiters apart
	stopOnce     sync.Once
	done         chan struct{}
	events       atomic.Int64 // connection events seen (tests: none repeats)
}

type goneWaiter struct {
	fd     int
	gen    uint32
	cancel func()
}

// NewWatcher returns a watcher, or nil (which watches nothing) where the kernel refuses an
// epoll set or an eventfd: requests of clients that went away are then bounded by their
// deadline.
func NewWatcher() *Watcher {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	stopfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(stopfd)}
	if unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, stopfd, &ev) != nil {
		unix.Close(epfd)
		unix.Close(stopfd)
		return nil
	}
	w := &Watcher{epfd: epfd, stopfd: stopfd, waiters: map[int]*goneWaiter{}, done: make(chan struct{})}
	go w.loop()
	return w
}

// Watch calls cancel if conn's peer closes before the returned release func is called.
// It returns a no-op release for connections it cannot watch.
func (w *Watcher) Watch(conn net.Conn, cancel func()) (release func()) {
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
	// The fd stays open while it is registered: a handler releases before it returns, and
	// fasthttp closes a connection only after its handler returned. Registration and removal
	// happen under mu, so an event is acted on only for the registration it was raised for
	// (the generation in its data), even after the fd was released and registered again.
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	wt := &goneWaiter{fd: fd, gen: w.gen, cancel: cancel}
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP, Fd: int32(fd), Pad: int32(wt.gen)}
	err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	if errors.Is(err, unix.EEXIST) { // left by a registration that could not be removed
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
	}
	if err != nil {
		return func() {}
	}
	w.waiters[fd] = wt
	return func() {
		w.mu.Lock()
		if w.waiters[fd] == wt {
			delete(w.waiters, fd)
			unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		}
		w.mu.Unlock()
	}
}

func (w *Watcher) loop() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 64)
	var gone []*goneWaiter
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		w.mu.Lock()
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == w.stopfd {
				w.mu.Unlock()
				return
			}
			w.events.Add(1)
			if wt := w.waiters[fd]; wt != nil && wt.gen == uint32(ev.Pad) {
				delete(w.waiters, fd)
				unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
				gone = append(gone, wt)
			}
		}
		w.mu.Unlock()
		for i, wt := range gone {
			wt.cancel()
			gone[i] = nil
		}
		gone = gone[:0]
	}
}

// Close stops the watcher's goroutine and closes its descriptors.
func (w *Watcher) Close() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		unix.Write(w.stopfd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-w.done
		unix.Close(w.epfd)
		unix.Close(w.stopfd)
	})
}
