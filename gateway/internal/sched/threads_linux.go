//go:build linux

package sched

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// decodeNice is the niceness of decode threads, modelNice that of model threads: at 0, the
// threads that accept, refuse and answer outweigh them, and a model run (the pipeline's last
// stage, one thread in the shipped config) outweighs the decodes that feed it
// (docs/internals.md, "Thread priorities").
const (
	decodeNice = 5
	modelNice  = 2
	// heavyNice: a heavy image's decode (seconds of CPU) goes after ordinary requests.
	heavyNice = 10
)

// cpuSlice is the scheduler slice a CPU-bound stretch asks for (sched_setattr's sched_runtime,
// honoured by EEVDF, Linux 6.12 and later; older kernels ignore it): a thread woken with the
// default slice preempts it at once instead of waiting for its slice to end, and its share of
// the CPUs does not change (docs/internals.md, "Scheduler slice").
const cpuSlice = 5 * time.Millisecond

// maxIdle decode threads are kept for the next decodes; beyond, a thread ends once idle.
// Their number while busy is bounded by the callers (the decode workers), not here.
const maxIdle = 64

// Threads runs CPU-bound work on dedicated threads (see the package comment). Its methods are
// safe for concurrent use. Close it to end the idle decode threads.
type Threads struct {
	idle  chan *thread
	slice atomic.Bool // false once the kernel (or a seccomp profile) refuses sched_setattr

	mu     sync.Mutex
	closed bool
}

// thread is one decode thread: a goroutine locked to it for good, running the functions it is
// handed one at a time.
type thread struct {
	work chan func() error
	done chan result
	exit chan struct{} // closed when its goroutine (and so the thread) ends
}

// result is what a function handed to a thread returned, or panicked with.
type result struct {
	err   error
	panic any
}

// New returns a Threads with no thread yet. It probes whether the kernel takes a scheduler
// slice per thread (sched_setattr, which a seccomp profile may refuse).
func New() *Threads {
	t := &Threads{idle: make(chan *thread, maxIdle)}
	t.slice.Store(probeSlice())
	return t
}

// probeSlice sets the calling thread's scheduling attributes to what they are and reports
// whether the kernel took them.
func probeSlice() bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return false
	}
	a.Size = uint32(unsafe.Sizeof(unix.SchedAttr{}))
	return unix.SchedSetAttr(0, a, 0) == nil
}

// ModelLoop runs loop, a batch loop, on a model thread of its own (niceness modelNice) that
// ends with it, and returns at once. It is the batchers' batcher.Config.StartLoop.
func (t *Threads) ModelLoop(loop func()) { goDedicated(modelNice, loop) }

// goDedicated runs f on a new goroutine locked for good to an OS thread at niceness nice, and
// returns at once; the thread ends with f. It is never the process's main thread: the runtime
// keeps that one when a goroutine locked to it ends, and it would stay at nice for the life of
// the process.
func goDedicated(nice int, f func()) {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if unix.Gettid() != unix.Getpid() {
			setNice(nice)
			f()
			return
		}
		// The main thread: hold it until f's goroutine is locked to another one.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			setNice(nice)
			f()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// Decode runs f, a CPU-bound stretch (an image decode), on a decode thread and returns its
// error; a panic in f is raised again in the caller.
func (t *Threads) Decode(f func() error) error {
	var th *thread
	select {
	case th = <-t.idle:
	default:
		th = t.newThread()
	}
	th.work <- f
	r := <-th.done
	t.putIdle(th)
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}

// putIdle keeps th for the next decode, or ends it (Close has run, or maxIdle are kept).
func (t *Threads) putIdle(th *thread) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		select {
		case t.idle <- th:
			return
		default:
		}
	}
	close(th.work)
}

func (t *Threads) newThread() *thread {
	th := &thread{work: make(chan func() error), done: make(chan result), exit: make(chan struct{})}
	goDedicated(decodeNice, func() {
		defer close(th.exit)
		if t.slice.Load() && !setSlice(cpuSlice) { // once: the thread does nothing else
			t.slice.Store(false)
		}
		for f := range th.work {
			th.done <- runCatching(f)
		}
	})
	return th
}

// runCatching runs f and returns its error, or what it panicked with.
func runCatching(f func() error) (r result) {
	defer func() { r.panic = recover() }()
	return result{err: f()}
}

// Heavy runs f on an OS thread of its own at niceness heavyNice and returns its error. The
// thread ends with f: made nicer, it could not run ordinary work again.
func (t *Threads) Heavy(f func() error) error {
	done := make(chan error, 1)
	goDedicated(heavyNice, func() { done <- f() })
	return <-done
}

// CPUBound runs f, a CPU-bound stretch (a model run), on its thread with the slice cpuSlice,
// and gives the thread back with the default slice.
func (t *Threads) CPUBound(f func() error) error {
	if !t.slice.Load() {
		return f()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !setSlice(cpuSlice) {
		t.slice.Store(false)
		return f()
	}
	defer setSlice(0) // 0: the default slice
	return f()
}

// Close ends the idle decode threads and waits until they have; a decode still running ends
// its thread when it returns. Decodes after Close run on threads that end after them.
func (t *Threads) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	for {
		select {
		case th := <-t.idle:
			close(th.work)
			<-th.exit
		default:
			return
		}
	}
}

// setNice sets the calling OS thread's niceness; where the kernel refuses, the thread keeps
// its own.
func setNice(n int) { unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), n) }

// setSlice sets the calling thread's slice to d (0: the default), keeping its policy and its
// niceness (sched_setattr sets both: a zero Nice field would make the thread's niceness 0).
func setSlice(d time.Duration) bool {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return false
	}
	a.Size, a.Runtime = uint32(unsafe.Sizeof(unix.SchedAttr{})), uint64(d)
	return unix.SchedSetAttr(0, a, 0) == nil
}
