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
	go func() { ch <- g.Acquire(ctx, deadline, cost, heavy, noDownstream) }()
	return ch
}

func TestDecodeGateWorkersQueueAndOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewDecodeGate(2, 2, NewBudget(1<<30))
		ctx, far := context.Background(), time.Now().Add(time.Hour)
		for range 2 {
			if err := g.Acquire(ctx, far, 1, false, noDownstream); err != nil {
				t.Fatal(err)
			}
		}
		a := acquireAsync(g, ctx, far, 1, false)
		synctest.Wait()
		b := acquireAsync(g, ctx, far, 1, false)
		synctest.Wait()
		if err := g.Acquire(ctx, far, 1, false, noDownstream); !errors.Is(err, ErrQueueFull) {
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
		g := NewDecodeGate(1, 8, NewBudget(1<<30))
		ctx := context.Background()
		g.svc.observe(float64(100 * time.Millisecond)) // decodes take 100 ms
		if err := g.Acquire(ctx, time.Now().Add(time.Hour), 1, false, noDownstream); err != nil {
			t.Fatal(err)
		}
		// Behind one running decode: 100 ms of wait + 100 ms of decode > 150 ms.
		if err := g.Acquire(ctx, time.Now().Add(150*time.Millisecond), 1, false, noDownstream); !errors.Is(err, ErrShed) {
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
		g := NewDecodeGate(2, 8, mem)
		ctx, far := context.Background(), time.Now().Add(time.Hour)
		if err := g.Acquire(ctx, far, 10, true, noDownstream); err != nil {
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
		if err := g.Acquire(ctx, far, 70, false, noDownstream); err != nil {
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
		if err := g.Acquire(ctx, far, 50, false, noDownstream); !errors.Is(err, ErrMemory) {
			t.Fatalf("decode memory held by bodies: %v", err)
		}
		if err := g.Acquire(ctx, far, 101, false, noDownstream); !errors.Is(err, ErrTooLarge) {
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
		g := NewDecodeGate(2, 8, NewBudget(1<<30))
		ctx, far := context.Background(), time.Now().Add(time.Hour)
		decode := func(took time.Duration) {
			if err := g.Acquire(ctx, far, 1, false, noDownstream); err != nil {
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
			if err := g.Acquire(ctx, far, 1, false, noDownstream); err != nil {
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
