package admit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestDoor: the door's checks, each refusing what it bounds with what its message tells, in
// order (the cheap counts first, the queue target last), and admitting what passes them all.
func TestDoor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{MaxBody: 1 << 20, MaxInflight: 4 << 20, DecodeWorkers: 1, DecodeQueue: 2, Discipline: Predict})
		learn(t, c.Gate, 10*time.Millisecond)
		now := time.Now()
		ask := func(mod func(a *Ask)) Verdict {
			a := Ask{Arrived: now, Deadline: now.Add(time.Second), Declared: 1000, Decodes: true,
				Model: Model{Pending: 3, Cap: 10, Target: 100 * time.Millisecond, Answer: 5 * time.Millisecond}}
			if mod != nil {
				mod(&a)
			}
			return c.Door(a)
		}
		if v := ask(nil); v.Refusal != Admit {
			t.Fatalf("an ordinary request: %+v", v)
		}
		if v := ask(func(a *Ask) { a.Declared = 2 << 20 }); v.Refusal != BodyTooLarge || v.Count != 2<<20 {
			t.Fatalf("a body declared over the bound: %+v", v)
		}
		if v := ask(func(a *Ask) { a.Model.Pending = 10 }); v.Refusal != QueueFull || v.Count != 10 {
			t.Fatalf("a full model queue: %+v", v)
		}
		// The memory budget: the body's first chunk (or its declared length) must fit.
		if !c.Mem.Reserve(4<<20 - 2000) {
			t.Fatal("reserve")
		}
		if v := ask(nil); v.Refusal != Admit {
			t.Fatalf("a 1000-byte body with 2000 bytes free: %+v", v)
		}
		if v := ask(func(a *Ask) { a.Declared = -1 }); v.Refusal != Memory {
			t.Fatalf("a body of unknown length with 2000 bytes free: %+v", v)
		}
		c.Mem.Release(4<<20 - 2000)
		// The deadline: the batcher's 5 ms, and the gate's wait and decode once it is busy.
		if v := ask(func(a *Ask) { a.Deadline = now.Add(8 * time.Millisecond) }); v.Refusal != Admit {
			t.Fatalf("8 ms for a predicted 5 ms and its headroom: %+v", v)
		}
		if err := c.Gate.Acquire(context.Background(), now.Add(time.Hour), 0, 1, false, 0); err != nil {
			t.Fatal(err)
		}
		v := ask(func(a *Ask) { a.Deadline = now.Add(20 * time.Millisecond) })
		if v.Refusal != Deadline || v.Pred != 25*time.Millisecond || v.Need != 37500*time.Microsecond {
			t.Fatalf("20 ms for a predicted 25 ms: %+v", v)
		}
		if v := ask(func(a *Ask) { a.Decodes = false; a.Deadline = now.Add(20 * time.Millisecond) }); v.Refusal != Admit {
			t.Fatalf("a request without a decode does not wait for the gate: %+v", v)
		}
		// The decode queue, by count.
		for range 2 {
			go c.Gate.Acquire(context.Background(), now.Add(time.Hour), 0, 1, false, 0)
		}
		synctest.Wait()
		if v := ask(nil); v.Refusal != DecodeQueueFull || v.Count != 2 {
			t.Fatalf("a full decode queue: %+v", v)
		}
		for range 3 { // the running decode, then each waiter's
			c.Gate.Release(1, false, 0)
			synctest.Wait()
		}
		if w, busy := c.Gate.Stats(); w != 0 || busy != 0 {
			t.Fatalf("waiting %d, busy %d", w, busy)
		}
	})
}

// TestDoorQueueTime: the queue target at the door. Under Predict a line within the floor is
// never refused for its time; a line of twice the floor over its target is refused at once.
// Under LIFO a line longer than the floor is a spike: while it lasts, the door admits a request
// only with a predicted wait within a quarter of the target, and the spike lasts spikeHold
// after the line was last long; outside a spike nothing is refused for its time.
func TestDoorQueueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A closed loop whose requests carry several samples: more samples than the floor in
		// its model's line, but no more requests than the floor in line for a decode. Not a
		// spike.
		c := New(Config{MaxBody: 1 << 20, MaxInflight: 1 << 30, DecodeWorkers: 1, DecodeQueue: 1000, Discipline: LIFO})
		now := time.Now()
		if v := c.Door(Ask{Arrived: now, Deadline: now.Add(time.Hour), Declared: 1000, Decodes: true,
			Model: Model{Pending: 4 * Floor, Cap: 1000, Target: 100 * time.Millisecond, Wait: time.Second}}); v.Refusal != Admit {
			t.Fatalf("lifo: a closed loop's %d samples in line, few requests: %+v", 4*Floor, v)
		}
		for _, d := range []Discipline{Predict, LIFO} {
			c := New(Config{MaxBody: 1 << 20, MaxInflight: 1 << 30, DecodeWorkers: 1, DecodeQueue: 1000, Discipline: d})
			ask := func(pending int64, wait time.Duration) Refusal {
				now := time.Now()
				return c.Door(Ask{Arrived: now, Deadline: now.Add(time.Hour), Declared: 1000, Decodes: false,
					Model: Model{Pending: pending, Cap: 1000, Target: 100 * time.Millisecond, Wait: wait}}).Refusal
			}
			if r := ask(Floor, time.Second); r != Admit {
				t.Fatalf("%v: a line of the floor waiting 1 s: %v, want admitted", d, r)
			}
			switch d {
			case Predict:
				if r := ask(2*Floor, 101*time.Millisecond); r != QueueTime {
					t.Fatalf("predict: twice the floor over the target: %v", r)
				}
				if r := ask(2*Floor, 100*time.Millisecond); r != Admit {
					t.Fatalf("predict: twice the floor at the target: %v", r)
				}
			case LIFO:
				if r := ask(Floor+1, 26*time.Millisecond); r != QueueTime {
					t.Fatalf("lifo: a line over the floor waiting over a quarter of the target: %v", r)
				}
				if r := ask(Floor+1, 25*time.Millisecond); r != Admit {
					t.Fatalf("lifo: a line over the floor within a quarter of the target: %v", r)
				}
				time.Sleep(spikeHold - time.Millisecond)
				if r := ask(10, 26*time.Millisecond); r != QueueTime {
					t.Fatalf("lifo: a short line while the spike lasts: %v", r)
				}
				time.Sleep(time.Millisecond)
				if r := ask(10, time.Second); r != Admit {
					t.Fatalf("lifo: a short line after the spike: %v", r)
				}
			}
			if r := c.BeforeQueue(time.Second, 100*time.Millisecond, Floor); (r == QueueTime) != (d == Predict) {
				t.Fatalf("%v: before the batcher's queue, the floor's worth waiting 1 s: %v", d, r)
			}
			if r := c.BeforeQueue(time.Second, 100*time.Millisecond, Floor-1); r != Admit {
				t.Fatalf("%v: before the batcher's queue, within the floor: %v", d, r)
			}
		}
	})
}
