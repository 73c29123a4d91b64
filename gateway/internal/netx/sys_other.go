//go:build !linux

package netx

import (
	"net"
	"time"
)

// discardRead is Linux's (recv with MSG_TRUNC); elsewhere discarded bytes are read normally.
func (c *Conn) discardRead(b []byte) (n int, ok bool, err error) { return 0, false, nil }

func inBuffer(b, buf []byte) bool { return false }

// discardRegion is Linux's: elsewhere a drain reads into a pooled buffer.
func discardRegion() []byte { return nil }

// PendingInput cannot look into the socket here: an idle connection is assumed idle.
func PendingInput(net.Conn) bool { return false }

// stopListening takes nothing here (see sys_linux.go): Close's own close stops the socket.
func stopListening(net.Listener) []net.Conn { return nil }

// setUserTimeout is Linux's (TCP_USER_TIMEOUT).
func setUserTimeout(net.Conn, time.Duration) {}
