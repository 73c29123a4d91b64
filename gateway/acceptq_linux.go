//go:build linux

package gateway

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// acceptQueued takes, with accept4(2) on the socket itself, every connection whose handshake
// has completed and that waits in ln's accept queue, and returns them. Close calls it right
// before closing the socket: the kernel resets what is still queued when a listening socket
// closes, and Accept through the poller leaves a gap of up to a scheduling delay (milliseconds
// on a saturated machine) between its last connection and the close, in which a client's
// connection completes, its request is written, and it is reset (1 SIGTERM run in 7 under 3x
// overload lost 3 requests so). This leaves microseconds.
func acceptQueued(ln net.Listener) []net.Conn {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var out []net.Conn
	rc.Control(func(fd uintptr) {
		for {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if err != nil { // EAGAIN: the queue is empty (or out of descriptors)
				return
			}
			f := os.NewFile(uintptr(nfd), "accepted")
			c, err := net.FileConn(f) // a duplicate descriptor, in the poller
			f.Close()
			if err == nil {
				out = append(out, c)
			}
		}
	})
	return out
}
