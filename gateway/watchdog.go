package gateway

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Liveness that means something: the watchdog fails liveness (/v2/health/live 503, Live
// false, gateway_live 0) while a model's batch run has been running longer than its hang
// bound, logs which run and why, and passes it again once that run ends. A restart is the
// only cure for a run that never returns (a deadlock in the runtime, a lost device).
//
// The bound is WatchdogOptions.RunMultiple times the model's typical run (an exponentially
// weighted mean of its recent runs' wall time, the warm-up runs first), clamped to [MinHang,
// MaxRun]; a model that has not finished a run yet (its first warm-up) has MaxRun. A run is
// timed from when its model thread starts it, never while its batch waits in the queue. Wall
// time, not CPU time: a hung run may be blocked (no CPU) or spinning (all of it), and with
// several intra-op threads the batch loop's own thread mostly waits. On a saturated CPU every
// run's wall time grows with the load, and so does the typical run it is compared with; a
// single run preempted for a while is what MinHang absorbs: a healthy run on a loaded CPU
// takes milliseconds to a second, never MinHang's 10 s by default.

// WatchdogOptions bound a batch run before the server stops reporting live. Zero fields take
// their defaults (DefaultWatchdog).
type WatchdogOptions struct {
	// RunMultiple: a run is hung once it has run this many times its model's typical run.
	RunMultiple float64
	// MinHang is the least a run may run before it counts as hung, whatever its typical run.
	MinHang time.Duration
	// MaxRun is the most a run may run, whatever its typical run (and the bound of a model
	// that has not finished a run yet: its warm-up).
	MaxRun time.Duration
}

// DefaultWatchdog is the watchdog's default (server.watchdog's keys).
var DefaultWatchdog = WatchdogOptions{RunMultiple: 20, MinHang: 10 * time.Second, MaxRun: 5 * time.Minute}

func (o WatchdogOptions) withDefaults() WatchdogOptions {
	if o.RunMultiple == 0 {
		o.RunMultiple = DefaultWatchdog.RunMultiple
	}
	if o.MinHang == 0 {
		o.MinHang = DefaultWatchdog.MinHang
	}
	if o.MaxRun == 0 {
		o.MaxRun = DefaultWatchdog.MaxRun
	}
	return o
}

func (o WatchdogOptions) validate() error {
	if o.RunMultiple < 1 || o.MinHang < 0 || o.MaxRun < o.MinHang {
		return fmt.Errorf("Watchdog: RunMultiple must be at least 1 and 0 <= MinHang <= MaxRun, got %v, %v, %v", o.RunMultiple, o.MinHang, o.MaxRun)
	}
	return nil
}

// runWatch is a model's runs in progress, as its batch loops report them.
type runWatch struct {
	since   []atomic.Int64 // per instance: when its run in progress started (unix ns); 0: none
	typical atomic.Int64   // mean wall time of its successful runs (ns, weight 1/8 to the last); 0: none yet
	hung    bool           // the watchdog found it hung (the watchdog's goroutine only)
}

func (w *runWatch) begin(instance int, t time.Time) { w.since[instance].Store(t.UnixNano()) }

func (w *runWatch) end(instance int, d time.Duration, ok bool) {
	w.since[instance].Store(0)
	if !ok {
		return
	}
	for {
		old := w.typical.Load()
		v := int64(d)
		if old != 0 {
			v = old + (v-old)/8
		}
		if w.typical.CompareAndSwap(old, max(v, 1)) {
			return
		}
	}
}

// oldest returns the instance whose run has run longest, and for how long (0: none runs).
func (w *runWatch) oldest(now time.Time) (instance int, age time.Duration) {
	for i := range w.since {
		if t := w.since[i].Load(); t != 0 {
			if a := time.Duration(now.UnixNano() - t); a > age {
				instance, age = i, a
			}
		}
	}
	return instance, age
}

// watchdog checks the runs of every model built and not closed (a model warming up, one
// retiring, as well as those served).
type watchdog struct {
	s      *Server
	opts   WatchdogOptions
	mu     sync.Mutex
	models map[*model]struct{}
	live   atomic.Bool
	why    atomic.Pointer[string] // why it is not live
	start  sync.Once
	halt   sync.Once
	stop   chan struct{}
	done   chan struct{}
}

func newWatchdog(s *Server, o WatchdogOptions) *watchdog {
	w := &watchdog{s: s, opts: o, models: map[*model]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	w.live.Store(true)
	return w
}

func (w *watchdog) add(m *model) {
	w.mu.Lock()
	w.models[m] = struct{}{}
	w.mu.Unlock()
}

func (w *watchdog) remove(m *model) {
	w.mu.Lock()
	delete(w.models, m)
	w.mu.Unlock()
}

// bound is how long a run of m may run before it counts as hung.
func (w *watchdog) bound(m *model) time.Duration {
	typ := time.Duration(m.watch.typical.Load())
	if typ == 0 {
		return w.opts.MaxRun
	}
	return min(max(time.Duration(float64(typ)*w.opts.RunMultiple), w.opts.MinHang), w.opts.MaxRun)
}

// period is how often the watchdog looks: a quarter of MinHang, within [1ms, 1s].
func (w *watchdog) period() time.Duration {
	return min(max(w.opts.MinHang/4, time.Millisecond), time.Second)
}

// run starts the watchdog's goroutine (once; Serve calls it); close stops it.
func (w *watchdog) run() {
	w.start.Do(func() {
		go func() {
			defer close(w.done)
			t := time.NewTicker(w.period())
			defer t.Stop()
			for {
				select {
				case now := <-t.C:
					w.check(now)
				case <-w.stop:
					return
				}
			}
		}()
	})
}

func (w *watchdog) close() {
	w.halt.Do(func() {
		started := true
		w.start.Do(func() { started = false })
		close(w.stop)
		if started {
			<-w.done
		}
	})
}

// check looks at every model's oldest run in progress, logs a run that became hung or a hung
// one that ended, and sets liveness.
func (w *watchdog) check(now time.Time) {
	w.mu.Lock()
	models := make([]*model, 0, len(w.models))
	for m := range w.models {
		models = append(models, m)
	}
	w.mu.Unlock()
	var why string
	for _, m := range models {
		inst, age := m.watch.oldest(now)
		bound := w.bound(m)
		switch {
		case age > bound:
			if !m.watch.hung {
				m.watch.hung = true
				m.met.hungRuns.Inc()
				w.s.log.Error("a batch run is hung: liveness fails until it ends", "model", m.name, "version", m.version,
					"instance", inst, "running", age.Round(time.Millisecond), "bound", bound.Round(time.Millisecond),
					"typical_run", time.Duration(m.watch.typical.Load()).Round(time.Microsecond))
			}
			if why == "" {
				why = fmt.Sprintf("model %s version %s: a batch run (instance %d) has run for %v, over its bound of %v (server.watchdog: %g x its typical run of %v, within [%v, %v])",
					m.name, m.version, inst, age.Round(time.Millisecond), bound.Round(time.Millisecond), w.opts.RunMultiple,
					time.Duration(m.watch.typical.Load()).Round(time.Microsecond), w.opts.MinHang, w.opts.MaxRun)
			}
		case m.watch.hung:
			m.watch.hung = false
			w.s.log.Warn("the hung batch run ended: live again", "model", m.name, "version", m.version)
		}
	}
	if why != "" {
		w.why.Store(&why)
	}
	w.live.Store(why == "")
}

// Live reports whether the server is live: false while a batch run is hung (see the
// watchdog), with the reason. It is what /v2/health/live answers, for any transport's health
// check.
func (s *Server) Live() (bool, string) {
	if s.dog.live.Load() {
		return true, ""
	}
	why := ""
	if p := s.dog.why.Load(); p != nil {
		why = *p
	}
	return false, why
}
