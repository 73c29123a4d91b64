package batcher

import (
	"context"
	"runtime"
	"time"
)

// loopState is owned by one batch loop goroutine.
type loopState[In, Out any] struct {
	instance int
	items    []*item[In, Out]
	ins      []In
	outs     []Out
	timer    *time.Timer
	dispatch time.Time
	drops    [2]int // expired, canceled found while assembling
}

// loop is one run instance. Loops take turns as the single assembler (the
// holder of b.tok) and release the turn before running, so the next batch is
// assembled while this one runs. A loop that is running holds no queued item.
func (b *Batcher[In, Out]) loop(instance int) {
	if b.cfg.CostClock != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	m := b.cfg.MaxBatchSize
	l := &loopState[In, Out]{
		instance: instance,
		items:    make([]*item[In, Out], 0, m),
		ins:      make([]In, m),
		outs:     make([]Out, m),
		timer:    time.NewTimer(time.Hour),
	}
	l.timer.Stop()
	defer func() {
		if b.running.Add(-1) == 0 {
			close(b.done)
		}
	}()
	for {
		<-b.tok
		exit := b.assemble(l)
		b.tok <- struct{}{}
		if exit {
			return
		}
		b.report(l)
		b.runBatch(l)
	}
}

// assemble waits until a batch can be dispatched and moves its items into
// l.items. It reports true when the batcher is closed and the queue is empty.
func (b *Batcher[In, Out]) assemble(l *loopState[In, Out]) (exit bool) {
	b.mu.Lock()
	for {
		b.asmWaiting = false
		if b.n == 0 {
			if b.closed {
				b.mu.Unlock()
				return true
			}
			b.asmWaiting = true
			b.mu.Unlock()
			<-b.notify
			b.mu.Lock()
			continue
		}
		now := time.Now()
		size, until := b.decide(now)
		if size > 0 {
			b.take(l, size, now)
			if len(l.items) > 0 {
				b.mu.Unlock()
				return false
			}
			continue // everything taken had expired
		}
		b.asmWaiting = true
		b.mu.Unlock()
		l.timer.Reset(until.Sub(now))
		select {
		case <-b.notify:
		case <-l.timer.C:
		}
		l.timer.Stop()
		b.mu.Lock()
	}
}

// decide returns the size of the batch to dispatch now, or 0 and the time
// at which to decide again (earlier if an arrival wakes the assembler).
// b.mu must be held and b.n > 0.
func (b *Batcher[In, Out]) decide(now time.Time) (int, time.Time) {
	n, m := b.n, b.cfg.MaxBatchSize
	if b.adaptive {
		// The largest batch worth forming now: the measured most efficient size, or a size
		// being explored (see efficiency).
		m = b.eff.limit()
	}
	if n >= m {
		return m, time.Time{}
	}
	if b.closed {
		return n, time.Time{}
	}
	for i := len(b.prefs) - 1; i >= 0; i-- {
		if b.prefs[i] <= n {
			return b.prefs[i], time.Time{}
		}
	}
	t0 := b.oldest()
	if !b.adaptive {
		until := t0.Add(b.cfg.MaxQueueDelay)
		if !now.Before(until) {
			return n, time.Time{}
		}
		return 0, until
	}
	if b.idleStart || !b.eff.worthWaiting(n, m, &b.model) {
		return n, time.Time{}
	}
	latest := t0.Add(b.cfg.Adaptive.LatencyTarget - b.model.predict(n+1))
	if d := b.cfg.MaxQueueDelay; d > 0 && t0.Add(d).Before(latest) {
		latest = t0.Add(d)
	}
	g := b.model.meanGap()
	next := b.model.lastArrival.Add(g)       // expected next arrival
	paused := b.model.lastArrival.Add(2 * g) // overdue by a full gap
	if !now.Before(latest) || !next.Before(latest) || !now.Before(paused) {
		return n, time.Time{}
	}
	return 0, minTime(latest, paused)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// take moves up to size live items, highest level first, into l.items.
// Items whose context ended or whose deadline passed are answered instead
// and do not count. b.mu must be held.
func (b *Batcher[In, Out]) take(l *loopState[In, Out], size int, now time.Time) {
	var zero In
	k := 0
	for lv := len(b.levels) - 1; lv >= 0 && k < size; lv-- {
		for k < size {
			it := b.levels[lv].Front()
			if it == nil {
				break
			}
			b.remove(it)
			err := it.ctx.Err()
			if d := it.Deadline(); err == nil && !d.IsZero() && !now.Before(d) {
				err = context.DeadlineExceeded
			}
			if err != nil {
				it.in = zero
				it.err = err
				if b.countDrop(err) == DropExpired {
					l.drops[0]++
				} else {
					l.drops[1]++
				}
				it.reply <- struct{}{}
				continue
			}
			l.ins[k] = it.in
			it.in = zero
			l.items = append(l.items, it)
			k++
		}
	}
	l.dispatch = now
	b.idleStart = false
	if k > 0 {
		b.inflight++
	}
}

// report calls the hooks for the batch just assembled, without the lock.
func (b *Batcher[In, Out]) report(l *loopState[In, Out]) {
	if h := b.hooks.Dropped; h != nil {
		for range l.drops[0] {
			h(DropExpired)
		}
		for range l.drops[1] {
			h(DropCanceled)
		}
	}
	l.drops = [2]int{}
	if h := b.hooks.QueueWait; h != nil {
		for _, it := range l.items {
			h(l.dispatch.Sub(it.Enqueued()))
		}
	}
}

// runBatch runs l.items and answers each of them.
func (b *Batcher[In, Out]) runBatch(l *loopState[In, Out]) {
	n := len(l.items)
	ins, outs := l.ins[:n], l.outs[:n]
	var cost0 time.Duration
	if b.cfg.CostClock != nil {
		cost0 = b.cfg.CostClock()
	}
	start := time.Now()
	runErr := b.run(l.instance, ins, outs)
	d := time.Since(start)
	cost := d
	if b.cfg.CostClock != nil {
		cost = b.cfg.CostClock() - cost0
	}
	clear(ins)
	var err error
	if runErr != nil {
		err = &RunError{Instance: l.instance, Size: n, Err: runErr}
	}
	// Counted before the answers go: a caller that has its answer finds its batch counted.
	if h := b.hooks.Batch; h != nil {
		h(l.instance, n, d, runErr)
	}
	var zero Out
	for i, it := range l.items {
		if err == nil {
			it.out = outs[i]
		}
		outs[i] = zero
		it.err = err
		l.items[i] = nil
		it.reply <- struct{}{} // it belongs to its caller from here on
	}
	l.items = l.items[:0]

	b.mu.Lock()
	b.inflight--
	b.st.Batches++
	if err == nil {
		b.st.Completed += uint64(n)
		b.model.observe(n, d)
		if b.adaptive {
			b.eff.observe(n, float64(cost))
		}
	} else {
		b.st.Failed += uint64(n)
	}
	b.mu.Unlock()
}
