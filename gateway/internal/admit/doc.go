// Package admit is the gateway's admission control, the one owner of who is admitted and who
// waits: the memory budget shared by every request in flight (Budget), the decode workers with
// their deadline-aware queue (DecodeGate), the queue-target policy that keeps the line to each
// model's target (Line, by its Discipline), and the door that decides a request before its body
// is read (Control.Door). Everything refuses at once rather than queue without bound; a waiter
// dropped after its wait is told apart (ErrWaited). It imports nothing of this module but
// internal/queue.
package admit
