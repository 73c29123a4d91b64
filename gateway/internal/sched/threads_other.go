//go:build !linux

package sched

// Threads runs every function on the caller's thread here: there is no per-thread niceness or
// scheduler slice to set.
type Threads struct{}

// New returns a Threads.
func New() *Threads { return &Threads{} }

// ModelLoop runs loop on a goroutine of its own.
func (t *Threads) ModelLoop(loop func()) { go loop() }

// Decode runs f.
func (t *Threads) Decode(f func() error) error { return f() }

// Heavy runs f.
func (t *Threads) Heavy(f func() error) error { return f() }

// CPUBound runs f.
func (t *Threads) CPUBound(f func() error) error { return f() }

// Close does nothing here.
func (t *Threads) Close() {}
