package ort

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// NewSessionAuto is NewSession with the batch size chosen from the model's batch curve
// (batchcurve.go): cfg.MaxBatchSize is ignored; the session holds the rows of the size choose
// returns for the curve (bounded to [1, o.Ceiling]), which it returns with the curve.
//
// The curve is read from the cache folder (cfg.CacheDir, curvecache.go) when it holds one for
// the same model, ONNX Runtime, settings, machine and bounds; else it is measured, within
// o.Budget, on a second ONNX Runtime session made as the served one is (from the model cache's
// entry the first one wrote, where that cache applies) and destroyed afterwards, so that the
// working memory ONNX Runtime kept for the largest batch measured goes with it rather than
// staying with the served session; then written to the folder. A model whose batch axis is
// fixed at 1 gets 1, unmeasured (an empty curve).
func NewSessionAuto[T Elem](cfg SessionConfig, o CurveOptions, choose func(BatchCurve) int) (*Session[T], BatchCurve, error) {
	o.Ceiling = min(max(o.Ceiling, 1), curveMaxCeiling)
	cached := cfg.CacheDir != "" && cfg.CacheDir != "off"
	m, err := checkModel[T](cfg, cacheWanted(cfg) || cached)
	if err != nil {
		return nil, BatchCurve{}, err
	}
	if m.batchAxis != -1 && m.batchAxis != 1 {
		return nil, BatchCurve{}, m.fixedBatchError(cfg)
	}
	core, err := newCore(cfg, m.scan)
	if err != nil {
		return nil, BatchCurve{}, err
	}
	var curve BatchCurve
	if m.batchAxis == -1 && o.Ceiling > 1 {
		cache := openCurveCache(cfg, m.scan, o, elemName[T](), cfg.InputShape)
		var ok bool
		if cache != nil {
			curve, ok = cache.load(o.Ceiling)
		}
		if !ok {
			if curve, err = measureSession[T](cfg, m, o); err != nil {
				core.release()
				return nil, BatchCurve{}, err
			}
			if curve.Failure != "" {
				logger(cfg).Warn("batch curve: a larger batch could not run; the sizes below it were measured", "model", cfg.ModelPath, "err", curve.Failure)
			}
			if cache != nil {
				cache.store(curve, cfg.ModelPath)
			}
		}
	}
	n := 1
	if len(curve.Points) > 0 {
		n = min(max(choose(curve), 1), o.Ceiling)
	}
	return instance[T](core, cfg, m, n), curve, nil
}

// measureSession measures the batch curve of cfg's model (checked as m) on a session of its
// own, destroyed before it returns.
func measureSession[T Elem](cfg SessionConfig, m checkedModel, o CurveOptions) (BatchCurve, error) {
	start := time.Now()
	mc := cfg
	mc.OptimizedModelPath = "" // written once, by the served session
	core, err := newCore(mc, m.scan)
	if err != nil {
		return BatchCurve{}, fmt.Errorf("ort: batch curve: %w", err)
	}
	r := &sessionRunner[T]{core: core, cfg: cfg, m: m}
	defer r.close()
	env := curveEnv{clock: func() time.Duration { return time.Duration(time.Now().UnixNano()) }, now: time.Now, rss: residentBytes}
	clock := ClockWall
	// With one intra-op thread ONNX Runtime's CPU provider runs the whole model on the thread
	// that calls Run: its CPU time is the run's cost, whatever else the machine runs.
	if threadCPUClock && cmpOr(cfg.Provider, "cpu") == "cpu" && cfg.IntraOp == 1 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		env.clock, clock = threadCPU, ClockThreadCPU
	}
	curve, err := measureCurve(r, o, env)
	if err != nil {
		return BatchCurve{}, err
	}
	curve.Clock = clock
	curve.Took = time.Since(start)
	return curve, nil
}

// sessionRunner runs a measurement on a session core, with buffers as large as the largest
// batch measured so far.
type sessionRunner[T Elem] struct {
	core *sessionCore
	s    *Session[T]
	cfg  SessionConfig
	m    checkedModel
}

func (r *sessionRunner[T]) grow(n int) error {
	if r.s != nil {
		r.s.closeViews()
	}
	r.s = instance[T](r.core, r.cfg, r.m, n)
	return nil
}

func (r *sessionRunner[T]) run(n int) error {
	if r.s.multi != nil {
		_, err := r.s.RunOutputs(n)
		return err
	}
	_, err := r.s.Run(n)
	return err
}

// close destroys the buffers' tensors and the session, and returns their memory to the
// system: ONNX Runtime's (release trims the C heap) and the input rows' (tens of megabytes of
// Go heap, which the collector would otherwise return only over minutes).
func (r *sessionRunner[T]) close() {
	if r.s != nil {
		r.s.closeViews()
		r.s = nil
	}
	r.core.release()
	debug.FreeOSMemory()
}
