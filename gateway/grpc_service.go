package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
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
	s.lnMu.Lock()
	if s.grpcClosed {
		s.lnMu.Unlock()
		ln.Close()
		return nil
	}
	s.grpcs = append(s.grpcs, g)
	s.lnMu.Unlock()
	err := g.srv.Serve(g.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

func (s *Server) newGRPCServer() (*grpc.Server, *grpcio.Codec) {
	pool := &grpcio.BufferPool{}
	codec := grpcio.NewCodec(pool)
	opts := grpcapi.ServerOptions(s.opts.MaxBodyBytes, s.opts.IdleTimeout, s.opts.ReadTimeout, s.grpcAuth, codec, pool) // grpcAuth, then grpcTap
	srv := grpc.NewServer(append(opts, s.grpcCreds()...)...)
	inference.RegisterGRPCInferenceServiceServer(srv, &grpcService{s: s, codec: codec})
	healthgrpc.RegisterHealthServer(srv, &grpcapi.Health{Serving: s.grpcHealthy, Stop: s.grpcStop})
	reflection.Register(srv)
	return srv, codec
}

// grpcTap refuses a ModelInfer call before grpc-go reads its message, when no model could
// take it: the server is past its drain's end, the decode queue is full, every model's queue
// is full or over its queue target (a call's image waits for a decode worker, as most do), or
// no model is predicted to answer before the call's deadline. HTTP refuses on
// the header alone likewise; without this a refused call first costs its whole upload
// (receiving and decoding a photo's message is most of what a refusal costs). The checks are
// admit's, over every model since the message names its model; the request is refused again
// by admit if it passes here and its model cannot take it. It runs under the connection's
// lock: it reads counters and predictions, and records the call's arrival in whether the
// line stands over its queue target (a call refused here is one the line would have held).
func (s *Server) grpcTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != grpcModelInfer {
		return ctx, nil
	}
	if s.aborted.Load() {
		s.met.unknown.Observe(http.StatusServiceUnavailable, reasonDraining, 0)
		return ctx, status.Error(codes.Unavailable, "gateway: draining: the server is shutting down")
	}
	t := s.models.Load()
	var only *model // the model a refusal is counted on, when one is served
	queued, timed, late, n := true, true, true, 0
	calls := int64(s.opts.DecodeQueue + s.opts.DecodeWorkers) // the calls' bound (below)
	deadline, hasDeadline := ctx.Deadline()
	now := time.Now()
	gateWait := s.gate.PredictWait() // as admit predicts an image's wait
	for _, vs := range t.byName {
		for _, m := range vs {
			n++
			only = m
			calls += m.queueCap
			if m.pending.Load() < m.queueCap {
				queued = false
			}
			if _, over := s.overQueueTarget(m, 0, true, now); !over {
				timed = false
			}
			pred, _ := m.impl.predict(0)
			pred += gateWait
			if !hasDeadline || !now.Add(pred+pred/admit.Headroom).After(deadline) {
				late = false
			}
		}
	}
	if n != 1 {
		only = nil
	}
	var stage, reason, msg string
	switch waiting, _ := s.gate.Stats(); {
	case n == 0:
		return ctx, nil // answered NOT_FOUND once its model is read
	case s.grpcCalls.Load() >= calls:
		// grpc-go reads a call's whole message before the pipeline sees it: the calls in
		// flight are bounded by what the queues can hold, so that the messages of calls a
		// queue would refuse are not received (the memory budget charges them only once
		// received).
		stage, reason, msg = refuseQueue, reasonQueueFull, fmt.Sprintf("gateway: queue full: %d ModelInfer calls in flight, what the decode and model queues hold", calls)
	case waiting >= s.opts.DecodeQueue:
		stage, reason, msg = refuseDecodeQueue, reasonOverloaded, fmt.Sprintf("gateway: overloaded: %d requests wait for a decode worker (server.decode_queue)", waiting)
	case queued:
		stage, reason, msg = refuseQueue, reasonQueueFull, "gateway: queue full: every model's queue is full (batching.max_queue_size)"
	case timed:
		stage, reason, msg = refuseQueueTime, reasonQueueFull, "gateway: queue full: every model's line is predicted to wait past its batching.queue_target"
	case late:
		stage, reason, msg = refuseDeadline, reasonShed, "gateway: would miss its deadline: no model is predicted to answer before the call's deadline"
	default:
		s.grpcCalls.Add(1)
		// A call whose message has not arrived within server.read_timeout is cancelled, as
		// HTTP's read timeout ends a body that does not come: a stalled call would hold its
		// place in the bound above forever. ModelInfer stops the timer once the message is read.
		ctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(s.opts.ReadTimeout, cancel)
		context.AfterFunc(ctx, func() { timer.Stop(); s.grpcCalls.Add(-1) }) // the call's context ends with it
		return context.WithValue(ctx, readTimerKey{}, timer), nil
	}
	s.met.refusals[stage].Inc()
	code := http.StatusServiceUnavailable
	if reason == reasonQueueFull {
		code = s.opts.QueueFullStatus // as classify counts it
	}
	if only != nil {
		only.met.req.Observe(code, reason, 0)
	} else {
		s.met.unknown.Observe(code, reason, 0)
	}
	return ctx, status.Error(codes.Unavailable, msg)
}

// readTimerKey keys a ModelInfer call's read timer in its context (grpcTap).
type readTimerKey struct{}

// handoffWait bounds the wait for grpc-go to take up the connections left in a stopping
// listener's backlog (it accepts and reads them at once unless the machine stalls).
const handoffWait = 200 * time.Millisecond

// grpcModelInfer is ModelInfer's full method name.
const grpcModelInfer = "/inference.GRPCInferenceService/ModelInfer"

// stopGRPC starts the gRPC servers' graceful stop and tells the streams to stop taking
// requests. Each listener stops first and hands its backlog to its server (grpc-go closes the
// connections it accepts once stopping: a client's call written on a connection still queued
// would get a reset), then GracefulStop sends the clients a GOAWAY and answers every call.
func (s *Server) stopGRPC() {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.grpcClosed {
		return
	}
	s.grpcClosed = true
	close(s.grpcStop)
	for _, g := range s.grpcs {
		go func() {
			g.ln.Stop(handoffWait)
			g.srv.GracefulStop()
			close(g.stopped)
		}()
	}
}

// waitGRPC waits for the gRPC servers' graceful stop (every call answered), wait at most;
// what is still open then is closed.
func (s *Server) waitGRPC(wait time.Duration) {
	s.lnMu.Lock()
	gs := s.grpcs
	s.lnMu.Unlock()
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
	return &inference.ServerReadyResponse{Ready: g.s.ready.Load()}, nil
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
	return &inference.ModelReadyResponse{Ready: g.s.ready.Load() && !m.closing.Load()}, nil
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
	if t, ok := ctx.Value(readTimerKey{}).(*time.Timer); ok {
		t.Stop() // the message is read (grpcTap)
	}
	defer g.codec.Release(req) // answered: nothing reads its images any more
	md, _ := metadata.FromIncomingContext(ctx)
	return g.s.grpcInfer(ctx, req, md, false)
}

// ModelStreamInfer answers each request of the stream on it, with its id, as its answer is
// ready (not in order); a failed request is answered with error_message, and the stream goes
// on. The stream ends when the client closes its side (once every request is answered), or
// when the server drains.
func (g *grpcService) ModelStreamInfer(st inference.GRPCInferenceService_ModelStreamInferServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	return grpcapi.Stream(st, g.s.grpcStop, func(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
		defer g.codec.Release(req)
		return g.s.grpcInfer(ctx, req, md, true)
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
// loaded and warm), live (the watchdog) and not draining; NOT_SERVING otherwise.
func (s *Server) grpcHealthy() bool {
	live, _ := s.Live()
	return live && s.ready.Load() && !s.draining.Load()
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
