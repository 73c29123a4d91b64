// Package sched runs the gateway's CPU-bound work on operating-system threads set up for it,
// so that the threads that accept connections, refuse requests, answer probes and write
// answers never wait behind it:
//
//   - Threads.Decode runs an image decode on a dedicated decode thread: nicer than the rest
//     (decodeNice) and with a longer scheduler slice (cpuSlice), kept for the next decode;
//   - Threads.Heavy runs a heavy decode (a huge canvas) on a thread of its own at heavyNice,
//     which ends with it;
//   - Threads.ModelLoop runs a batch loop on a model thread of its own (modelNice): it is the
//     batchers' StartLoop;
//   - Threads.CPUBound runs a model run with the longer slice on the caller's thread, and
//     gives the thread back with the default slice.
//
// A thread made nicer cannot be made less nice again without privileges: every thread set up
// here is dedicated to its kind of work until it ends. A Threads is an owned value: the
// Server creates one and closes it on Shutdown, which ends the idle decode threads. It holds
// no process-wide state and imports nothing of this module. Outside Linux every call runs f
// on the caller's thread.
package sched
