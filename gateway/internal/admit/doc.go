// Package admit holds the gateway's admission control over its two scarce resources: the
// memory budget shared by every request in flight (Budget), and the decode workers with their
// deadline-aware queue (DecodeGate). Both refuse at once rather than queue without bound, and
// the gate refuses a request that its prediction says cannot make its deadline. It imports
// nothing of this module but internal/queue.
package admit
