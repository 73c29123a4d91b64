//go:build linux

package gateway

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// pendingInput reports whether bytes from the client wait unread in the connection's socket
// (a request on its way), so that a connection about to be closed as idle is spared.
func pendingInput(c *conn) bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}
