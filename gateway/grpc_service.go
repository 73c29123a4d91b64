package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/gateway/internal/grpcapi"
	"github.com/imagegate/imagegate/gateway/internal/grpcio"
	"github.com/imagegate/imagegate/gateway/internal/modeldesc"
	"github.com/imagegate/imagegate/gateway/internal/netx"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// The gRPC server: GRPCInferenceService (the Open Inference Protocol with Triton's
// extensions), grpc.health.v1.Health and server reflection, on the listeners ServeGRPC is
// given. Shutdown drains it with the HTTP listeners: health turns NOT_SERVING at once, calls
// are served through server.drain_delay, then the listeners close (GracefulStop: GOAWAY, every
// call accepted is answered), streams stop taking requests and end once theirs are answered.

// grpcServing is one gRPC server (one per ServeGRPC).
type grpcServing struct {
	srv     *grpc.Server
	codec   *grpcio.Codec
	ln      *netx.Handoff
	stopped chan struct{} // closed when GracefulStop returned
}

// ServeGRPC serves the gRPC API on ln until Shutdown. It returns nil after a Shutdown.
func (s *Server) ServeGRPC(ln net.Listener) error {
	s.dog.Run()
	g := &grpcServing{ln: netx.NewHandoff(ln, netx.HandoffConfig{MaxConns: s.opts.MaxConnections,
		Refused: s.met.refusals[refuseConnections].Inc, UserTimeout: grpcapi.PingTimeout}), stopped: make(chan struct{})}
	g.srv, g.codec = s.newGRPCServer()
	if !s.serving(func(l *lifecycle) { l.grpcs = append(l.grpcs, g) }) {
		ln.Close() // a drain has begun
		return nil
	}
	err := g.srv.Serve(g.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

func (s *Server) newGRPCServer() (*grpc.Server, *grpcio.Codec) {
	pool := &grpcio.BufferPool{}
	codec := grpcio.NewCodec(pool)
	opts := grpcapi.ServerOptions(grpcapi.Limits{MaxBody: s.opts.MaxBodyBytes, CallWindow: s.opts.GRPCCallWindow, Idle: s.opts.IdleTimeout, Handshake: s.opts.ReadTimeout},
		s.grpcDoor, codec, pool) // grpcAuth, then grpcTap
	opts = append(opts, grpc.ChainStreamInterceptor(heldRefusalStream), grpc.UnknownServiceHandler(unknownMethod))
	srv := grpc.NewServer(append(opts, s.grpcCreds()...)...)
	registerRefusingHeld(srv, inference.GRPCInferenceService_ServiceDesc, &grpcService{s: s, codec: codec})
	registerRefusingHeld(srv, healthgrpc.Health_ServiceDesc, &grpcapi.Health{Serving: s.grpcHealthy, Stop: s.life.stop})
	reflection.Register(srv) // streams only
	return srv, codec
}

// tapRefusalHold bounds how long a call refused at the tap may hold memory. grpc-go arms a
// timer for a call's deadline before its tap runs and, when the tap refuses the call, leaves it
// armed, with the call's context, until the deadline: a call due later than this is let through
// the tap with its refusal (heldRefusal) and refused by its handler before its message is read;
// the call's end stops the timer. The tap's refusal is the cheaper one, kept for the deadlines
// most clients set.
const tapRefusalHold = time.Minute

// heldRefusal is the context key of a refusal decided at the tap and answered by the handler.
type heldRefusal struct{}

// grpcDoor is the gRPC server's tap (grpcAuth, then grpcTap): a refusal of a call due later
// than tapRefusalHold is handed to its handler (heldRefusal), counted as the tap counted it.
func (s *Server) grpcDoor(ctx context.Context, info *tap.Info) (context.Context, error) {
	out, err := s.grpcAuth(ctx, info)
	if err == nil {
		return out, nil
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) > tapRefusalHold {
		return context.WithValue(ctx, heldRefusal{}, err), nil
	}
	return out, err
}

// heldRefusalOf is the refusal the tap handed a call's handler, or nil.
func heldRefusalOf(ctx context.Context) error {
	err, _ := ctx.Value(heldRefusal{}).(error)
	return err
}

// registerRefusingHeld registers a service whose unary methods answer a call's held refusal
// before its message is read (its streams: heldRefusalStream).
func registerRefusingHeld(srv *grpc.Server, desc grpc.ServiceDesc, impl any) {
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		h := desc.Methods[i].Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			if err := heldRefusalOf(ctx); err != nil {
				return nil, err
			}
			return h(srv, ctx, dec, in)
		}
	}
	srv.RegisterService(&desc, impl)
}

// heldRefusalStream answers a stream's held refusal before its handler runs.
func heldRefusalStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := heldRefusalOf(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

// unknownMethod answers a method no service has, as grpc-go does, once the stream interceptor
// has answered its held refusal (an unauthenticated call learns nothing of the methods).
func unknownMethod(_ any, ss grpc.ServerStream) error {
	m, _ := grpc.Method(ss.Context())
	return status.Errorf(codes.Unimplemented, "unknown method %s", m)
}

// grpcTap is the door of a ModelInfer call, before grpc-go reads its message: the call is
// refused there when no model could take it (the server is past its drain's end, more calls are
// in flight than the queues hold, or admit's door refuses it for every model: its queue, the
// decode queue, the memory budget, its deadline, the queue target; a call's image waits for a
// decode worker, as most do). Without this a refused call first costs its whole upload
// (receiving and decoding a photo's message is most of what a refusal costs). A call admitted
// here counts among the decode line's incoming requests while its message arrives; once it is
// read the pipeline asks the door again, for the model the message names. It runs under the
// connection's lock: it reads counters and predictions, and records the call's arrival in the
// line's state.
func (s *Server) grpcTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != grpcModelInfer {
		return ctx, nil
	}
	now := time.Now()
	stage, reason, err := s.tapDoor(ctx, now)
	switch {
	case err == nil && reason == "":
		return s.tapAdmit(ctx, now), nil
	case err == nil:
		return ctx, nil // no model: answered NOT_FOUND once its model is read
	}
	if stage != "" {
		s.met.refusals[stage].Inc()
		s.met.doorLatency.Update(time.Since(now).Seconds())
	}
	return ctx, err
}

// tapDoor decides a call at the tap (grpcTap): a refusal's stage (empty: not a refusal under
// load), its reason and its status error; or a nil error, with reason "noModel" when no model
// is served.
func (s *Server) tapDoor(ctx context.Context, now time.Time) (stage, reason string, err error) {
	refused := func(on *model, code int, stage, reason, msg string) (string, string, error) {
		if on != nil {
			on.met.req.Observe(code, reason, 0)
		} else {
			s.met.unknown.Observe(code, reason, 0)
		}
		if k := grpcKey(ctx); k != nil {
			k.Count(code) // the call's key (grpcAuth), by the status its model's series count
		}
		return stage, reason, status.Error(codes.Unavailable, msg)
	}
	if s.phase() >= phaseAborting {
		return refused(nil, http.StatusServiceUnavailable, "", reasonDraining, "gateway: draining: the server is shutting down")
	}
	t := s.models.Load()
	calls, n := int64(s.opts.DecodeQueue+s.opts.DecodeWorkers), 0 // the calls' bound (below)
	for _, vs := range t.byName {
		for _, m := range vs {
			n++
			calls += m.queueCap
		}
	}
	if n == 0 {
		return "", "noModel", nil
	}
	if s.grpcCalls.Load() >= calls {
		// grpc-go reads a call's whole message before the pipeline sees it: the calls in flight
		// are bounded by what the queues can hold, so that the messages of calls a queue would
		// refuse are not received (the memory budget charges them only once received).
		return refused(nil, s.opts.QueueFullStatus, refuseQueue, reasonQueueFull,
			fmt.Sprintf("gateway: queue full: %d ModelInfer calls in flight, what the decode and model queues hold", calls))
	}
	callDeadline, hasDeadline := ctx.Deadline()
	var first admit.Verdict
	var on *model
	for _, vs := range t.byName {
		for _, m := range vs {
			deadline := now.Add(m.defaultTimeout)
			if hasDeadline && callDeadline.Before(deadline) {
				deadline = callDeadline
			}
			v := s.adm.Door(s.ask(m, now, deadline, -1, 0, true))
			if v.Refusal == admit.Admit {
				return "", "", nil
			}
			if on == nil {
				first, on = v, m
			}
		}
	}
	err = s.doorError(on, first)
	code, reason := s.classify(err)
	msg := err.Error()
	if n > 1 {
		msg = "no model can take the call: " + msg
		on = nil
	}
	return refused(on, code, doorStages[first.Refusal], reason, msg)
}

// tapAdmit returns an admitted call's context: the call is counted in the calls' bound, and
// among the decode line's incoming requests until its pipeline reaches the decode gate, while
// it lasts; a call whose message has not arrived within server.read_timeout is cancelled, as
// HTTP's read timeout ends a body that does not come (a stalled call would hold its place in
// the bound forever). ModelInfer stops the timer once the message is read.
func (s *Server) tapAdmit(ctx context.Context, now time.Time) context.Context {
	s.grpcCalls.Add(1)
	tc := &tapped{}
	tc.ticket.Store(int64(s.adm.Gate.Admitted(now)))
	ctx, cancel := context.WithCancel(ctx)
	tc.timer = time.AfterFunc(s.opts.ReadTimeout, cancel)
	context.AfterFunc(ctx, func() { // the call's context ends with it
		tc.timer.Stop()
		s.adm.Gate.Arrived(tc.take())
		s.grpcCalls.Add(-1)
	})
	return context.WithValue(ctx, tappedKey{}, tc)
}

// tapped is what grpcTap hands an admitted call: its read timer, and its place among the
// decode line's incoming requests until the pipeline takes it.
type tapped struct {
	timer  *time.Timer
	ticket atomic.Int64 // an admit.Ticket
}

// take hands over the call's incoming ticket, once.
func (t *tapped) take() admit.Ticket { return admit.Ticket(t.ticket.Swap(0)) }

// tappedKey keys a ModelInfer call's tapped in its context (grpcTap).
type tappedKey struct{}

// handoffWait bounds the wait for grpc-go to take up the connections left in a stopping
// listener's backlog (it accepts and reads them at once unless the machine stalls).
const handoffWait = 200 * time.Millisecond

// grpcModelInfer is ModelInfer's full method name.
const grpcModelInfer = "/inference.GRPCInferenceService/ModelInfer"

// stop stops the gRPC server gracefully (the lifecycle's closing phase): its listener stops
// first and hands its backlog to grpc-go (which closes the connections it accepts once
// stopping: a client's call written on a connection still queued would get a reset), then
// GracefulStop sends the clients a GOAWAY and answers every call.
func (g *grpcServing) stop() {
	g.ln.Stop(handoffWait)
	g.srv.GracefulStop()
	close(g.stopped)
}

// waitGRPC waits for the gRPC servers' graceful stop (every call answered), wait at most;
// what is still open then is closed.
func (s *Server) waitGRPC(wait time.Duration) {
	gs := s.grpcServers()
	end, cancel := context.WithTimeout(context.Background(), wait) // stays done for every server
	defer cancel()
	for _, g := range gs {
		select {
		case <-g.stopped:
		case <-end.Done():
			g.srv.Stop()
		}
	}
}

// grpcService implements GRPCInferenceService; what it does not serve (Triton's shared
// memory, trace and log settings, left out of the .proto) answers UNIMPLEMENTED.
type grpcService struct {
	inference.UnimplementedGRPCInferenceServiceServer
	s     *Server
	codec *grpcio.Codec // its requests' buffers are released once answered
}

func (g *grpcService) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	live, _ := g.s.Live()
	return &inference.ServerLiveResponse{Live: live}, nil
}

func (g *grpcService) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: g.s.ready()}, nil
}

func (g *grpcService) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	ext := append([]string(nil), v2Extensions...)
	if g.s.adminTok != nil {
		ext = append(ext, "model_repository")
	}
	return &inference.ServerMetadataResponse{Name: "imagegate", Version: Version, Extensions: ext}, nil
}

// model looks a model up by its protocol name (NAME or NAME.tensor) and version; release it
// with done.
func (g *grpcService) model(ctx context.Context, name, version string) (*model, bool, error) {
	if err := g.s.grpcForbidden(ctx, name); err != nil {
		return nil, false, err
	}
	base, tensorOnly := strings.CutSuffix(name, tensorSuffix)
	m, err := g.s.lookup(base, version)
	if err != nil {
		status, _ := g.s.classify(err)
		return nil, false, grpcapi.Error(status, err.Error())
	}
	return m, tensorOnly, nil
}

// ModelReady answers false for a model or version not served, as Triton does (its clients'
// is_model_ready polls a model being loaded), rather than NOT_FOUND.
func (g *grpcService) ModelReady(ctx context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	m, _, err := g.model(ctx, req.GetName(), req.GetVersion())
	if status.Code(err) == codes.NotFound {
		return &inference.ModelReadyResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer m.done()
	return &inference.ModelReadyResponse{Ready: g.s.ready() && !m.closing.Load()}, nil
}

func (g *grpcService) ModelMetadata(ctx context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	m, tensorOnly, err := g.model(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	defer m.done()
	d := describe(m, tensorOnly)
	d.Versions = g.s.versions(m.name)
	return modeldesc.GRPCMetadata(d), nil
}

// ModelConfig answers as HTTP's .../config does (modelConfig in v2.go), in Triton's message.
func (g *grpcService) ModelConfig(ctx context.Context, req *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	m, tensorOnly, err := g.model(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	defer m.done()
	return modeldesc.GRPCConfig(describe(m, tensorOnly)), nil
}

func (g *grpcService) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	var ticket admit.Ticket
	if tc, ok := ctx.Value(tappedKey{}).(*tapped); ok {
		tc.timer.Stop() // the message is read (grpcTap)
		ticket = tc.take()
	}
	defer g.codec.Release(req) // answered: nothing reads its images any more
	md, _ := metadata.FromIncomingContext(ctx)
	return g.s.grpcInfer(ctx, req, md, false, ticket)
}

// ModelStreamInfer answers each request of the stream on it, with its id, as its answer is
// ready (not in order); a failed request is answered with error_message, and the stream goes
// on. The stream ends when the client closes its side (once every request is answered), or
// when the server drains.
func (g *grpcService) ModelStreamInfer(st inference.GRPCInferenceService_ModelStreamInferServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	return grpcapi.Stream(st, g.s.life.stop, func(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
		defer g.codec.Release(req)
		return g.s.grpcInfer(ctx, req, md, true, 0)
	}, g.codec.Release)
}

// adminCall checks a repository call: it needs the admin token (server.admin_token_file) as
// "authorization: Bearer <token>" metadata; without a configured token the repository API is
// the admin listener's (HTTP) only.
func (g *grpcService) adminCall(ctx context.Context) error {
	if g.s.adminTok == nil {
		return status.Error(codes.Unimplemented, "the model repository API is served over gRPC only with an admin token (server.admin_token_file); without one, on the admin listener (server.admin_listen)")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if g.s.tokenOK([]byte(v)) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "the model repository API needs authorization: Bearer <token> metadata")
}

func (g *grpcService) RepositoryIndex(ctx context.Context, req *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	if err := g.adminCall(ctx); err != nil {
		return nil, err
	}
	idx, err := g.s.index()
	if err != nil {
		return nil, status.Error(codes.Internal, "cannot read the repository: "+err.Error())
	}
	resp := &inference.RepositoryIndexResponse{}
	for _, e := range idx {
		if !req.GetReady() || e.State == StateReady {
			resp.Models = append(resp.Models, &inference.RepositoryIndexResponse_ModelIndex{Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason})
		}
	}
	return resp, nil
}

func (g *grpcService) RepositoryModelLoad(ctx context.Context, req *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	if err := g.adminCall(ctx); err != nil {
		return nil, err
	}
	for k := range req.GetParameters() {
		// As over HTTP (repositoryParams): the gateway loads what its configuration names.
		return nil, status.Errorf(codes.InvalidArgument, "parameter %q is not supported: the gateway loads the models its configuration names; change the configuration (or the files it names) and load or reload", wire.Truncate(k, 60))
	}
	if err := g.s.repositoryCall("load", req.GetModelName(), g.s.LoadModel); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelLoadResponse{}, nil
}

func (g *grpcService) RepositoryModelUnload(ctx context.Context, req *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	if err := g.adminCall(ctx); err != nil {
		return nil, err
	}
	for k := range req.GetParameters() {
		if k != "unload_dependents" {
			return nil, status.Errorf(codes.InvalidArgument, "unknown unload parameter %q", wire.Truncate(k, 60))
		}
	}
	if err := g.s.repositoryCall("unload", req.GetModelName(), g.s.UnloadModel); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelUnloadResponse{}, nil
}

// repositoryCall runs a load or unload and logs it, as the HTTP API does.
func (s *Server) repositoryCall(action, name string, do func(string) error) error {
	start := time.Now()
	err := do(name)
	s.log.Info("repository request", "rpc", action, "model", wire.Truncate(name, 100), "took", time.Since(start).Round(time.Millisecond), "err", err)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotFound):
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.InvalidArgument, fmt.Sprintf("cannot %s: %v", action, err))
}

// grpcHealthy is what the health service answers: SERVING while the server is ready (a model
// loaded and warm, no drain begun) and live (the watchdog); NOT_SERVING otherwise.
func (s *Server) grpcHealthy() bool {
	live, _ := s.Live()
	return live && s.ready()
}

// ModelStatistics answers Triton's statistics extension from the same counters as HTTP's
// .../stats (Server.Stats): a model version, every version of a model, or every model.
func (g *grpcService) ModelStatistics(ctx context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	if err := g.s.grpcForbidden(ctx, req.GetName()); err != nil {
		return nil, err
	}
	ms, err := g.s.Stats(req.GetName(), req.GetVersion())
	if err != nil {
		status, _ := g.s.classify(err)
		return nil, grpcapi.Error(status, err.Error())
	}
	resp := &inference.ModelStatisticsResponse{ModelStats: make([]*inference.ModelStatistics, 0, len(ms))}
	for _, m := range ms {
		resp.ModelStats = append(resp.ModelStats, grpcapi.Statistics(m.Name, m.Version, m.Snapshot))
	}
	return resp, nil
}
