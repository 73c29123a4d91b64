package gateway

import (
	"maps"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/stats"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// The statistics extension (Triton's): each model version's cumulative request counts and
// times and its executions per batch size, since it was loaded (a reload that replaces a
// version starts it afresh). The counters (internal/stats) are fed from what the pipeline
// times anyway: each request's stage times (observe.go) when it is answered, each successful
// batch run's three steps (model.go's run).

// ModelStats is one model version's statistics, Triton's ModelStatistics: its name and
// version, and the counters' values (stats.Snapshot: LastInference, InferenceCount,
// ExecutionCount, InferenceStats, BatchStats). It shares no memory with the server.
type ModelStats struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	stats.Snapshot
}

// Stats returns the statistics of a model version; of every version of the model (oldest
// first) when version is empty; of every version of every model (by name) when name is empty
// too. A name ending in .tensor names the model's tensor interface: the same counters (both
// interfaces' requests), reported under that name. An unknown model or version is an error
// that classifies as not found (404, gRPC's NOT_FOUND); a version without a name is malformed.
func (s *Server) Stats(name, version string) ([]ModelStats, error) {
	t := s.models.Load()
	out := []ModelStats{}
	if name == "" {
		if version != "" {
			return nil, wire.Malformed("statistics of version %q need a model name", wire.Truncate(version, 40))
		}
		for _, n := range slices.Sorted(maps.Keys(t.byName)) {
			for _, m := range t.byName[n] {
				out = append(out, ModelStats{Name: m.name, Version: m.version, Snapshot: m.stats.Snapshot()})
			}
		}
		return out, nil
	}
	base := strings.TrimSuffix(name, tensorSuffix)
	vs := t.byName[base]
	if len(vs) == 0 {
		return nil, unknownModel(base)
	}
	for _, m := range vs {
		if version == "" || m.version == version {
			out = append(out, ModelStats{Name: name, Version: m.version, Snapshot: m.stats.Snapshot()})
		}
	}
	if len(out) == 0 {
		return nil, unknownVersion(base, version, s.versions(base))
	}
	return out, nil
}

// serveStats answers GET /v2/models[/{name}[/versions/{v}]]/stats.
func (s *Server) serveStats(ctx *fasthttp.RequestCtx, name, version string) {
	if !ctx.IsGet() && !ctx.IsHead() {
		s.methodNotAllowed(ctx, "GET")
		return
	}
	ms, err := s.Stats(name, version)
	if err != nil {
		s.lookupFailed(ctx, err, false)
		return
	}
	s.writeJSON(ctx, 200, struct {
		ModelStats []ModelStats `json:"model_stats"`
	}{ms})
}

// statTimes is a request's times as the statistics count them, from its stage times: queue
// is its waits for a decode worker and for its batch; compute_input its parse and decodes
// and its batch's input fill; compute_infer its batch's model run; compute_output its batch's
// copy of the scores and the writing of its answer. A request whose samples ran in several
// batches counts the batch that ended last.
func (r *request) statTimes() stats.Request {
	st := &r.meta.stages
	t := stats.Request{Start: r.start, Total: st.total}
	t.Queue = st.decodeWait + st.lastQueue
	t.Input = st.parse - st.decodeWait + st.runInput
	t.Infer = st.runInfer
	t.Output = st.lastRun - st.runInput - st.runInfer
	if !st.answering.IsZero() {
		t.Output += st.total - st.answering.Sub(r.start)
	}
	return t
}
