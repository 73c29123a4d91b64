package admit

import (
	"sync"
	"time"
)

// Ticket is a request's place among the incoming ones; the zero value is none.
type Ticket int64

// incomingTick and incomingSlots: the incoming requests are counted by the tick of their
// admission, over incomingHorizon.
const (
	incomingTick    = 10 * time.Millisecond
	incomingSlots   = 16
	incomingHorizon = incomingSlots * incomingTick
)

// incoming counts admitted requests by their admission's tick, over the last incomingSlots
// ticks. It is safe for concurrent use.
type incoming struct {
	mu   sync.Mutex
	slot [incomingSlots]struct {
		tick int64
		n    int
	}
}

func (in *incoming) add(now time.Time) Ticket {
	tick := now.UnixNano()/int64(incomingTick) + 1 // never 0
	in.mu.Lock()
	s := &in.slot[tick%incomingSlots]
	if s.tick != tick {
		s.tick, s.n = tick, 0
	}
	s.n++
	in.mu.Unlock()
	return Ticket(tick)
}

func (in *incoming) done(t Ticket) {
	if t == 0 {
		return
	}
	in.mu.Lock()
	if s := &in.slot[int64(t)%incomingSlots]; s.tick == int64(t) && s.n > 0 {
		s.n--
	}
	in.mu.Unlock()
}

// count is the number of requests admitted within incomingHorizon of now and not arrived.
func (in *incoming) count(now time.Time) int {
	tick := now.UnixNano()/int64(incomingTick) + 1
	n := 0
	in.mu.Lock()
	for i := range in.slot {
		if s := &in.slot[i]; s.tick > tick-incomingSlots && s.tick <= tick {
			n += s.n
		}
	}
	in.mu.Unlock()
	return n
}
