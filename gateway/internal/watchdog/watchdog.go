package watchdog

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Liveness that means something: the watchdog fails liveness (/v2/health/live 503, Live
// false, gateway_live 0) while a model's batch run has been running longer than its hang
// bound, logs which run and why, and passes it again once that run ends. A restart is the
// only cure for a run that never returns (a deadlock in the runtime, a lost device).
//
// The bound is Options.RunMultiple times the model's typical run (an exponentially
// weighted mean of its recent runs' wall time, the warm-up runs first), clamped to [MinHang,
// MaxRun]; a model that has not finished a run yet (its first warm-up) has MaxRun. A run is
// timed from when its model thread starts it, never while its batch waits in the queue. Wall
// time, not CPU time: a hung run may be blocked (no CPU) or spinning (all of it), and with
// several intra-op threads the batch loop's own thread mostly waits. On a saturated CPU every
// run's wall time grows with the load, and so does the typical run it is compared with; a
// single run preempted for a while is what MinHang absorbs: a healthy run on a loaded CPU
// takes milliseconds to a second, never MinHang's 10 s by default.

// Options bound a batch run before the server stops reporting live. Zero fields take their
// defaults (Default).
type Options struct {
	// RunMultiple: a run is hung once it has run this many times its model's typical run.
	RunMultiple float64
	// MinHang is the least a run may run before it counts as hung, whatever its typical run.
	MinHang time.Duration
	// MaxRun is the most a run may run, whatever its typical run (and the bound of a model
	// that has not finished a run yet: its warm-up).
	MaxRun time.Duration
}

// Default is the watchdog's default (server.watchdog's keys).
var Default = Options{RunMultiple: 20, MinHang: 10 * time.Second, MaxRun: 5 * time.Minute}

// WithDefaults returns o with its zero fields set to Default's.
func (o Options) WithDefaults() Options {
	if o.RunMultiple == 0 {
		o.RunMultiple = Default.RunMultiple
	}
	if o.MinHang == 0 {
		o.MinHang = Default.MinHang
	}
	if o.MaxRun == 0 {
		o.MaxRun = Default.MaxRun
	}
	return o
}

// Validate reports options that bound nothing sensible.
func (o Options) Validate() error {
	if o.RunMultiple < 1 || o.MinHang < 0 || o.MaxRun < o.MinHang {
		return fmt.Errorf("Watchdog: RunMultiple must be at least 1 and 0 <= MinHang <= MaxRun, got %v, %v, %v", o.RunMultiple, o.MinHang, o.MaxRun)
	}
	return nil
}

// Runs is a model's runs in progress, as its batch loops report them. Set its fields and
// call Init before its first run.
type Runs struct {
	Model, Version string // what the log and the reason name
	OnHung         func() // called when one of its runs becomes hung (a metric); may be nil

	since   []atomic.Int64 // per instance: when its run in progress started (unix ns); 0: none
	typical atomic.Int64   // mean wall time of its successful runs (ns, weight 1/8 to the last); 0: none yet
	hung    bool           // the watchdog found it hung (the watchdog's goroutine only)
}

// Init sizes r for a model of instances batch loops.
func (r *Runs) Init(instances int) { r.since = make([]atomic.Int64, instances) }

// Begin records that instance started a run at t.
func (r *Runs) Begin(instance int, t time.Time) { r.since[instance].Store(t.UnixNano()) }

// End records that instance's run ended after d; a successful one (ok) counts in the typical run.
func (r *Runs) End(instance int, d time.Duration, ok bool) {
	r.since[instance].Store(0)
	if !ok {
		return
	}
	for {
		old := r.typical.Load()
		v := int64(d)
		if old != 0 {
			v = old + (v-old)/8
		}
		if r.typical.CompareAndSwap(old, max(v, 1)) {
			return
		}
	}
}

// Typical is the mean wall time of its successful runs (0: none yet).
func (r *Runs) Typical() time.Duration { return time.Duration(r.typical.Load()) }

// Oldest returns the instance whose run has run longest, and for how long (0: none runs).
func (r *Runs) Oldest(now time.Time) (instance int, age time.Duration) {
	for i := range r.since {
		if t := r.since[i].Load(); t != 0 {
			if a := time.Duration(now.UnixNano() - t); a > age {
				instance, age = i, a
			}
		}
	}
	return instance, age
}

// Dog checks the runs of every model added and not removed (a model warming up, one
// retiring, as well as those served).
type Dog struct {
	opts  Options
	log   *slog.Logger
	mu    sync.Mutex
	runs  map[*Runs]struct{}
	live  atomic.Bool
	why   atomic.Pointer[string] // why it is not live
	start sync.Once
	halt  sync.Once
	stop  chan struct{}
	done  chan struct{}
}

// New returns a watchdog with options o (defaults applied), logging to log; it reports live
// until a run it watches hangs.
func New(o Options, log *slog.Logger) *Dog {
	w := &Dog{opts: o, log: log, runs: map[*Runs]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	w.live.Store(true)
	return w
}

// Add watches r's runs.
func (w *Dog) Add(r *Runs) {
	w.mu.Lock()
	w.runs[r] = struct{}{}
	w.mu.Unlock()
}

// Remove stops watching r's runs.
func (w *Dog) Remove(r *Runs) {
	w.mu.Lock()
	delete(w.runs, r)
	w.mu.Unlock()
}

// Bound is how long a run of r may run before it counts as hung.
func (w *Dog) Bound(r *Runs) time.Duration {
	typ := r.Typical()
	if typ == 0 {
		return w.opts.MaxRun
	}
	return min(max(time.Duration(float64(typ)*w.opts.RunMultiple), w.opts.MinHang), w.opts.MaxRun)
}

// period is how often the watchdog looks: a quarter of MinHang, within [1ms, 1s].
func (w *Dog) period() time.Duration {
	return min(max(w.opts.MinHang/4, time.Millisecond), time.Second)
}

// Run starts the watchdog's goroutine (once); Close stops it.
func (w *Dog) Run() {
	w.start.Do(func() {
		go func() {
			defer close(w.done)
			t := time.NewTicker(w.period())
			defer t.Stop()
			for {
				select {
				case now := <-t.C:
					w.Check(now)
				case <-w.stop:
					return
				}
			}
		}()
	})
}

// Close stops the watchdog's goroutine, if it runs, and waits for it.
func (w *Dog) Close() {
	w.halt.Do(func() {
		started := true
		w.start.Do(func() { started = false })
		close(w.stop)
		if started {
			<-w.done
		}
	})
}

// Check looks at every model's oldest run in progress, logs a run that became hung or a hung
// one that ended, and sets liveness.
func (w *Dog) Check(now time.Time) {
	w.mu.Lock()
	runs := make([]*Runs, 0, len(w.runs))
	for r := range w.runs {
		runs = append(runs, r)
	}
	w.mu.Unlock()
	var why string
	for _, r := range runs {
		inst, age := r.Oldest(now)
		bound := w.Bound(r)
		switch {
		case age > bound:
			if !r.hung {
				r.hung = true
				if r.OnHung != nil {
					r.OnHung()
				}
				w.log.Error("a batch run is hung: liveness fails until it ends", "model", r.Model, "version", r.Version,
					"instance", inst, "running", age.Round(time.Millisecond), "bound", bound.Round(time.Millisecond),
					"typical_run", r.Typical().Round(time.Microsecond))
			}
			if why == "" {
				why = fmt.Sprintf("model %s version %s: a batch run (instance %d) has run for %v, over its bound of %v (server.watchdog: %g x its typical run of %v, within [%v, %v])",
					r.Model, r.Version, inst, age.Round(time.Millisecond), bound.Round(time.Millisecond), w.opts.RunMultiple,
					r.Typical().Round(time.Microsecond), w.opts.MinHang, w.opts.MaxRun)
			}
		case r.hung:
			r.hung = false
			w.log.Warn("the hung batch run ended: live again", "model", r.Model, "version", r.Version)
		}
	}
	if why != "" {
		w.why.Store(&why)
	}
	w.live.Store(why == "")
}

// Live reports whether no watched run is hung, and the reason when one is.
func (w *Dog) Live() (bool, string) {
	if w.live.Load() {
		return true, ""
	}
	why := ""
	if p := w.why.Load(); p != nil {
		why = *p
	}
	return false, why
}
