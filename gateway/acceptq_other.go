//go:build !linux

package gateway

import "net"

// acceptQueued takes nothing here (see acceptq_linux.go).
func acceptQueued(net.Listener) []net.Conn { return nil }
