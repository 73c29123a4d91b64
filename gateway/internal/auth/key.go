package auth

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Limits bound one key's requests.
type Limits struct {
	// Rate is the requests per second a key may send, on average (0: no limit); Burst is how
	// many may come at once (its bucket's size; default: Rate, at least 1).
	Rate  float64
	Burst int
	// MaxInflight bounds a key's requests in flight (0: no limit).
	MaxInflight int

	interval int64 // nanoseconds per token (0: no rate limit)
	slack    int64 // (Burst-1) intervals: how far ahead of now the bucket may be emptied
}

// finish derives the bucket's constants.
func (l *Limits) finish() {
	if l.Rate <= 0 {
		l.interval, l.slack = 0, 0
		return
	}
	if l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
	l.interval = max(1, int64(float64(time.Second)/l.Rate))
	l.slack = int64(l.Burst-1) * l.interval
}

// Key is one key of the key file: its name, the models it may use, its limits. Safe for
// concurrent use.
type Key struct {
	name   string
	models map[string]bool // nil: every model
	lim    Limits
	st     *keyState
}

// keyState is what a key's name keeps across reloads.
type keyState struct {
	// tat is the bucket's theoretical arrival time (unix nanoseconds): the bucket is full when
	// tat <= now, and each request moves it an interval ahead; a request that would move it
	// more than Burst-1 intervals past now is refused (the generic cell rate algorithm, a
	// token bucket kept in one word).
	tat      atomic.Int64
	inflight atomic.Int64
	counts   *counters
}

// Name is the key's name (what logs, traces and metrics show; never the key).
func (k *Key) Name() string { return k.name }

// Limits are the key's limits.
func (k *Key) Limits() Limits { return k.lim }

// Allows reports whether the key may use model.
func (k *Key) Allows(model string) bool { return k.models == nil || k.models[model] }

// AllModels reports whether the key may use every model.
func (k *Key) AllModels() bool { return k.models == nil }

// Refusal is why a key's request is refused.
type Refusal int

const (
	// Admitted: not refused.
	Admitted Refusal = iota
	// RateLimited: the key's bucket is empty (Limits.Rate, Limits.Burst).
	RateLimited
	// InflightLimited: the key has Limits.MaxInflight requests in flight.
	InflightLimited
)

// String names the refusal as metrics and logs do.
func (r Refusal) String() string {
	return [...]string{"admitted", "rate", "inflight"}[r]
}

// Admit takes a place for a request at now: a slot in flight (give it back with Done) and a
// token of the bucket. Refused, it takes neither, and wait is how long until a token comes
// (RateLimited; 0 for InflightLimited, which depends on answers, not time).
func (k *Key) Admit(now time.Time) (r Refusal, wait time.Duration) {
	if m := int64(k.lim.MaxInflight); m > 0 {
		if k.st.inflight.Add(1) > m {
			k.st.inflight.Add(-1)
			return InflightLimited, 0
		}
	} else {
		k.st.inflight.Add(1)
	}
	if wait, ok := k.take(now.UnixNano()); !ok {
		k.st.inflight.Add(-1)
		return RateLimited, wait
	}
	return Admitted, 0
}

// Done gives back the slot in flight Admit took.
func (k *Key) Done() { k.st.inflight.Add(-1) }

// Inflight is the key's requests in flight.
func (k *Key) Inflight() int64 { return k.st.inflight.Load() }

// Check reports what Admit would answer at now, taking nothing (a request that asks before
// sending its body, Expect: 100-continue, is refused as early; its Admit comes after).
func (k *Key) Check(now time.Time) (Refusal, time.Duration) {
	if m := int64(k.lim.MaxInflight); m > 0 && k.st.inflight.Load() >= m {
		return InflightLimited, 0
	}
	if k.lim.interval == 0 {
		return Admitted, 0
	}
	n := now.UnixNano()
	if over := max(k.st.tat.Load(), n) - n - k.lim.slack; over > 0 {
		return RateLimited, time.Duration(over)
	}
	return Admitted, 0
}

// take takes a token at now (unix nanoseconds); refused, wait is how long until one comes.
func (k *Key) take(now int64) (wait time.Duration, ok bool) {
	iv := k.lim.interval
	if iv == 0 {
		return 0, true
	}
	for {
		old := k.st.tat.Load()
		tat := max(old, now)
		if over := tat - now - k.lim.slack; over > 0 {
			return time.Duration(over), false
		}
		if k.st.tat.CompareAndSwap(old, tat+iv) {
			return 0, true
		}
	}
}

// Count counts one answered request of the key by its status
// (gateway_key_requests_total{key, code}).
func (k *Key) Count(status int) {
	if c := k.st.counts; c != nil {
		c.inc(status)
	}
}

// trackedCodes are the statuses counted by name (others as "other"): success, the client's
// errors, the key's own refusals (403, 429), and the server's.
var trackedCodes = [...]int{200, 400, 403, 404, 405, 408, 413, 415, 429, 499, 500, 503, 504}

// counters are a key's request counters by status, each series made on its first request.
type counters struct {
	set   *metrics.Set
	name  string
	codes [len(trackedCodes) + 1]atomic.Pointer[metrics.Counter]
}

func newCounters(set *metrics.Set, name string) *counters { return &counters{set: set, name: name} }

func (c *counters) inc(status int) {
	i := len(trackedCodes)
	for j, s := range trackedCodes {
		if s == status {
			i = j
			break
		}
	}
	p := c.codes[i].Load()
	if p == nil {
		code := "other"
		if i < len(trackedCodes) {
			code = fmt.Sprint(trackedCodes[i])
		}
		p = c.set.GetOrCreateCounter(fmt.Sprintf(`gateway_key_requests_total{key=%q,code=%q}`, c.name, code))
		c.codes[i].Store(p)
	}
	p.Inc()
}
