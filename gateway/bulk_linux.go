//go:build linux

package gateway

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// bulkNice is the scheduling niceness of the threads that decode images, and modelNice that
// of the threads that run models. The CPUs are saturated by such work under overload, and the
// threads that accept connections, refuse requests, answer probes and write answers (and the
// clients, on a shared machine) must not wait behind it: at niceness 0 they have 1.6 times a
// model thread's weight and three times a decode thread's. It changes no share while the
// latency-sensitive threads sleep, which is nearly all the time (a refusal is about 100 µs of
// CPU). Under 4x overload on 2 CPUs (bench/history.md), refusals took 9.1-9.5 ms at p99 as the
// client saw them with every thread at 0, and 4.4-4.9 ms with decodes and model runs at 5.
//
// Model runs weigh twice what decodes do because they are the pipeline's last stage and few:
// the shipped config runs one model thread beside the decode workers (configs/gateway.yaml).
// At equal weight that thread gets 2/3 of a CPU against two decode threads on 2 CPUs, too
// little at moderate load: decoded images waited for it while the decode workers, their
// clients waiting in turn, had nothing to do (closed loop, c=8: 10-15 % fewer requests a
// second than with two model threads). At modelNice (weight 655 against 335) it has a whole
// CPU whenever it has a batch, and the decodes share what is left.
//
// A thread made nicer cannot be made less nice again without privileges, so the threads
// that run at these levels are dedicated to such work for good: decodes are handed to a pool
// of them (bulkRun), and each batch loop's thread is made one (ModelThread).
const (
	bulkNice  = 5
	modelNice = 2
)

// ModelThread makes the calling OS thread a model thread (niceness modelNice), for good; the
// caller must have locked its goroutine to the thread and must not unlock it (the thread then
// exits with the goroutine). cmd/gateway passes it to each batch loop (batcher.Config's
// ThreadInit).
func ModelThread() { setNice(modelNice) }

// setNice sets the calling OS thread's niceness; where the kernel refuses, the thread keeps
// its own.
func setNice(n int) { unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), n) }

// bulkThread is one dedicated bulk thread: a goroutine locked to it for good, with the
// scheduler slice cpuSlice, running the functions it is handed, one at a time.
type bulkThread struct {
	work chan func() error
	done chan bulkResult
}

// bulkResult is what a function handed to a bulk thread returned, or panicked with.
type bulkResult struct {
	err   error
	panic any
}

// bulkIdle holds the idle bulk threads. Stretches run at once on an idle thread, or on a new
// one: their number is bounded by the callers (decode workers), not here. Threads beyond
// maxIdleBulk once idle end.
const maxIdleBulk = 64

var bulkIdle = make(chan *bulkThread, maxIdleBulk)

func newBulkThread() *bulkThread {
	t := &bulkThread{work: make(chan func() error), done: make(chan bulkResult)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		setNice(bulkNice)
		if sliceOK.Load() && !setSlice(cpuSlice) { // once: the thread does nothing else
			sliceOK.Store(false)
		}
		for f := range t.work {
			t.done <- runCatching(f)
		}
	}()
	return t
}

// runCatching runs f and returns its error, or what it panicked with.
func runCatching(f func() error) (r bulkResult) {
	defer func() { r.panic = recover() }()
	return bulkResult{err: f()}
}

// bulkRun runs f, a CPU-bound stretch (an image decode), on a bulk thread with the scheduler
// slice cpuSlice, and returns its error; a panic in f is raised again in the caller.
func bulkRun(f func() error) error {
	var t *bulkThread
	select {
	case t = <-bulkIdle:
	default:
		t = newBulkThread()
	}
	t.work <- f
	r := <-t.done
	select {
	case bulkIdle <- t:
	default:
		close(t.work)
	}
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}
