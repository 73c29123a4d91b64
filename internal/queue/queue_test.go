package queue

import (
	"slices"
	"testing"
	"time"
)

type elem struct {
	Links[elem]
	id int
}

type list = List[elem, *elem]

func ids(q *list) []int {
	var out []int
	for e := q.Front(); e != nil; e = q.Next(e) {
		out = append(out, e.id)
	}
	return out
}

func TestListOrderAndRemoval(t *testing.T) {
	var q list
	t0 := time.Unix(100, 0)
	es := make([]*elem, 5)
	for i := range es {
		es[i] = &elem{id: i}
		q.PushBack(es[i], t0.Add(time.Duration(i)*time.Second), t0.Add(time.Minute))
	}
	if got := ids(&q); !slices.Equal(got, []int{0, 1, 2, 3, 4}) || q.Len() != 5 {
		t.Fatalf("after pushes: %v (len %d)", got, q.Len())
	}
	if !es[2].Queued() || es[2].Enqueued() != t0.Add(2*time.Second) || es[2].Deadline() != t0.Add(time.Minute) {
		t.Fatalf("element 2: queued %v at %v, deadline %v", es[2].Queued(), es[2].Enqueued(), es[2].Deadline())
	}
	q.Remove(es[2]) // the middle
	if es[2].Queued() {
		t.Fatal("a removed element still reads as queued")
	}
	if e := q.PopFront(); e != es[0] {
		t.Fatalf("PopFront: %v", e.id)
	}
	if e := q.PopBack(); e != es[4] {
		t.Fatalf("PopBack: %v", e.id)
	}
	if got := ids(&q); !slices.Equal(got, []int{1, 3}) || q.Len() != 2 || q.Front() != es[1] || q.Back() != es[3] {
		t.Fatalf("after removals: %v (len %d)", got, q.Len())
	}
	q.Remove(es[1])
	q.Remove(es[3])
	if q.Len() != 0 || q.Front() != nil || q.Back() != nil || q.PopFront() != nil || q.PopBack() != nil {
		t.Fatalf("emptied list: len %d", q.Len())
	}
	// An element removed can be queued again, in another list.
	var r list
	r.PushBack(es[3], t0, time.Time{})
	if got := ids(&r); !slices.Equal(got, []int{3}) || !es[3].Deadline().IsZero() {
		t.Fatalf("pushed again: %v, deadline %v", got, es[3].Deadline())
	}
}

func TestListAllocatesNothing(t *testing.T) {
	var q list
	es := []*elem{{id: 1}, {id: 2}, {id: 3}}
	now := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		for _, e := range es {
			q.PushBack(e, now, now)
		}
		q.Remove(es[1])
		q.PopBack()
		q.PopFront()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a round", allocs)
	}
}
