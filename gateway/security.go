package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/gateway/internal/auth"
	"github.com/imagegate/imagegate/gateway/internal/grpcapi"
	"github.com/imagegate/imagegate/gateway/internal/netx"
	"github.com/imagegate/imagegate/gateway/internal/tlsx"
)

// Who may use the server: TLS on each listener (certificates from files, reloaded without a
// restart: tlsx) and API keys for the public API (a key file, reloaded alike: auth), with
// each key's limits. A request's key is checked once its headers are read, before its body
// (authorizeHTTP from handle and expectDecide, grpcAuth before grpcTap): no key or a wrong
// one is a 401 (UNAUTHENTICATED), a model the key may not use a 403 (PERMISSION_DENIED), a
// key over its rate or requests in flight a 429 with Retry-After (RESOURCE_EXHAUSTED with a
// RetryInfo). Keys are never logged, traced, counted or answered: their names are.

// TLSOptions are a listener's TLS: certificate and key files (PEM), optionally a client CA
// for mutual TLS, and the minimum version.
type TLSOptions struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, verifies client certificates against these CAs.
	ClientCAFile string
	// ClientAuth is "none", "optional" (a certificate a client sends is verified) or
	// "require"; empty: "require" with a ClientCAFile, else "none".
	ClientAuth string
	// MinVersion is "1.2" (empty) or "1.3".
	MinVersion string
}

// KeyOptions configure API keys.
type KeyOptions struct {
	// File is the key file (docs/security.md); empty: no keys, every request is served.
	File string
	// Open lists what is answered without a key: "health" (/, /v2/health/*, model
	// readiness, gRPC health, ServerLive, ServerReady, ModelReady), "metrics" (/metrics),
	// "metadata" (server and model metadata, configuration, statistics, gRPC reflection).
	// Inference always needs a key.
	Open []string
}

// access is what a request is for, as far as keys go.
type access uint8

const (
	accessOther     access = iota // a path of no category (a 404): needs a key
	accessHealth                  // health and readiness
	accessMetrics                 // /metrics
	accessMetadata                // metadata, configuration, statistics, reflection
	accessInference               // inference, every protocol
	accessAdmin                   // the repository API: the admin token's, not a key's
	accessKinds
)

// openNames are the names Options.Keys.Open takes.
var openNames = map[string]access{"health": accessHealth, "metrics": accessMetrics, "metadata": accessMetadata}

// security is the server's TLS sources, key store and their metrics.
type security struct {
	http, grpc, admin *tlsx.Source
	keys              *auth.Store
	open              [accessKinds]bool
	refusals          map[string]*metrics.Counter // gateway_auth_refusals_total by reason
	reloads           [2][2]*metrics.Counter      // [tls 0, keys 1][ok false, true]
	stop              chan struct{}
	done              chan struct{}
}

// initSecurity loads the listeners' TLS files and the key file (New).
func (s *Server) initSecurity() error {
	sec := &s.sec
	for _, l := range []struct {
		name   string
		o      *TLSOptions
		dst    **tlsx.Source
		protos []string
	}{{"http", s.opts.TLS.HTTP, &sec.http, []string{"http/1.1"}}, {"grpc", s.opts.TLS.GRPC, &sec.grpc, []string{"h2"}},
		{"admin", s.opts.TLS.Admin, &sec.admin, []string{"http/1.1"}}} {
		if l.o == nil {
			continue
		}
		f, err := l.o.files()
		if err != nil {
			return fmt.Errorf("gateway: the %s listener's TLS: %w", l.name, err)
		}
		src, err := tlsx.New(f, l.protos)
		if err != nil {
			return fmt.Errorf("gateway: the %s listener's TLS: %w", l.name, err)
		}
		*l.dst = src
		s.met.set.NewGauge(fmt.Sprintf(`gateway_tls_certificate_expiry_timestamp_seconds{listener=%q}`, l.name),
			func() float64 { return float64(src.Leaf().NotAfter.Unix()) })
	}
	if s.opts.Keys.File != "" {
		for _, o := range s.opts.Keys.Open {
			a, ok := openNames[o]
			if !ok {
				return fmt.Errorf("gateway: Keys.Open: %q is not health, metrics or metadata", o)
			}
			sec.open[a] = true
		}
		keys, err := auth.Open(s.opts.Keys.File, s.met.set)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		sec.keys = keys
		s.met.set.NewGauge("gateway_api_keys", func() float64 { return float64(keys.Len()) })
		sec.refusals = map[string]*metrics.Counter{}
		for _, r := range []string{"missing", "invalid", "forbidden", "rate", "inflight"} {
			sec.refusals[r] = s.met.set.NewCounter(fmt.Sprintf(`gateway_auth_refusals_total{reason=%q}`, r))
		}
	}
	for i, kind := range []string{"tls", "api_keys"} {
		for j, result := range []string{"failed", "ok"} {
			sec.reloads[i][j] = s.met.set.NewCounter(fmt.Sprintf(`gateway_credential_reloads_total{kind=%q,result=%q}`, kind, result))
		}
	}
	if d := s.opts.CredentialsPoll; d > 0 && (sec.keys != nil || sec.http != nil || sec.grpc != nil || sec.admin != nil) {
		sec.stop, sec.done = make(chan struct{}), make(chan struct{})
		go s.pollCredentials(d)
	}
	return nil
}

// files translates the options into tlsx's.
func (o *TLSOptions) files() (tlsx.Files, error) {
	f := tlsx.Files{Cert: o.CertFile, Key: o.KeyFile, ClientCA: o.ClientCAFile}
	switch o.MinVersion {
	case "", "1.2":
		f.MinVersion = tls.VersionTLS12
	case "1.3":
		f.MinVersion = tls.VersionTLS13
	default:
		return f, fmt.Errorf("the minimum version must be 1.2 or 1.3, got %q", o.MinVersion)
	}
	switch o.ClientAuth {
	case "":
		if o.ClientCAFile != "" {
			f.ClientAuth = tlsx.RequireClientCert
		}
	case "none":
	case "optional":
		f.ClientAuth = tlsx.OptionalClientCert
	case "require":
		f.ClientAuth = tlsx.RequireClientCert
	default:
		return f, fmt.Errorf("client auth must be none, optional or require, got %q", o.ClientAuth)
	}
	return f, nil
}

// pollCredentials reloads the certificate and key files every d, until stopCredentials.
func (s *Server) pollCredentials(d time.Duration) {
	defer close(s.sec.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.sec.stop:
			return
		case <-t.C:
			s.reloadCredentials("poll")
		}
	}
}

// stopCredentials ends the polling (the lifecycle's stopped phase: advance, once).
func (s *Server) stopCredentials() {
	if s.sec.stop != nil {
		close(s.sec.stop)
		<-s.sec.done
		s.sec.stop = nil
	}
}

// reloadCredentials reads every TLS and key file again, installs what changed and is valid,
// and logs what it did: a new certificate (its subject and expiry), a new key file (its
// keys' names), or why new files were refused (what is served stays), once per contents.
func (s *Server) reloadCredentials(by string) {
	for _, l := range []struct {
		name string
		src  *tlsx.Source
	}{{"http", s.sec.http}, {"grpc", s.sec.grpc}, {"admin", s.sec.admin}} {
		if l.src == nil {
			continue
		}
		changed, err := l.src.Reload()
		switch {
		case err != nil:
			s.sec.reloads[0][0].Inc()
			s.log.Error("TLS files refused: the certificate in use is still served", "listener", l.name, "by", by, "err", err)
		case changed:
			s.sec.reloads[0][1].Inc()
			leaf := l.src.Leaf()
			s.log.Info("TLS certificate reloaded", "listener", l.name, "by", by, "subject", leaf.Subject.String(),
				"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if k := s.sec.keys; k != nil {
		changed, err := k.Reload()
		switch {
		case err != nil:
			s.sec.reloads[1][0].Inc()
			s.log.Error("key file refused: the keys in use stay", "file", k.Path(), "by", by, "err", err)
		case changed:
			s.sec.reloads[1][1].Inc()
			s.log.Info("key file reloaded", "file", k.Path(), "by", by, "keys", strings.Join(k.Names(), ","))
		}
	}
}

// listen wraps a public listener: connections tracked, in TLS when it is configured.
func (s *Server) listen(ln net.Listener) net.Listener {
	if src := s.sec.http; src != nil {
		return s.conns.ListenTLS(ln, netx.TLS{Config: src.Config(), Failed: s.handshakeFailed("http")})
	}
	return s.conns.Listen(ln)
}

// adminListener wraps the admin listener in TLS when it is configured.
func (s *Server) adminListener(ln net.Listener) net.Listener {
	if src := s.sec.admin; src != nil {
		return netx.ListenTLS(ln, netx.TLS{Config: src.Config(), Failed: s.handshakeFailed("admin")})
	}
	return ln
}

// handshakeFailed counts a listener's failed handshakes.
func (s *Server) handshakeFailed(listener string) func() {
	return s.met.set.GetOrCreateCounter(fmt.Sprintf(`gateway_tls_handshake_failures_total{listener=%q}`, listener)).Inc
}

// grpcCreds are the gRPC server's transport credentials option, when its TLS is configured.
func (s *Server) grpcCreds() []grpc.ServerOption {
	if s.sec.grpc == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(countedCreds{credentials.NewTLS(s.sec.grpc.Config()), s.handshakeFailed("grpc")})}
}

// countedCreds counts the handshakes that fail, but of clients that leave before sending.
type countedCreds struct {
	credentials.TransportCredentials
	failed func()
}

func (c countedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil && !errors.Is(err, io.EOF) {
		c.failed()
	}
	return conn, info, err
}

func (c countedCreds) Clone() credentials.TransportCredentials {
	return countedCreds{c.TransportCredentials.Clone(), c.failed}
}

// keyValue keys a request's *auth.Key among a fasthttp request's user values.
const keyValue = "imagegate.key"

// adminValue marks a request of the admin listener among its user values (handleAdmin): keys
// are the public API's, and the admin listener (its own address, token and TLS) serves what it
// hands to handle, its console's Try it included, without one.
const adminValue = "imagegate.admin"

// httpAccess is what path is for, and the model it names ("" none; "*" every model).
func (s *Server) httpAccess(path string) (access, string) {
	switch {
	case path == "/" || path == "/v2/health/live" || path == "/v2/health/ready":
		return accessHealth, ""
	case path == "/metrics":
		return accessMetrics, ""
	case path == "/v2" || path == "/v2/" || path == "/openapi.json":
		return accessMetadata, ""
	case isConsolePath(path):
		return accessMetrics, "" // the page, and its live view read from the metrics (console.go)
	case strings.HasPrefix(path, "/v2/repository"):
		return accessAdmin, ""
	}
	if rt, ok := inferenceRoute(path); ok { // the one routing of inference (routes.go)
		if rt.def {
			return accessInference, s.models.Load().first
		}
		return accessInference, rt.name
	}
	switch {
	case strings.HasPrefix(path, "/models/"):
		if name, tail, _ := strings.Cut(path[len("/models/"):], "/"); tail == "" {
			return accessMetadata, name
		}
	case path == "/v2/models/stats":
		return accessMetadata, "*"
	case strings.HasPrefix(path, "/v2/models/"):
		name, _, tail, _, ok := v2ModelPath(path[len("/v2/models/"):])
		if !ok {
			break
		}
		switch tail {
		case "ready":
			return accessHealth, name
		case "", "config", "stats":
			return accessMetadata, name
		}
	}
	return accessOther, ""
}

// presentedHTTP is the key a request carries: Authorization: Bearer, else X-API-Key.
func presentedHTTP(h *fasthttp.RequestHeader) []byte {
	if k, ok := bearer(h.Peek("Authorization")); ok {
		return k
	}
	return bytes.TrimSpace(h.Peek("X-API-Key"))
}

// bearer is the token of an Authorization value "Bearer <token>" (the scheme in any case).
func bearer(v []byte) ([]byte, bool) {
	if len(v) < 7 || !bytes.EqualFold(v[:7], []byte("bearer ")) {
		return nil, false
	}
	return bytes.TrimSpace(v[7:]), true
}

// authorizeHTTP checks a request's key once its headers are read (handle), before any of its
// body. It answers a refusal itself (ok false: the connection closes after the answer, the
// body unread). held: an inference request took a place in its key's limits, given back by
// keyDone once answered.
func (s *Server) authorizeHTTP(fc *fasthttp.RequestCtx, path string) (k *auth.Key, held, ok bool) {
	if s.sec.keys == nil || fc.UserValue(adminValue) != nil {
		return nil, false, true
	}
	acc, model := s.httpAccess(path)
	k, refusal := s.keyFor(fc, acc, model)
	if refusal != "" {
		s.refuseHTTP(fc, k, refusal, 0)
		return nil, false, false
	}
	if k == nil || acc != accessInference {
		return k, false, true
	}
	if r, wait := k.Admit(time.Now()); r != auth.Admitted {
		s.refuseHTTP(fc, k, r.String(), wait)
		return nil, false, false
	}
	return k, true, true
}

// keyFor finds and checks a request's key: nil where none is needed (its refusal ""), or the
// refusal: missing, invalid, forbidden (the key may not use model).
func (s *Server) keyFor(fc *fasthttp.RequestCtx, acc access, model string) (*auth.Key, string) {
	if acc == accessAdmin || s.sec.open[acc] {
		return nil, ""
	}
	presented := presentedHTTP(&fc.Request.Header)
	if len(presented) == 0 {
		return nil, "missing"
	}
	k := s.sec.keys.Lookup(presented)
	if k == nil {
		return nil, "invalid"
	}
	fc.SetUserValue(keyValue, k)
	if model == "*" && !k.AllModels() || model != "" && model != "*" && !k.Allows(model) {
		return k, "forbidden"
	}
	return k, ""
}

// expectAuthorize decides a request with Expect: 100-continue on its key, as authorizeHTTP
// would, without taking a place in the key's limits (handle takes it once the body comes).
// refused: the answer is written (status).
func (s *Server) expectAuthorize(fc *fasthttp.RequestCtx, path string) (status int, refused bool) {
	if s.sec.keys == nil {
		return 0, false
	}
	acc, model := s.httpAccess(path)
	k, refusal := s.keyFor(fc, acc, model)
	if refusal == "" && k != nil && acc == accessInference {
		if r, wait := k.Check(time.Now()); r != auth.Admitted {
			s.refuseHTTP(fc, k, r.String(), wait)
			return fc.Response.StatusCode(), true
		}
	}
	if refusal != "" {
		s.refuseHTTP(fc, k, refusal, 0)
		return fc.Response.StatusCode(), true
	}
	return 0, false
}

// refuseHTTP answers a request its key refuses, before its body is read: the connection
// closes after the answer (lingering, so that a client still sending reads it).
func (s *Server) refuseHTTP(fc *fasthttp.RequestCtx, k *auth.Key, reason string, wait time.Duration) {
	s.sec.refusals[reason].Inc()
	if cl := fc.Request.Header.ContentLength(); cl > 0 || cl == -1 {
		lingerOnClose(fc)
	}
	switch reason {
	case "missing":
		fc.Response.Header.Set("WWW-Authenticate", `Bearer realm="imagegate"`)
		writeError(fc, fasthttp.StatusUnauthorized, "this API needs a key: Authorization: Bearer <key>, or X-API-Key: <key>")
	case "invalid":
		fc.Response.Header.Set("WWW-Authenticate", `Bearer realm="imagegate", error="invalid_token"`)
		writeError(fc, fasthttp.StatusUnauthorized, "the key is not valid (Authorization: Bearer <key>, or X-API-Key: <key>)")
	case "forbidden":
		k.Count(fasthttp.StatusForbidden)
		writeError(fc, fasthttp.StatusForbidden, fmt.Sprintf("key %s may not use this model", k.Name()))
	case "rate":
		k.Count(fasthttp.StatusTooManyRequests)
		fc.Response.Header.Set("Retry-After", retryAfterSeconds(wait))
		writeError(fc, fasthttp.StatusTooManyRequests, fmt.Sprintf("key %s is over its rate (%g requests a second, bursts of %d); retry after Retry-After", k.Name(), k.Limits().Rate, k.Limits().Burst))
	case "inflight":
		k.Count(fasthttp.StatusTooManyRequests)
		fc.Response.Header.Set("Retry-After", s.retryAfter)
		writeError(fc, fasthttp.StatusTooManyRequests, fmt.Sprintf("key %s has %d requests in flight, its limit", k.Name(), k.Limits().MaxInflight))
	}
}

// retryAfterSeconds is a wait as Retry-After's whole seconds, rounded up, at least 1.
func retryAfterSeconds(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64((wait+time.Second-1)/time.Second)), 10)
}

// keyDone gives back an HTTP inference request's place in its key's limits and counts it by
// its status (handle, once answered).
func keyDone(fc *fasthttp.RequestCtx, k *auth.Key) {
	k.Done()
	st := fc.Response.StatusCode()
	if fc.Hijacked() {
		st = statusClientClosed
	}
	k.Count(st)
}

// keyName is the name of the key of an HTTP request ("" without one).
func keyName(fc *fasthttp.RequestCtx) string {
	if k, ok := fc.UserValue(keyValue).(*auth.Key); ok {
		return k.Name()
	}
	return ""
}

// keyCtx keys a gRPC call's *auth.Key in its context.
type keyCtx struct{}

// grpcAccess is what a gRPC method is for.
func grpcAccess(method string) access {
	switch method {
	case "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List",
		grpcService_ + "ServerLive", grpcService_ + "ServerReady", grpcService_ + "ModelReady":
		return accessHealth
	case grpcModelInfer, grpcService_ + "ModelStreamInfer":
		return accessInference
	case grpcService_ + "ServerMetadata", grpcService_ + "ModelMetadata", grpcService_ + "ModelConfig", grpcService_ + "ModelStatistics",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo":
		return accessMetadata
	}
	if strings.HasPrefix(method, grpcService_+"Repository") {
		return accessAdmin // the admin token's (adminCall)
	}
	return accessOther
}

const grpcService_ = "/inference.GRPCInferenceService/"

// presentedGRPC is the key a call carries: authorization: Bearer, else x-api-key.
func presentedGRPC(md metadata.MD) []byte {
	for _, v := range md.Get("authorization") {
		if k, ok := bearer([]byte(v)); ok {
			return k
		}
	}
	if v := md.Get("x-api-key"); len(v) > 0 {
		return []byte(strings.TrimSpace(v[0]))
	}
	return nil
}

// grpcAuth is the gRPC server's tap: it checks a call's key before grpc-go reads its message,
// takes a unary ModelInfer's place in its key's limits (given back when the call ends, or at
// once when the door refuses it), then asks the door (grpcTap). A call its key refuses never
// reaches the door: it is counted in gateway_auth_refusals_total, not as a refusal under load.
func (s *Server) grpcAuth(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.sec.keys == nil {
		return s.grpcTap(ctx, info)
	}
	acc := grpcAccess(info.FullMethodName)
	if acc == accessAdmin || s.sec.open[acc] {
		return s.grpcTap(ctx, info)
	}
	presented := presentedGRPC(info.Header)
	if len(presented) == 0 {
		s.sec.refusals["missing"].Inc()
		return ctx, status.Error(codes.Unauthenticated, "this API needs a key: authorization: Bearer <key> (or x-api-key) metadata")
	}
	k := s.sec.keys.Lookup(presented)
	if k == nil {
		s.sec.refusals["invalid"].Inc()
		return ctx, status.Error(codes.Unauthenticated, "the key is not valid (authorization: Bearer <key>, or x-api-key metadata)")
	}
	ctx = context.WithValue(ctx, keyCtx{}, k)
	if info.FullMethodName != grpcModelInfer {
		return s.grpcTap(ctx, info) // a stream's requests take their places one by one (grpcInfer)
	}
	if err := s.grpcKeyAdmit(k); err != nil {
		return ctx, err
	}
	ctx, err := s.grpcTap(ctx, info)
	if err != nil { // refused at the door (counted there, on its key too)
		k.Done()
		return ctx, err
	}
	context.AfterFunc(ctx, k.Done) // the call's context ends with the call
	return ctx, nil
}

// grpcKeyAdmit takes a call's place in its key's limits, or refuses it (RESOURCE_EXHAUSTED,
// with the wait as a RetryInfo where it is known).
func (s *Server) grpcKeyAdmit(k *auth.Key) error {
	r, wait := k.Admit(time.Now())
	if r == auth.Admitted {
		return nil
	}
	s.sec.refusals[r.String()].Inc()
	k.Count(fasthttp.StatusTooManyRequests)
	if r == auth.InflightLimited {
		return status.Error(codes.ResourceExhausted, fmt.Sprintf("key %s has %d requests in flight, its limit", k.Name(), k.Limits().MaxInflight))
	}
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("key %s is over its rate (%g requests a second, bursts of %d)", k.Name(), k.Limits().Rate, k.Limits().Burst))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = d
	}
	return st.Err()
}

// grpcKey is a gRPC call's key (nil: none needed, or keys are off).
func grpcKey(ctx context.Context) *auth.Key {
	k, _ := ctx.Value(keyCtx{}).(*auth.Key)
	return k
}

// grpcForbidden checks that a call's key may use model (a NAME or NAME.tensor; "" every
// model): PERMISSION_DENIED, counted, when it may not.
func (s *Server) grpcForbidden(ctx context.Context, model string) error {
	k := grpcKey(ctx)
	if k == nil {
		return nil
	}
	base, _ := strings.CutSuffix(model, tensorSuffix)
	if base == "" && k.AllModels() || base != "" && k.Allows(base) {
		return nil
	}
	s.sec.refusals["forbidden"].Inc()
	k.Count(fasthttp.StatusForbidden)
	return status.Error(codes.PermissionDenied, fmt.Sprintf("key %s may not use this model", k.Name()))
}

// grpcKeyInfer runs a gRPC inference request with key k: its model checked against the key,
// a stream's request taking its own place in the key's limits (a unary call took its place
// in grpcAuth), counted by its outcome; a refused one hands its place in the decode line
// (incoming, from the tap) back.
func (s *Server) grpcKeyInfer(ctx context.Context, k *auth.Key, req *inference.ModelInferRequest, md metadata.MD, stream bool, incoming admit.Ticket) (*inference.ModelInferResponse, error) {
	if err := s.grpcForbidden(ctx, req.GetModelName()); err != nil {
		s.adm.Gate.Arrived(incoming) // not in the decode line any more
		return nil, err
	}
	if stream {
		if err := s.grpcKeyAdmit(k); err != nil {
			return nil, err
		}
		defer k.Done()
	}
	resp, err := s.grpcInferAs(ctx, req, md, stream, incoming, k.Name())
	k.Count(grpcapi.HTTPStatus(status.Code(err)))
	return resp, err
}

// countKey counts an HTTP request answered outside handle (expectDecide's answer before its
// body) on its key, when it has one, and returns status.
func countKey(fc *fasthttp.RequestCtx, status int) int {
	if k, ok := fc.UserValue(keyValue).(*auth.Key); ok {
		k.Count(status)
	}
	return status
}
