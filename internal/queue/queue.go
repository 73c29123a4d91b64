// Package queue is the deadline-aware FIFO behind the gateway's two waiting lines: the
// batcher's queue of samples and the decode gate's queue of requests waiting for a worker.
//
// It is intrusive: an element embeds Links, so pushing and removing allocate nothing and an
// element removes itself from the middle in constant time (a request whose client left). Each
// element records when it was queued and its deadline, so that a policy can read an element's
// sojourn time and drop what can no longer make its deadline; elements can be taken from
// either end. It knows nothing of what it queues and imports nothing of this module. A List is
// not safe for concurrent use: its owner guards it (the batcher's and the gate's mutex).
package queue

import "time"

// Links are what an element of a List embeds: its place in the list, the time it was queued
// and its deadline. The zero value is an element not in any list.
type Links[E any] struct {
	prev, next *E
	enq        time.Time
	deadline   time.Time
	queued     bool
}

// QueueLinks returns l itself: an element that embeds Links[E] satisfies Elem[E] through it.
func (l *Links[E]) QueueLinks() *Links[E] { return l }

// Queued reports whether the element is in a list.
func (l *Links[E]) Queued() bool { return l.queued }

// Enqueued is when the element was pushed.
func (l *Links[E]) Enqueued() time.Time { return l.enq }

// Deadline is the deadline it was pushed with (zero: none).
func (l *Links[E]) Deadline() time.Time { return l.deadline }

// Elem constrains a List's element pointer type: a *E that reaches its Links.
type Elem[E any] interface {
	*E
	QueueLinks() *Links[E]
}

// List is a FIFO of *E, oldest at the front. The zero value is an empty list.
type List[E any, P Elem[E]] struct {
	head, tail *E
	n          int
}

// Len is the number of elements queued.
func (q *List[E, P]) Len() int { return q.n }

// Front is the oldest element, nil when the list is empty.
func (q *List[E, P]) Front() *E { return q.head }

// Back is the newest element, nil when the list is empty.
func (q *List[E, P]) Back() *E { return q.tail }

// Next is the element queued after e (newer), nil at the back.
func (q *List[E, P]) Next(e *E) *E { return P(e).QueueLinks().next }

// Prev is the element queued before e (older), nil at the front.
func (q *List[E, P]) Prev(e *E) *E { return P(e).QueueLinks().prev }

// PushBack queues e, not in any list, at the back, noting now as its enqueue time and its
// deadline (zero: none).
func (q *List[E, P]) PushBack(e *E, now, deadline time.Time) {
	l := P(e).QueueLinks()
	l.prev, l.next, l.enq, l.deadline, l.queued = q.tail, nil, now, deadline, true
	if q.tail != nil {
		P(q.tail).QueueLinks().next = e
	} else {
		q.head = e
	}
	q.tail = e
	q.n++
}

// Remove takes e, which must be in q, out of the list, from wherever it stands.
func (q *List[E, P]) Remove(e *E) {
	l := P(e).QueueLinks()
	if l.prev != nil {
		P(l.prev).QueueLinks().next = l.next
	} else {
		q.head = l.next
	}
	if l.next != nil {
		P(l.next).QueueLinks().prev = l.prev
	} else {
		q.tail = l.prev
	}
	l.prev, l.next, l.queued = nil, nil, false
	q.n--
}

// PopFront removes and returns the oldest element, nil when the list is empty.
func (q *List[E, P]) PopFront() *E {
	e := q.head
	if e != nil {
		q.Remove(e)
	}
	return e
}

// PopBack removes and returns the newest element, nil when the list is empty.
func (q *List[E, P]) PopBack() *E {
	e := q.tail
	if e != nil {
		q.Remove(e)
	}
	return e
}
