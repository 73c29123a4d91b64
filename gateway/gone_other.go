//go:build !linux

package gateway

import "net"

// goneWatcher detects nothing outside Linux (it relies on epoll's EPOLLRDHUP); requests of clients
// that went away are still bounded by their deadline.
type goneWatcher struct{}

func newGoneWatcher() *goneWatcher { return &goneWatcher{} }

func (w *goneWatcher) watch(net.Conn, func()) func() { return func() {} }

func (w *goneWatcher) close() {}
