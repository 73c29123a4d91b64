package admit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

const noDownstream = time.Duration(0)

// acquireAsync starts an acquire and returns a channel with its result.
func acquireAsync(g *DecodeGate, ctx context.Context, deadline time.Time, cost int64, heavy bool) chan error {
	ch := make(chan error, 1)
	go func() { ch <- g.Acquire(ctx, deadline, 0, cost, heavy, noDownstream) }()
	return ch
}

func TestDecodeGateWorkersQueueAndOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewDecodeGate(2, 2, NewBudget(1<<30), NewLine(Predict))
		ctx, far := context.Background(), time.Now().Add(time.Hour)
		for range 2 {
			if err := g.Acquire(ctx, far, 0, 1, false, noDownstream); err != nil {
				t.Fatal(err)
			}
		}
		a := acquireAsync(g, ctx, far, 1, false)
		synctest.Wait()
		b := acquireAsync(g, ctx, far, 1, false)
		synctest.Wait()
		if err := g.Acquire(ctx, far, 0, 1, false, noDownstream); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("a third waiter with a queue of 2: %v", err)
		}
		g.Release(1, false, 10*time.Millisecond)
		synctest.Wait()
		select {
		case err := <-a:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("the oldest waiter did not get the freed worker")
		}
		select {
		case <-b:
			t.Fatal("the second waiter ran without a free worker")
		default:
		}
		g.Release(1, false, 10*time.Millisecond)
		synctest.Wait()
		if err := <-b; err != nil {
			t.Fatal(err)
		}
	})
}

// TestDecodeGateDeadlines: a request that cannot be decoded before its deadline is refused on
// arrival; a waiter whose deadline can no longer be met when a worker frees up is dropped, not
// decoded; a waiter whose context ends leaves the queue.
func TestDecodeGateDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewDecodeGate(1, 8, NewBudget(1<<30), NewLine(Predict))
		ctx := context.Background()
		g.svc.observe(float64(100 * time.Millisecond)) // decodes take 100 ms
		if err := g.Acquire(ctx, time.Now().Add(time.Hour), 0, 1, false, noDownstream); err != nil {
			t.Fatal(err)
		}
		// Behind one running decode: 100 ms of wait + 100 ms of decode > 150 ms.
		if err := g.Acquire(ctx, time.Now().Add(150*time.Millisecond), 0, 1, false, noDownstream); !errors.Is(err, ErrShed) {
			t.Fatalf("a deadline that cannot be met: %v", err)
		}
		// Admitted with 250 ms, but the running decode takes 400 ms: dropped at dispatch.
		late := acquireAsync(g, ctx, time.Now().Add(250*time.Millisecond), 1, false)
		ctxGone, cancel := context.WithCancel(ctx)
		gone := acquireAsync(g, ctxGone, time.Now().Add(time.Hour), 1, false)
		ok := acquireAsync(g, ctx, time.Now().Add(time.Hour), 1, false)
		synctest.Wait()
		cancel()
		synctest.Wait()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiter whose context ended: %v", err)
		}
		time.Sleep(400 * time.Millisecond)
		g.Release(1, false, 400*time.Millisecond)
		synctest.Wait()
		if err := <-late; !errors.Is(err, ErrShed) {
			t.Fatalf("a waiter past hope: %v", err)
		}
		if err := <-ok; err != nil {
			t.Fatalf("the next waiter: %v", err)
		}
		if w, busy := g.Stats(); w != 0 || busy != 1 {
			t.Fatalf("waiting %d, busy %d", w, busy)
		}
	})
}

// TestDecodeGateHeavyAndMemory: heavy images use at most half the workers, ordinary ones pass
// them; decode memory waits for running decodes, but not for memory held elsewhere.
func TestDecodeGateHeavyAndMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := NewBudget(100)
		g := NewDecodeGate(2, 8, mem, NewLine(Predict))
		ctx, far := context.Background(), time.Now().Add(time.Hour)
		if err := g.Acquire(ctx, far, 0, 10, true, noDownstream); err != nil {
			t.Fatal(err)
		}
		heavy := acquireAsync(g, ctx, far, 10, true)
		normal := acquireAsync(g, ctx, far, 10, false)
		synctest.Wait()
		if err := <-normal; err != nil {
			t.Fatalf("an ordinary image behind a waiting heavy one: %v", err)
		}
		select {
		case <-heavy:
			t.Fatal("a second heavy decode ran beside the first")
		default:
		}
		g.Release(10, true, time.Millisecond)
		synctest.Wait()
		if err := <-heavy; err != nil {
			t.Fatal(err)
		}
		g.Release(10, true, time.Millisecond)
		g.Release(10, false, time.Millisecond)
		// 70 bytes held by decodes: a 50-byte one waits for them.
		if err := g.Acquire(ctx, far, 0, 70, false, noDownstream); err != nil {
			t.Fatal(err)
		}
		wait := acquireAsync(g, ctx, far, 50, false)
		synctest.Wait()
		g.Release(70, false, time.Millisecond)
		synctest.Wait()
		if err := <-wait; err != nil {
			t.Fatal(err)
		}
		g.Release(50, false, time.Millisecond)
		// 80 bytes held by bodies: a 50-byte decode is refused at once.
		if !mem.Reserve(80) {
			t.Fatal("reserve")
		}
		if err := g.Acquire(ctx, far, 0, 50, false, noDownstream); !errors.Is(err, ErrMemory) {
			t.Fatalf("decode memory held by bodies: %v", err)
		}
		if err := g.Acquire(ctx, far, 0, 101, false, noDownstream); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("a decode larger than the budget: %v", err)
		}
		mem.Release(80)
		if mem.Used() != 0 || g.decodeHeld != 0 {
			t.Fatalf("budget %d, decode held %d after every release", mem.Used(), g.decodeHeld)
		}
	})
}

// TestDecodeGateOutlierDoesNotLockOut: a decode that takes 200 times the usual raises the
// average by at most 30 %, and an idle gate predicts no wait whatever its average, so that
// requests with tight deadlines keep being admitted, decoded and measured.
func TestDecodeGateOutlierDoesNotLockOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewDecodeGate(2, 8, NewBudget(1<<30), NewLine(Predict))
		ctx, far := context.Background(), time.Now().Add(time.Hour)
		decode := func(took time.Duration) {
			if err := g.Acquire(ctx, far, 0, 1, false, noDownstream); err != nil {
				t.Fatal(err)
			}
			g.Release(1, false, took)
		}
		for range 20 {
			decode(10 * time.Millisecond)
		}
		decode(2 * time.Second)
		if svc := g.svc.duration(); svc > 13*time.Millisecond {
			t.Fatalf("one 2 s decode among 10 ms ones raised the average to %v", svc)
		}
		if w := g.PredictWait(); w != 0 {
			t.Fatalf("an idle gate predicts %v", w)
		}
		// Busy: the wait counts again.
		for range 2 {
			if err := g.Acquire(ctx, far, 0, 1, false, noDownstream); err != nil {
				t.Fatal(err)
			}
		}
		if w := g.PredictWait(); w < 10*time.Millisecond || w > 40*time.Millisecond {
			t.Fatalf("both workers busy: predicted %v", w)
		}
		g.Release(1, false, 0)
		g.Release(1, false, 0)
		// A lasting change is followed: decodes that all take 200 ms carry the average there.
		for range 40 {
			decode(200 * time.Millisecond)
		}
		if svc := g.svc.duration(); svc < 190*time.Millisecond {
			t.Fatalf("after 40 decodes of 200 ms the average is %v", svc)
		}
	})
}

// learn has the gate measure an ordinary decode time of svc.
func learn(t *testing.T, g *DecodeGate, svc time.Duration) {
	t.Helper()
	if err := g.Acquire(context.Background(), time.Now().Add(time.Hour), 0, 1, false, noDownstream); err != nil {
		t.Fatal(err)
	}
	g.Release(1, false, svc)
}

// TestDecodeGateQueueTarget: under Predict the queue is bounded by time. Once the line
// (waiters and incoming requests) has stood at Floor or more with a predicted wait over
// the target for standInterval, a request predicted to wait past its target is refused at
// once (ErrQueueTime), not queued, even with a far deadline and room in the count; requests
// admitted and still reading their bodies (Admitted) count in line for incomingHorizon; the
// waiters admitted are served, late, not refused late. A burst shorter than standInterval,
// or a shorter line, is queued.
func TestDecodeGateQueueTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewDecodeGate(1, 100, NewBudget(1<<30), NewLine(Predict))
		learn(t, g, 10*time.Millisecond)
		ctx, far, target := context.Background(), time.Now().Add(time.Hour), 25*time.Millisecond
		if err := g.Acquire(ctx, far, target, 1, false, noDownstream); err != nil { // busy
			t.Fatal(err)
		}
		acq := func() chan error {
			ch := make(chan error, 1)
			go func() { ch <- g.Acquire(ctx, far, target, 1, false, noDownstream) }()
			synctest.Wait()
			return ch
		}
		a, b, c := acq(), acq(), acq() // predicted waits 10, 20, 30ms: queued, the line is short
		if w := g.QueueWait(); w != 40*time.Millisecond {
			t.Fatalf("QueueWait with one running and three waiting = %v, want 40ms", w)
		}
		var tickets []Ticket
		for range Floor { // a burst of requests reading their bodies
			tickets = append(tickets, g.Admitted(time.Now()))
		}
		if w, want := g.QueueWait(), time.Duration(4+Floor)*10*time.Millisecond; w != want {
			t.Fatalf("QueueWait with %d more reading their bodies = %v, want %v", Floor, w, want)
		}
		g.Arrived(tickets[0])
		if n := g.IncomingNow(); n != Floor-1 {
			t.Fatalf("incoming after one arrived: %d, want %d", n, Floor-1)
		}
		tickets[0] = g.Admitted(time.Now())
		d := acq() // over the target with a long line, but only just: a burst is queued
		select {
		case err := <-d:
			t.Fatalf("a request at the start of a burst: %v, want queued", err)
		default:
		}
		time.Sleep(standInterval)
		start := time.Now()
		select {
		case err := <-acq(): // the line has stood over the target for standInterval
			if !errors.Is(err, ErrQueueTime) || time.Since(start) != 0 {
				t.Fatalf("a request with the line standing over its target: %v after %v, want ErrQueueTime at once", err, time.Since(start))
			}
		default:
			t.Fatal("a request predicted to wait past its target, the line standing, was queued")
		}
		// The waiters admitted are served in turn, past their target: not refused late.
		for _, w := range []chan error{a, b, c, d} {
			g.Release(1, false, 0)
			synctest.Wait()
			if err := <-w; err != nil {
				t.Fatalf("a waiter admitted: %v, want the worker", err)
			}
		}
		// Requests still reading their bodies after incomingHorizon are slow: they no longer
		// count in line (slow clients must not have everyone else refused).
		time.Sleep(incomingHorizon)
		if n := g.IncomingNow(); n != 0 {
			t.Fatalf("%d requests admitted %v ago still count as incoming", n, incomingHorizon+standInterval)
		}
		for _, tk := range tickets {
			g.Arrived(tk) // late: nothing to take back
		}
		if g.line.stand.Check(g.QueueWait(), target, g.InLine(), time.Now()) || g.line.stand.standing() {
			t.Fatal("the line still stands once it is short")
		}
	})
}

// TestStand: a line over its target for less than standInterval is not refused; one over it
// for standInterval is, until its predicted wait falls under half the target or the line under
// half the floor (between them requests are admitted, the line still standing).
func TestStand(t *testing.T) {
	var g Stand
	t0, target, long := time.Unix(1000, 0), 100*time.Millisecond, Floor
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		at   time.Duration
		wait time.Duration
		line int
		want bool
	}{
		{0, 200 * time.Millisecond, long, false},                          // over: a burst begins
		{90 * time.Millisecond, 200 * time.Millisecond, long, false},      // still within the interval
		{95 * time.Millisecond, 50 * time.Millisecond, long, false},       // under: the burst passed
		{150 * time.Millisecond, 200 * time.Millisecond, long, false},     // over again, anew
		{200 * time.Millisecond, 200 * time.Millisecond, long - 1, false}, // a short line: not over
		{210 * time.Millisecond, 200 * time.Millisecond, long, false},
		{310 * time.Millisecond, 200 * time.Millisecond, long, true},      // stood for the interval
		{320 * time.Millisecond, 80 * time.Millisecond, long, false},      // under the target: admitted
		{330 * time.Millisecond, 120 * time.Millisecond, long, true},      // still standing
		{335 * time.Millisecond, 200 * time.Millisecond, long - 1, false}, // a place under the floor: admitted
		{337 * time.Millisecond, 200 * time.Millisecond, long, true},      // still standing
		{338 * time.Millisecond, 200 * time.Millisecond, long/2 - 1, false},
		{339 * time.Millisecond, 200 * time.Millisecond, long, false}, // under half the floor: no longer
		{340 * time.Millisecond, 120 * time.Millisecond, long, false},
		{440 * time.Millisecond, 120 * time.Millisecond, long, true},
		{450 * time.Millisecond, 40 * time.Millisecond, long, false},     // under half the target: no longer
		{460 * time.Millisecond, 200 * time.Millisecond, long, false},    // over, anew
		{470 * time.Millisecond, 200 * time.Millisecond, 2 * long, true}, // twice the floor: at once
	} {
		if got := g.Check(c.wait, target, c.line, at(c.at)); got != c.want {
			t.Fatalf("at %v, wait %v, line %d: %v, want %v", c.at, c.wait, c.line, got, c.want)
		}
	}
}

// standing reports whether the line stands (tests).
func (o *Stand) standing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stand
}

// TestDecodeGateLIFO: under LIFO a line within the floor is served oldest first and nothing in
// it expires, however long it waits; a line longer than the floor is a spike: the newest waiter
// is served first and those past their target are dropped (ErrExpired, which matches
// ErrWaited) when a worker frees up, until spikeHold after the line was last long.
func TestDecodeGateLIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewDecodeGate(1, 100, NewBudget(1<<30), NewLine(LIFO))
		learn(t, g, 10*time.Millisecond)
		ctx, far, target := context.Background(), time.Now().Add(time.Hour), 20*time.Millisecond
		if err := g.Acquire(ctx, far, target, 1, false, noDownstream); err != nil {
			t.Fatal(err)
		}
		acq := func() chan error {
			ch := make(chan error, 1)
			go func() { ch <- g.Acquire(ctx, far, target, 1, false, noDownstream) }()
			synctest.Wait()
			return ch
		}
		served := func(w chan error) {
			t.Helper()
			select {
			case err := <-w:
				if err != nil {
					t.Fatalf("want the worker, got %v", err)
				}
			default:
				t.Fatal("not served")
			}
		}
		waiting := func(w chan error) {
			t.Helper()
			select {
			case err := <-w:
				t.Fatalf("want still waiting, got %v", err)
			default:
			}
		}
		// Within the floor: oldest first, and a wait far past the target is served.
		w1, w2 := acq(), acq()
		time.Sleep(time.Second)
		g.Release(1, false, 0)
		synctest.Wait()
		served(w1)
		waiting(w2)
		// A spike: more requests than the floor in line (reading their bodies).
		for range Floor {
			g.Admitted(time.Now())
		}
		w3 := acq()
		time.Sleep(5 * time.Millisecond)
		w4 := acq()
		g.Release(1, false, 0)
		synctest.Wait()
		if err := <-w2; !errors.Is(err, ErrExpired) || !errors.Is(err, ErrWaited) {
			t.Fatalf("a waiter past its target in a spike: %v, want ErrExpired", err)
		}
		served(w4) // the newest first
		waiting(w3)
		// The line is short again (the incoming requests count for incomingHorizon), but the
		// spike lasts spikeHold after the line was last long: w3, past its target, expires.
		time.Sleep(incomingHorizon)
		w5 := acq()
		g.Release(1, false, 0)
		synctest.Wait()
		if err := <-w3; !errors.Is(err, ErrExpired) {
			t.Fatalf("a waiter past its target while the spike lasts: %v, want ErrExpired", err)
		}
		served(w5)
		// After spikeHold: oldest first, and nothing expires.
		time.Sleep(spikeHold)
		w6 := acq()
		time.Sleep(time.Second)
		w7 := acq()
		g.Release(1, false, 0)
		synctest.Wait()
		served(w6)
		g.Release(1, false, 0)
		synctest.Wait()
		served(w7)
	})
}
