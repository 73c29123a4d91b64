package gateway

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// Models change while the server runs. A Repository (cmd/gateway: the YAML file and the model
// files it names) lists the model versions to serve, each with a fingerprint of what it is made
// of; Reload applies the difference:
//
//   - a version not served yet is loaded and warmed (one run at its full batch size per
//     instance) before it takes traffic;
//   - a version whose fingerprint changed is loaded and warmed beside the old one, then swapped
//     in; the old one is retired;
//   - a version the repository no longer names is retired;
//   - a version that fails to load leaves what was served serving, and the failure is reported
//     (the error returned, the repository index's reason, gateway_model_load_failures_total,
//     the log).
//
// Retiring a model version: lookups stop finding it at once; the requests that hold it (queued,
// decoding, running) are answered by it; then its batcher stops and its runners are released.
// Requests without a version go to the newest version.

// ModelSpec is one model version to serve, and how to load it.
type ModelSpec struct {
	Name, Version string
	// Fingerprint identifies what Load builds (its configuration and file contents): a version
	// served with the same fingerprint is kept as it is.
	Fingerprint string
	// Load builds the version's options and runners (it creates the sessions). It is called
	// only for versions not served with this fingerprint.
	Load func() (ModelOptions, error)
	// Idle: the repository holds the version but serves it only once LoadModel names its
	// model, until UnloadModel does (Triton's explicit model control); the index lists it.
	Idle bool
}

// Repository lists the model versions to serve, in order: the first model is /predict/'s
// default. Specs reads the source again on each call.
type Repository interface {
	Specs() ([]ModelSpec, error)
}

// Model states, as the repository index reports them.
const (
	StateReady       = "READY"
	StateLoading     = "LOADING"
	StateUnavailable = "UNAVAILABLE"
)

// versionState is a model version's state and why.
type versionState struct {
	state, reason string
}

// states tracks what the index reports, apart from the model table (read without applyMu).
type states struct {
	mu sync.Mutex
	m  map[[2]string]versionState // by name, version
}

func (st *states) set(name, version, state, reason string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[[2]string]versionState{}
	}
	st.m[[2]string{name, version}] = versionState{state, reason}
}

func (st *states) get(name, version string) (versionState, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	v, ok := st.m[[2]string{name, version}]
	return v, ok
}

// Reload reads the repository again and applies it to every model.
func (s *Server) Reload() error {
	s.reloadCredentials("reload") // certificates and keys first: they do not wait for models
	err := s.applyFrom("")
	s.met.reloads[err == nil].Inc()
	return err
}

// LoadModel reads the repository again and applies it to one model's versions; an Idle
// model is served from then on.
func (s *Server) LoadModel(name string) error { return s.applyFrom(name) }

// UnloadModel retires every version of a model; it stays unloaded until it is loaded again
// (LoadModel, Reload).
func (s *Server) UnloadModel(name string) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	delete(s.loaded, name)
	if len(s.models.Load().byName[name]) == 0 {
		return fmt.Errorf("%w: model %q is not loaded", errNotFound, wire.Truncate(name, 100))
	}
	return s.apply(nil, name)
}

// errStopped: the server is shutting down; the models stay as they are.
var errStopped = errors.New("gateway: the server is shutting down; no model is loaded or unloaded")

// applyFrom reads the repository and applies it to scope (every model when empty). The read
// and the change are one step: concurrent reloads apply the repository in the order they
// read it.
func (s *Server) applyFrom(scope string) error {
	if s.repo == nil {
		return errors.New("gateway: no repository to load from")
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	specs, err := s.repo.Specs()
	if err != nil {
		return fmt.Errorf("gateway: cannot read the repository: %w", err)
	}
	if scope != "" {
		if !slices.ContainsFunc(specs, func(sp ModelSpec) bool { return sp.Name == scope }) {
			return fmt.Errorf("%w: model %q is not in the repository", errNotFound, wire.Truncate(scope, 100))
		}
		if s.loaded == nil {
			s.loaded = map[string]bool{}
		}
		s.loaded[scope] = true
	}
	// Idle versions of models not loaded by name are not served (and are retired if they were).
	specs = slices.DeleteFunc(specs, func(sp ModelSpec) bool { return sp.Idle && !s.loaded[sp.Name] })
	return s.apply(specs, scope)
}

// apply makes the served versions of the models in scope (every model when scope is empty)
// exactly those specs names, loading what is new or changed before any swap. s.applyMu held.
func (s *Server) apply(specs []ModelSpec, scope string) error {
	if s.phase() >= phaseStopped {
		return errStopped
	}
	cur := s.models.Load()
	ch := s.change(cur, specs, scope)
	t := newModelTable(ch.next, cur.first, specs, scope)
	if s.phase() >= phaseStopped {
		// Shutdown has stopped waiting for this reload and closes the models it knows: what
		// this one built is closed here rather than installed, and nothing is retired.
		for _, m := range ch.fresh {
			m.close(context.Background(), s.met)
		}
		return errStopped
	}
	s.install(t, ch)
	return errors.Join(ch.errs...)
}

// modelChange is what a reload decided: the versions to serve by name, those it built, those
// it retires, and the versions that failed to load.
type modelChange struct {
	next           map[string][]*model
	fresh, retired []*model
	errs           []error
}

// change loads what specs name in scope and is not served with the same fingerprint, and
// decides what the table serves next: a version served as it was stays, a changed one is
// swapped for its new build, one the specs no longer name is retired, and a model of which a
// version failed to load keeps serving what it served.
func (s *Server) change(cur *modelTable, specs []ModelSpec, scope string) modelChange {
	inScope := func(name string) bool { return scope == "" || name == scope }
	ch := modelChange{next: map[string][]*model{}}
	next := ch.next
	for name, vs := range cur.byName {
		if !inScope(name) {
			next[name] = vs
		}
	}
	named := map[*model]bool{}
	failed := map[string]bool{} // models of which a version failed to load: none of theirs retires
	for _, sp := range specs {
		if !inScope(sp.Name) {
			continue
		}
		var old *model
		for _, v := range cur.byName[sp.Name] {
			if v.version == sp.Version {
				old = v
			}
		}
		if old != nil && old.fingerprint == sp.Fingerprint {
			next[sp.Name] = append(next[sp.Name], old)
			named[old] = true
			// What it is served from is as it was (a failed change undone): a failure noted
			// since is no longer the state.
			if st, ok := s.states.get(sp.Name, sp.Version); ok && st.reason != "" && st.state == StateReady {
				s.states.set(sp.Name, sp.Version, StateReady, "")
			}
			continue
		}
		s.states.set(sp.Name, sp.Version, StateLoading, "")
		m, err := s.build(sp)
		if err != nil {
			err = fmt.Errorf("model %s version %s: %w", sp.Name, sp.Version, err)
			ch.errs = append(ch.errs, err)
			failed[sp.Name] = true
			s.met.loadFailure(sp.Name)
			s.log.Error("model load failed", "model", sp.Name, "version", sp.Version, "err", err)
			if old != nil {
				s.states.set(sp.Name, sp.Version, StateReady, "the new model failed to load; the previous one is still served: "+err.Error())
				next[sp.Name] = append(next[sp.Name], old)
				named[old] = true
			} else {
				s.states.set(sp.Name, sp.Version, StateUnavailable, err.Error())
			}
			continue
		}
		next[sp.Name] = append(next[sp.Name], m)
		ch.fresh = append(ch.fresh, m)
		if old != nil {
			ch.retired = append(ch.retired, old)
			named[old] = true
		}
	}
	for name, vs := range cur.byName {
		if !inScope(name) {
			continue
		}
		for _, v := range vs {
			switch {
			case named[v]:
			case failed[name]:
				// A version of this model failed to load: what it served stays served.
				next[name] = append(next[name], v)
			default:
				ch.retired = append(ch.retired, v)
				s.states.set(v.name, v.version, StateUnavailable, "unloaded")
			}
		}
	}
	return ch
}

// newModelTable is the table of next's versions, oldest first, with /predict/'s default model:
// first as it was, or as a reload of scope sets it.
func newModelTable(next map[string][]*model, first string, specs []ModelSpec, scope string) *modelTable {
	t := &modelTable{byName: map[string][]*model{}, first: first}
	for name, vs := range next {
		if len(vs) == 0 {
			continue
		}
		slices.SortFunc(vs, func(a, b *model) int {
			if versionLess(a.version, b.version) {
				return -1
			}
			return 1
		})
		t.byName[name] = vs
	}
	switch {
	case scope == "":
		// The repository's first model is /predict/'s default, loaded or not: when it is
		// unloaded or failed to load, /predict/ answers 503 rather than falling back to another
		// model, whose answer (its labels, under a 200) the client did not ask for.
		t.first = ""
		if len(specs) > 0 {
			t.first = specs[0].Name
		}
	case t.first == "" && len(t.byName[scope]) > 0:
		// Models added one at a time (AddModel): the first one added is the default. A model
		// loaded or unloaded on its own (the repository API) leaves the default as it is.
		t.first = scope
	}
	return t
}

// install serves t: the versions built for it take traffic, those retired close once their
// requests are answered.
func (s *Server) install(t *modelTable, ch modelChange) {
	s.models.Store(t)
	for _, m := range ch.fresh {
		s.met.serving(m)
		s.states.set(m.name, m.version, StateReady, "")
		s.log.Info("model loaded", "model", m.name, "version", m.version, "task", m.task.task.String(), "instances", m.instances, "max_batch_size", m.maxBatch)
	}
	for _, m := range ch.retired {
		s.retire(m)
	}
	if len(t.byName) > 0 {
		s.advance(phaseReady) // from starting; later phases stay
	}
}

// build loads a model version and warms it.
func (s *Server) build(sp ModelSpec) (*model, error) {
	start := time.Now()
	o, err := sp.Load()
	if err != nil {
		return nil, err
	}
	o.Name, o.Version = sp.Name, sp.Version
	m, err := newModel(o, s)
	if err != nil {
		if o.Release != nil {
			o.Release()
		}
		return nil, err
	}
	m.fingerprint = sp.Fingerprint
	if err := m.impl.warm(); err != nil {
		m.close(context.Background(), s.met)
		return nil, fmt.Errorf("warm-up run failed: %w", err)
	}
	s.log.Debug("model built", "model", m.name, "version", m.version, "took", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// retire closes a model version in the background once the requests holding it are answered.
func (s *Server) retire(m *model) {
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		if err := m.close(context.Background(), s.met); err != nil {
			s.log.Error("closing a model", "model", m.name, "version", m.version, "err", err)
		}
		// The model's pooled rows and buffers are garbage now: return them to the system
		// rather than leave the process as large as its largest reload.
		debug.FreeOSMemory()
		s.log.Info("model unloaded", "model", m.name, "version", m.version)
	}()
}

// indexEntry is one row of the repository index.
type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
}

// index lists the repository's model versions (and any served ones it no longer names) with
// their states.
func (s *Server) index() ([]indexEntry, error) {
	var specs []ModelSpec
	var repoErr error
	if s.repo != nil {
		// A repository that cannot be read (a config edited to invalid YAML) still lets the
		// index list what is served, saying why nothing else is known.
		specs, repoErr = s.repo.Specs()
	}
	t := s.models.Load()
	seen := map[[2]string]bool{}
	var out []indexEntry
	add := func(name, version string) {
		k := [2]string{name, version}
		if seen[k] {
			return
		}
		seen[k] = true
		e := indexEntry{Name: name, Version: version, State: StateUnavailable}
		served := slices.ContainsFunc(t.byName[name], func(m *model) bool { return m.version == version })
		if st, ok := s.states.get(name, version); ok {
			e.State, e.Reason = st.state, st.reason
		} else if served {
			e.State = StateReady
		}
		if served && e.State == StateUnavailable {
			e.State = StateReady
		}
		if repoErr != nil {
			r := "the repository cannot be read: " + repoErr.Error()
			if served {
				r = "the repository cannot be read; this version is still served: " + repoErr.Error()
			}
			if e.Reason != "" {
				r += " (before: " + e.Reason + ")"
			}
			e.Reason = r
		}
		out = append(out, e)
	}
	for _, sp := range specs {
		add(sp.Name, sp.Version)
	}
	for name, vs := range t.byName {
		for _, m := range vs {
			add(name, m.version)
		}
	}
	return out, nil
}
