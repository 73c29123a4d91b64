//go:build !linux

package gateway

// discardRead is Linux's (recv with MSG_TRUNC); elsewhere discarded bytes are read normally.
func (c *conn) discardRead(b []byte) (n int, ok bool, err error) { return 0, false, nil }

func inBuffer(b, buf []byte) bool { return false }
