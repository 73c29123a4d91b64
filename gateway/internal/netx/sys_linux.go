//go:build linux

package netx

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// discardRead reads up to len(b) bytes from the connection's socket and drops them in the
// kernel (recv with MSG_TRUNC: TCP discards the bytes without copying them out), for a read
// whose buffer is the connection's discard buffer: what lands there is thrown away unread
// (a refused body drained so that the client reads the answer, a lingering close). b is not
// written. The copy it saves was a fifth of the CPU a refused body cost (docs/internals.md,
// "Kernel discards"). ok is false where the connection is not a socket: the caller then reads
// normally.
func (c *Conn) discardRead(b []byte) (n int, ok bool, err error) {
	raw := rawConn(c.Conn)
	if raw == nil {
		return 0, false, nil
	}
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		for {
			n, _, rerr = unix.Recvfrom(int(fd), b, unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			if rerr != unix.EINTR {
				break
			}
		}
		return rerr != unix.EAGAIN
	})
	switch {
	case err != nil: // a deadline, or the connection closed under the read
		return 0, true, err
	case rerr != nil:
		if errors.Is(rerr, unix.ECONNRESET) {
			return 0, true, syscall.ECONNRESET
		}
		return 0, true, rerr
	case n == 0:
		return 0, true, io.EOF
	}
	if c.t != nil {
		c.t.discarded.Add(int64(n))
	}
	return n, true, nil
}

// discardRegion is the region drains read into (drain.go): address space mapped without
// reserve, so only the pages that something copies into (what bufio had already buffered, a
// TLS connection's decrypted bytes) are ever backed by memory. nil if it cannot be mapped.
var discardRegion = sync.OnceValue(func() []byte {
	b, err := unix.Mmap(-1, 0, discardLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return b
})

// rawConn returns the socket under v (a connection or a listener), nil when there is none.
func rawConn(v any) syscall.RawConn {
	if sc, ok := v.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return raw
		}
	}
	return nil
}

// inBuffer reports whether b's bytes lie within buf's backing array.
func inBuffer(b, buf []byte) bool {
	if len(b) == 0 || cap(buf) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(cap(buf))
}

// PendingInput reports whether bytes from the client wait unread in nc's socket (a request on
// its way), so that a connection about to be closed as idle is spared.
func PendingInput(nc net.Conn) bool {
	raw := rawConn(nc)
	if raw == nil {
		return false
	}
	n := 0
	raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// stopListening takes, with accept4(2) on the socket itself, every connection whose handshake
// has completed and that waits in ln's accept queue, then stops the socket listening
// (shutdown(2): a connection still queued then is reset, a new one refused), and returns the
// connections taken. The kernel resets what is queued when a listening socket stops, so the
// gap between the last accept and the stop is where a client's connection completes, its
// request is written, and it is reset. Closing the listener leaves a gap of up to a
// scheduling delay (the close waits for the goroutine blocked in Accept to run); the two
// system calls back to back leave microseconds (docs/internals.md, "The backlog on close").
// Where the socket cannot be stopped so, the caller's Close stops it.
func stopListening(ln net.Listener) (taken []net.Conn) {
	rc := rawConn(ln)
	if rc == nil {
		return nil
	}
	var fds []int
	rc.Control(func(fd uintptr) {
		for {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if err != nil { // EAGAIN: the queue is empty (or out of descriptors)
				break
			}
			fds = append(fds, nfd)
		}
		unix.Shutdown(int(fd), unix.SHUT_RD)
	})
	for _, nfd := range fds {
		f := os.NewFile(uintptr(nfd), "accepted")
		c, err := net.FileConn(f) // a duplicate descriptor, in the poller
		f.Close()
		if err == nil {
			taken = append(taken, c)
		}
	}
	return taken
}

// setUserTimeout sets c's TCP_USER_TIMEOUT (c, or what it wraps, is a TCP connection).
func setUserTimeout(c net.Conn, d time.Duration) {
	if rc := rawConn(innermost(c)); rc != nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
	}
}
