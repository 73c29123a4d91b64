//go:build !linux

package gateway

import "testing"

// checkNoServerThreads: threads are not niced outside Linux.
func checkNoServerThreads(*testing.T) {}
