// Package oipgrpctest is a stand-in GRPCInferenceService for testing clients of the Open
// Inference Protocol over gRPC (the oipgrpc client and the load generator), as net/http/httptest
// is for HTTP clients: a real gRPC server on a loopback listener whose one model, an "image
// classifier", takes BYTES elements and answers scores that are a function of each element's
// bytes (Scores), so that a test can check what came back against what it sent. It is not the
// gateway's server and runs no model; tests of the gateway use the gateway.
//
// The server checks what a client sends as the protocol lays it out (raw_input_contents or
// typed contents, each BYTES element's 4-byte length prefix) and answers the protocol's
// status codes: NOT_FOUND for an unknown model or version, INVALID_ARGUMENT for a malformed
// request. Fail injects other answers (RESOURCE_EXHAUSTED, UNAVAILABLE, a wait until the
// deadline, ...).
package oipgrpctest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
)

// The model the server serves.
const (
	Model   = "classifier"
	Version = "1"
	Input   = "image"
	Output  = "scores"
	Classes = 5
)

// Scores are the fake model's output for one element: Classes values that depend on every
// byte of the element (its length, its byte sum and its first byte).
func Scores(elem []byte) []float32 {
	sum := 0
	for _, b := range elem {
		sum += int(b)
	}
	first := 0
	if len(elem) > 0 {
		first = int(elem[0])
	}
	out := make([]float32, Classes)
	for j := range out {
		out[j] = float32((len(elem)*(j+1)+sum*(Classes-j)+first*j)%1000) / 10
	}
	return out
}

// Label is the label of class i.
func Label(i int) string { return "class " + strconv.Itoa(i) }

// Server is a running stand-in server. Its fields may be read at any time.
type Server struct {
	inference.UnimplementedGRPCInferenceServiceServer

	// Addr is the host:port it listens on.
	Addr string
	fail atomic.Pointer[FailFunc]

	// Infers counts inference requests answered with a result; Streams the ModelStreamInfer
	// streams opened.
	Infers, Streams atomic.Int64

	mu       sync.Mutex
	ready    bool        // the model is loaded (RepositoryModelLoad/Unload)
	lastMeta metadata.MD // of the last inference request

	grpc *grpc.Server
}

// FailFunc decides the fate of an inference request: a non-nil error is its answer.
type FailFunc func(ctx context.Context, req *inference.ModelInferRequest) error

// SetFail sets the function called with each inference request (unary and on a stream)
// before it is answered; a non-nil error is the answer (a status error keeps its code; on a
// stream it becomes the answer's error_message). It may block until ctx ends. nil removes it.
// It may be called while the server runs.
func (s *Server) SetFail(f FailFunc) {
	if f == nil {
		s.fail.Store(nil)
		return
	}
	s.fail.Store(&f)
}

// NewServer starts a server on 127.0.0.1 and stops it when the test ends. opts are added to
// the grpc.Server's.
func NewServer(t testing.TB, opts ...grpc.ServerOption) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: lis.Addr().String(), ready: true, grpc: grpc.NewServer(opts...)}
	inference.RegisterGRPCInferenceServiceServer(s.grpc, s)
	go s.grpc.Serve(lis)
	t.Cleanup(s.grpc.Stop)
	return s
}

// LastHeader returns the values of metadata key name on the last inference request.
func (s *Server) LastHeader(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastMeta.Get(name)
}

// Stop stops the server at once, failing the calls in flight.
func (s *Server) Stop() { s.grpc.Stop() }

func (s *Server) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (s *Server) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: s.isReady()}, nil
}

func (s *Server) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// model checks a model name and version: NOT_FOUND unless they are the served model's.
func (s *Server) model(name, version string) error {
	if name != Model || (version != "" && version != Version) {
		return status.Errorf(codes.NotFound, "unknown model %q version %q", name, version)
	}
	if !s.isReady() {
		return status.Errorf(codes.Unavailable, "model %q is not loaded", name)
	}
	return nil
}

func (s *Server) ModelReady(_ context.Context, r *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	return &inference.ModelReadyResponse{Ready: s.model(r.GetName(), r.GetVersion()) == nil}, nil
}

func (s *Server) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{Name: "oipgrpctest", Version: "0", Extensions: []string{"classification", "model_repository"}}, nil
}

func (s *Server) ModelMetadata(_ context.Context, r *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	if err := s.model(r.GetName(), r.GetVersion()); err != nil {
		return nil, err
	}
	return &inference.ModelMetadataResponse{
		Name: Model, Versions: []string{Version}, Platform: "fake",
		Inputs:  []*inference.ModelMetadataResponse_TensorMetadata{{Name: Input, Datatype: "BYTES", Shape: []int64{-1}}},
		Outputs: []*inference.ModelMetadataResponse_TensorMetadata{{Name: Output, Datatype: "FP32", Shape: []int64{-1, Classes}}},
	}, nil
}

func (s *Server) ModelConfig(_ context.Context, r *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	if err := s.model(r.GetName(), r.GetVersion()); err != nil {
		return nil, err
	}
	return &inference.ModelConfigResponse{Config: &inference.ModelConfig{
		Name: Model, Platform: "fake", MaxBatchSize: 8,
		Input:  []*inference.ModelInput{{Name: Input, DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}}},
		Output: []*inference.ModelOutput{{Name: Output, DataType: inference.DataType_TYPE_FP32, Dims: []int64{Classes}}},
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{
			MaxQueueDelayMicroseconds: 100}},
	}}, nil
}

func (s *Server) ModelStatistics(_ context.Context, r *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	if r.GetName() != "" {
		if err := s.model(r.GetName(), r.GetVersion()); err != nil {
			return nil, err
		}
	}
	n := uint64(s.Infers.Load())
	return &inference.ModelStatisticsResponse{ModelStats: []*inference.ModelStatistics{{
		Name: Model, Version: Version, InferenceCount: n, ExecutionCount: n,
		InferenceStats: &inference.InferStatistics{Success: &inference.StatisticDuration{Count: n}},
	}}}, nil
}

func (s *Server) RepositoryIndex(context.Context, *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	state := "UNAVAILABLE"
	if s.isReady() {
		state = "READY"
	}
	return &inference.RepositoryIndexResponse{Models: []*inference.RepositoryIndexResponse_ModelIndex{
		{Name: Model, Version: Version, State: state}}}, nil
}

func (s *Server) RepositoryModelLoad(_ context.Context, r *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	return &inference.RepositoryModelLoadResponse{}, s.setReady(r.GetModelName(), true)
}

func (s *Server) RepositoryModelUnload(_ context.Context, r *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	return &inference.RepositoryModelUnloadResponse{}, s.setReady(r.GetModelName(), false)
}

func (s *Server) setReady(model string, ready bool) error {
	if model != Model {
		return status.Errorf(codes.NotFound, "unknown model %q", model)
	}
	s.mu.Lock()
	s.ready = ready
	s.mu.Unlock()
	return nil
}

func (s *Server) ModelInfer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return s.infer(ctx, r)
}

// ModelStreamInfer answers each request on the stream from a goroutine of its own (so answers
// may come out of order, which clients must handle by id), failures as error_message with the
// request's id, as Triton's server does.
func (s *Server) ModelStreamInfer(st grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	s.Streams.Add(1)
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r, err := st.Recv()
		if err != nil {
			wg.Wait()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.infer(st.Context(), r)
			out := &inference.ModelStreamInferResponse{InferResponse: resp}
			if err != nil {
				out = &inference.ModelStreamInferResponse{ErrorMessage: status.Convert(err).Message(),
					InferResponse: &inference.ModelInferResponse{Id: r.GetId(), ModelName: r.GetModelName(), ModelVersion: r.GetModelVersion()}}
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			st.Send(out) // fails only when the stream is gone
		}()
	}
}

// infer answers one request: the scores of each BYTES element, or the classification asked
// for; errors as status errors.
func (s *Server) infer(ctx context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		s.mu.Lock()
		s.lastMeta = md
		s.mu.Unlock()
	}
	if err := s.model(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	if f := s.fail.Load(); f != nil {
		if err := (*f)(ctx, r); err != nil {
			return nil, err
		}
	}
	elems, err := images(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	classify := 0
	for _, o := range r.GetOutputs() {
		if o.GetName() != Output {
			return nil, status.Errorf(codes.InvalidArgument, "unknown output %q", o.GetName())
		}
		if p, ok := o.GetParameters()["classification"]; ok {
			k, isInt := p.GetParameterChoice().(*inference.InferParameter_Int64Param)
			if !isInt || k.Int64Param < 1 || k.Int64Param > Classes {
				return nil, status.Errorf(codes.InvalidArgument, "classification must be an int64_param in [1, %d]", Classes)
			}
			classify = int(k.Int64Param)
		}
	}
	resp := &inference.ModelInferResponse{ModelName: Model, ModelVersion: Version, Id: r.GetId()}
	var raw []byte
	if classify == 0 {
		for _, e := range elems {
			for _, v := range Scores(e) {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
			}
		}
		resp.Outputs = []*inference.ModelInferResponse_InferOutputTensor{{Name: Output, Datatype: "FP32", Shape: []int64{int64(len(elems)), Classes}}}
	} else {
		for _, e := range elems {
			for _, c := range Top(Scores(e), classify) {
				el := strconv.FormatFloat(float64(Scores(e)[c]), 'f', 6, 32) + ":" + strconv.Itoa(c) + ":" + Label(c)
				raw = binary.LittleEndian.AppendUint32(raw, uint32(len(el)))
				raw = append(raw, el...)
			}
		}
		resp.Outputs = []*inference.ModelInferResponse_InferOutputTensor{{Name: Output, Datatype: "BYTES", Shape: []int64{int64(len(elems)), int64(classify)}}}
	}
	resp.RawOutputContents = [][]byte{raw}
	s.Infers.Add(1)
	return resp, nil
}

// Top returns the indices of the k highest scores, highest first (the lower index first
// among equals).
func Top(scores []float32, k int) []int {
	idx := make([]int, 0, k)
	used := make([]bool, len(scores))
	for range k {
		best := -1
		for i, v := range scores {
			if !used[i] && (best < 0 || v > scores[best]) {
				best = i
			}
		}
		used[best] = true
		idx = append(idx, best)
	}
	return idx
}

// images reads the one BYTES input's elements from raw_input_contents or from its typed
// contents, checking the shape, the layout and every length prefix.
func images(r *inference.ModelInferRequest) ([][]byte, error) {
	if len(r.GetInputs()) != 1 {
		return nil, fmt.Errorf("want one input, got %d", len(r.GetInputs()))
	}
	in := r.GetInputs()[0]
	if in.GetName() != Input || in.GetDatatype() != "BYTES" {
		return nil, fmt.Errorf("input %q %s: want %q BYTES", in.GetName(), in.GetDatatype(), Input)
	}
	shape := in.GetShape()
	if len(shape) != 1 || shape[0] < 1 {
		return nil, fmt.Errorf("input shape %v: want [n]", shape)
	}
	n := int(shape[0])
	raws := r.GetRawInputContents()
	if len(raws) == 0 {
		elems := in.GetContents().GetBytesContents()
		if len(elems) != n {
			return nil, fmt.Errorf("shape %v, %d bytes_contents", shape, len(elems))
		}
		return elems, nil
	}
	if len(raws) != 1 || in.GetContents() != nil {
		return nil, fmt.Errorf("%d raw_input_contents for 1 input (and contents set: %v)", len(raws), in.GetContents() != nil)
	}
	raw := raws[0]
	var elems [][]byte
	for len(raw) > 0 {
		if len(raw) < 4 {
			return nil, fmt.Errorf("BYTES element %d: truncated length prefix", len(elems))
		}
		l := binary.LittleEndian.Uint32(raw)
		if uint64(l) > uint64(len(raw)-4) {
			return nil, fmt.Errorf("BYTES element %d: length prefix %d, %d bytes left", len(elems), l, len(raw)-4)
		}
		elems = append(elems, raw[4:4+l])
		raw = raw[4+l:]
	}
	if len(elems) != n {
		return nil, fmt.Errorf("shape %v, %d BYTES elements", shape, len(elems))
	}
	return elems, nil
}
