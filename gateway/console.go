package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/console"
)

// The console in the browser (internal/console): its page at /ui/ on the admin listener
// (Options.Console "admin", the default), also on the public one ("public"), or nowhere
// ("off"); and GET /ui/api/snapshot, the live view's JSON, read from the series the server
// keeps anyway when a page asks (about once a second while one is open and visible). Nothing
// is counted or kept for the console: with no page open it costs nothing.

// Where the console is served (Options.Console).
const (
	ConsoleAdmin  = "admin"
	ConsolePublic = "public"
	ConsoleOff    = "off"
)

// consoleOn reports whether the console is served on the admin listener (admin) or on the
// public one.
func (s *Server) consoleOn(admin bool) bool {
	switch s.opts.Console {
	case ConsoleOff:
		return false
	case ConsolePublic:
		return true
	}
	return admin // "" or admin
}

// isConsolePath: /ui and what is under /ui/.
func isConsolePath(p string) bool { return p == "/ui" || strings.HasPrefix(p, "/ui/") }

// serveConsole answers a request under /ui/: the page, an asset, or the snapshot.
func (s *Server) serveConsole(ctx *fasthttp.RequestCtx, path string, admin bool) {
	for _, kv := range console.Headers {
		ctx.Response.Header.Set(kv[0], kv[1])
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		s.methodNotAllowed(ctx, "GET")
		return
	}
	s.drainBody(ctx) // a GET with a body: read and dropped, so that the next request is read where it starts
	if path == "/ui" {
		ctx.Response.Header.Set("Location", "/ui/")
		writeJSONRaw(ctx, fasthttp.StatusPermanentRedirect, `{"error":"the console is at /ui/"}`)
		return
	}
	name := strings.TrimPrefix(path, "/ui/")
	if name == "api/snapshot" {
		s.consoleSnapshot(ctx, admin)
		return
	}
	a, ok := console.Lookup(name)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, "not found: the console has no "+strings.TrimPrefix(path, "/"))
		return
	}
	h := &ctx.Response.Header
	h.Set("ETag", a.ETag)
	h.Set("Cache-Control", "no-cache") // revalidated each time: a new binary's page is seen at once
	h.Set("Vary", "Accept-Encoding")
	h.SetContentType(a.ContentType)
	if match := ctx.Request.Header.Peek("If-None-Match"); len(match) > 0 && etagMatches(match, a.ETag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	body := a.Body
	if a.Gzip != nil && acceptsGzip(ctx.Request.Header.Peek("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = a.Gzip
	}
	ctx.SetBody(body) // copied: the asset is shared
}

// etagMatches reads If-None-Match: a list of entity tags, or *.
func etagMatches(header []byte, etag string) bool {
	for t := range strings.SplitSeq(string(header), ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

func acceptsGzip(ae []byte) bool {
	for t := range strings.SplitSeq(string(ae), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(t), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// exposition buffers for snapshots (a few tens of KiB each).
var snapshotBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// consoleSnapshot answers GET /ui/api/snapshot: the server's and each model version's series
// (console.Snapshot), the state of every version the repository knows, and the statistics'
// counters (executions per batch size, the served requests' times). A request that may use
// the repository API (no admin token configured on the admin listener, or the right one
// sent) is also told why a version is not available: the reasons can name files.
func (s *Server) consoleSnapshot(ctx *fasthttp.RequestCtx, admin bool) {
	buf := snapshotBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			buf.Reset()
			snapshotBufs.Put(buf)
		}
	}()
	buf.Reset()
	s.met.set.WritePrometheus(buf)
	snap := console.Snapshot{Time: float64(time.Now().UnixMicro()) / 1e3, Version: Version, Listener: "public"}
	if admin {
		snap.Listener = "admin"
	}
	switch {
	case admin && s.adminTok == nil:
		snap.Repository, snap.Authorized = "open", true
	case s.adminTok != nil:
		snap.Repository, snap.Authorized = "token", s.bearerOK(ctx)
	default:
		snap.Repository = "none"
	}
	console.Parse(buf.Bytes(), &snap)
	cpu, rss := console.ReadProcess()
	snap.Process.Values = map[string]float64{"cpu_seconds_total": cpu, "resident_memory_bytes": rss}
	s.consoleModels(&snap)
	b, err := json.Marshal(&snap)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "cannot encode the snapshot: "+err.Error())
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// consoleModels completes a snapshot's models: the versions served (with their statistics)
// and those the repository tried and does not serve, each with its state.
func (s *Server) consoleModels(snap *console.Snapshot) {
	t := s.models.Load()
	at := map[[2]string]int{}
	for i, m := range snap.Models {
		at[[2]string{m.Name, m.Version}] = i
	}
	get := func(name, version string) *console.Model {
		k := [2]string{name, version}
		i, ok := at[k]
		if !ok {
			i = len(snap.Models)
			at[k] = i
			snap.Models = append(snap.Models, console.Model{Name: name, Version: version, State: StateUnavailable})
		}
		return &snap.Models[i]
	}
	served := map[[2]string]bool{}
	for name, vs := range t.byName {
		for i, m := range vs {
			cm := get(name, m.version)
			served[[2]string{name, m.version}] = true
			cm.State, cm.Default, cm.Newest, cm.Instances = StateReady, name == t.first, i == len(vs)-1, m.instances
			cm.Stats = m.stats.Snapshot()
		}
	}
	s.states.mu.Lock()
	for k, st := range s.states.m {
		if served[k] && st.state == StateUnavailable {
			continue // retired, and served again by a later generation
		}
		cm := get(k[0], k[1])
		cm.State = st.state
		if snap.Authorized {
			cm.Reason = st.reason
		}
	}
	s.states.mu.Unlock()
	for i := range snap.Models {
		m := &snap.Models[i]
		if !served[[2]string{m.Name, m.Version}] {
			m.Series = console.Series{} // a version no longer served has no series
		}
	}
	console.SortModels(snap.Models)
}
