package gateway

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// The admin API changes what the server serves, so it is not on the public listener by
// default: ServeAdmin serves it on its own listener (server.admin_listen, loopback by default),
// with a bearer token when one is configured; with a token, requests carrying it may also use
// it on the public listener. It follows Triton's model repository extension:
//
//	POST /v2/repository/index                 every model version of the repository, with its
//	                                          state (READY, LOADING, UNAVAILABLE) and reason;
//	                                          body {"ready": true} lists the ready ones only
//	POST /v2/repository/models/{name}/load    (re)load a model's versions from the repository
//	POST /v2/repository/models/{name}/unload  retire every version of a model
//	POST /v2/repository/reload                reload the whole repository (as SIGHUP does)
//
// plus server metadata (GET /v2, listing model_repository), health, /metrics and Go's profiles
// (/debug/pprof/) on the admin listener; and, with the console served there (Options.Console,
// the default), the console at /ui/ (console.go) with what its Try it calls: model metadata
// and inference (/models/..., /v2/models/...), through the same pipeline, admission and
// budget as the public listener's.

// adminMaxBody bounds an admin request's body (an index query, load or unload parameters).
const adminMaxBody = 1 << 20

// ServeAdmin serves the admin API on ln until Shutdown.
func (s *Server) ServeAdmin(ln net.Listener) error {
	srv := &fasthttp.Server{
		Handler:      s.handleAdmin,
		Name:         "imagegate-admin",
		ReadTimeout:  s.opts.ReadTimeout,
		WriteTimeout: s.opts.WriteTimeout,
		IdleTimeout:  s.opts.IdleTimeout,
		// Bodies are streamed, as on the public listener: the console's inference requests
		// read theirs into the memory budget (pipeline), the repository API and the profiles
		// theirs up to adminMaxBody (adminBody), and nothing is read whole before a handler
		// runs (a multipart body would be spooled to files first).
		StreamRequestBody:            true,
		MaxRequestBodySize:           1,
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               readBufferSize, // the public listener's header limit (fasthttp's 4 KiB reset longer ones)
		SecureErrorLogMessage:        true,
		Logger:                       &httpLogger{log: s.log},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "the admin API takes bodies of 1 MiB at most")
				return
			}
			s.handleParseError(ctx, err) // 431, 408 or 400, in our words
		},
	}
	if !s.serving(func(l *lifecycle) { l.admin = srv }) {
		ln.Close() // a drain has begun
		return nil
	}
	return srv.Serve(s.adminListener(ln)) // in TLS when configured
}

func (s *Server) handleAdmin(ctx *fasthttp.RequestCtx) {
	defer s.answerID(ctx) // health and /metrics get theirs from handle
	// What it hands to handle needs no API key: keys are the public listener's (security.go).
	ctx.SetUserValue(adminValue, true)
	path := string(ctx.Path())
	switch {
	case strings.HasPrefix(path, "/v2/repository"):
		if s.adminTok != nil && !s.bearerOK(ctx) {
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="imagegate admin"`)
			writeError(ctx, fasthttp.StatusUnauthorized, "the admin API needs Authorization: Bearer <token> (server.admin_token_file)")
			return
		}
		s.handleRepository(ctx, path)
	case path == "/metrics", strings.HasPrefix(path, "/v2/health/"),
		strings.HasPrefix(path, "/v2/models/") && strings.HasSuffix(path, "/stats"): // statistics: listed in /v2 here too
		s.handle(ctx)
	case path == "/openapi.json":
		s.serveOpenAPI(ctx)
	case isConsolePath(path) && s.consoleOn(true):
		s.serveConsole(ctx, path, true)
	case (strings.HasPrefix(path, "/models/") || strings.HasPrefix(path, "/v2/models/")) && s.consoleOn(true):
		s.handle(ctx) // the console's Try it: metadata and inference, as on the public listener
	case path == "/v2" || path == "/v2/":
		if !ctx.IsGet() && !ctx.IsHead() {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		s.serverMetadata(ctx, true) // lists model_repository, served here
	case strings.HasPrefix(path, "/debug/pprof/"):
		// Go's profiles (heap, CPU, goroutines) for whoever may use the admin API.
		if s.adminTok != nil && !s.bearerOK(ctx) {
			writeError(ctx, fasthttp.StatusUnauthorized, "the admin API needs Authorization: Bearer <token>")
			return
		}
		// The profiles' handlers read a body whole (/debug/pprof/symbol takes one): bounded.
		body, ok := adminBody(ctx)
		if !ok {
			writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "the admin API takes bodies of 1 MiB at most")
			lingerOnClose(ctx)
			return
		}
		ctx.Request.SetBody(body)
		pprofhandler.PprofHandler(ctx)
	default:
		s.notFound(ctx, path)
	}
}

// publicRepository serves the repository API on the public listener to requests carrying the
// admin token; without a configured token it is not there.
func (s *Server) publicRepository(ctx *fasthttp.RequestCtx, path string) {
	if s.adminTok == nil {
		writeError(ctx, fasthttp.StatusNotFound, "not found: the model repository API is served on server.admin_listen")
		return
	}
	if !s.bearerOK(ctx) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="imagegate admin"`)
		writeError(ctx, fasthttp.StatusUnauthorized, "the model repository API needs Authorization: Bearer <token>")
		return
	}
	s.handleRepository(ctx, path)
}

// bearerOK compares the request's bearer token with the admin token in constant time (both
// hashed first, so that neither their contents nor their lengths leak through timing).
func (s *Server) bearerOK(ctx *fasthttp.RequestCtx) bool {
	return s.tokenOK(ctx.Request.Header.Peek("Authorization"))
}

// tokenOK checks an Authorization value ("Bearer <token>", a header or gRPC's metadata)
// against the admin token.
func (s *Server) tokenOK(auth []byte) bool {
	tok, ok := bytes.CutPrefix(auth, []byte("Bearer "))
	if !ok {
		return false
	}
	h := sha256.Sum256(bytes.TrimSpace(tok))
	return subtle.ConstantTimeCompare(h[:], s.adminTok) == 1
}

func (s *Server) handleRepository(ctx *fasthttp.RequestCtx, path string) {
	if !ctx.IsPost() {
		s.methodNotAllowed(ctx, "POST")
		return
	}
	start := time.Now()
	body, ok := adminBody(ctx)
	if !ok {
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "the admin API takes bodies of 1 MiB at most")
		lingerOnClose(ctx) // the rest is read and dropped, so that the client reads the answer
		return
	}
	switch {
	case path == "/v2/repository/index":
		var q struct {
			Ready bool `json:"ready"`
		}
		if b := bytes.TrimSpace(body); len(b) > 0 {
			if err := json.Unmarshal(b, &q); err != nil {
				writeError(ctx, fasthttp.StatusBadRequest, "the index request must be a JSON object such as {\"ready\": true}")
				return
			}
		}
		idx, err := s.index()
		if err != nil {
			writeError(ctx, fasthttp.StatusInternalServerError, "cannot read the repository: "+err.Error())
			return
		}
		out := idx[:0:0]
		for _, e := range idx {
			if !q.Ready || e.State == StateReady {
				out = append(out, e)
			}
		}
		s.writeJSON(ctx, 200, out)
	case path == "/v2/repository/reload":
		s.repositoryAnswer(ctx, s.Reload(), start)
	case strings.HasPrefix(path, "/v2/repository/models/"):
		name, action, _ := strings.Cut(strings.TrimPrefix(path, "/v2/repository/models/"), "/")
		if action != "load" && action != "unload" {
			s.notFound(ctx, path)
			return
		}
		if msg := repositoryParams(action, body); msg != "" {
			writeError(ctx, fasthttp.StatusBadRequest, msg)
			return
		}
		if action == "load" {
			s.repositoryAnswer(ctx, s.LoadModel(name), start)
		} else {
			s.repositoryAnswer(ctx, s.UnloadModel(name), start)
		}
	default:
		s.notFound(ctx, path)
	}
}

// adminBody reads a repository request's body, adminMaxBody at most (ok false beyond). On the
// public listener, where a token lets the repository API be served, bodies are streamed and
// Request.Body would read one whole, past max_body_bytes and the memory budget.
func adminBody(ctx *fasthttp.RequestCtx) (body []byte, ok bool) {
	if int64(ctx.Request.Header.ContentLength()) > adminMaxBody {
		return nil, false
	}
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return ctx.Request.Body(), true
	}
	b, err := io.ReadAll(io.LimitReader(stream, adminMaxBody+1))
	return b, err == nil && len(b) <= adminMaxBody
}

// repositoryParams checks the body of a load or unload request: none, or a JSON object whose
// "parameters" the gateway can honour. Triton's load takes a "config" to use instead of the
// repository's and "file:<path>" model files; the gateway loads what its configuration names
// and nothing else, so it refuses them (answering 200 would tell the client its model was
// loaded while the old one kept serving). Unload's "unload_dependents" has nothing to act on
// (no ensembles) and is accepted. It returns the refusal, or "".
func repositoryParams(action string, body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(body, &req); err != nil || body[0] != '{' {
		return "the " + action + " request's body must be empty or a JSON object such as {\"parameters\": {}}"
	}
	for k, v := range req.Parameters {
		switch {
		case k == "config" || strings.HasPrefix(k, "file:"):
			return fmt.Sprintf("parameter %q is not supported: the gateway loads the models its configuration names; change the configuration (or the files it names) and load or reload", wire.Truncate(k, 60))
		case action == "unload" && k == "unload_dependents":
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return "parameter \"unload_dependents\" must be a boolean"
			}
		default:
			return fmt.Sprintf("unknown %s parameter %q", action, wire.Truncate(k, 60))
		}
	}
	return ""
}

func (s *Server) repositoryAnswer(ctx *fasthttp.RequestCtx, err error, start time.Time) {
	switch {
	case err == nil:
		writeJSONRaw(ctx, 200, "{}")
	case errors.Is(err, errNotFound):
		writeError(ctx, fasthttp.StatusNotFound, err.Error())
	default:
		// A model that fails to load: what was served before stays served (see the index).
		writeError(ctx, fasthttp.StatusBadRequest, "cannot load: "+err.Error())
	}
	s.log.Info("repository request", "path", string(ctx.Path()), "took", time.Since(start).Round(time.Millisecond),
		"request_id", string(s.answerID(ctx)), "err", err)
}
