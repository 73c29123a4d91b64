package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// These tests run the gRPC server on a loopback listener with the fake runner (the real
// model over gRPC is cmd/gateway's grpc_test.go).

// grpcServe serves s's gRPC API on a loopback port (and its HTTP API in memory, which also
// shuts s down at the end) and returns a client connection.
func grpcServe(t *testing.T, s *Server) (*testServer, *grpc.ClientConn) {
	t.Helper()
	ts := serve(t, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeGRPC(ln)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(math.MaxInt32), grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return ts, cc
}

func newGRPCServer(t *testing.T, o Options, models ...ModelOptions) (*testServer, inference.GRPCInferenceServiceClient, *grpc.ClientConn) {
	t.Helper()
	s, err := New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if err := s.AddModel(m); err != nil {
			t.Fatal(err)
		}
	}
	ts, cc := grpcServe(t, s)
	return ts, inference.NewGRPCInferenceServiceClient(cc), cc
}

// imageRequest is what tritonclient.grpc sends for BYTES images: raw_input_contents, each
// element a 4-byte length and its bytes.
func imageRequest(model string, imgs ...[]byte) *inference.ModelInferRequest {
	var raw []byte
	for _, img := range imgs {
		raw = wire.AppendBytesElement(raw, img)
	}
	return &inference.ModelInferRequest{ModelName: model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{int64(len(imgs))}}},
		RawInputContents: [][]byte{raw}}
}

func rawScores(t *testing.T, resp *inference.ModelInferResponse) []float32 {
	t.Helper()
	if len(resp.RawOutputContents) != 1 || resp.Outputs[0].Datatype != "FP32" {
		t.Fatalf("response: %v", resp)
	}
	raw := resp.RawOutputContents[0]
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// TestGRPCInferAnswersAsHTTP: an image over gRPC gets the scores HTTP's binary request gets,
// with the id echoed, the request ID and stage times in the header metadata; classification
// gives "<score>:<index>:<label>" elements; typed contents work as raw ones.
func TestGRPCInferAnswersAsHTTP(t *testing.T) {
	ts, c, _ := newGRPCServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 8, 8, 60)
	req := imageRequest("m", img, solidPNG(t, 8, 8, 200))
	req.Id = "req-1"
	var hdr metadata.MD
	resp, err := c.ModelInfer(t.Context(), req, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	got := rawScores(t, resp)
	if resp.Id != "req-1" || resp.ModelName != "m" || resp.ModelVersion != "1" || len(got) != 6 || !equalInts(resp.Outputs[0].Shape, []int64{2, 3}) {
		t.Fatalf("response %v, scores %v", resp, got)
	}
	if id := hdr.Get("x-request-id"); len(id) != 1 || id[0] != "req-1" || len(hdr.Get("server-timing")) != 1 || !strings.Contains(hdr.Get("server-timing")[0], "total;dur=") {
		t.Errorf("header metadata %v", hdr)
	}
	// The same image over HTTP (binary tensor data).
	hdrJSON := `{"inputs":[{"name":"input","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":` + strconv.Itoa(4+len(img)) + `}}],"parameters":{"binary_data_output":true}}`
	a := ts.do("POST", "/v2/models/m/infer", "application/octet-stream", append([]byte(hdrJSON), wire.AppendBytesElement(nil, img)...), "Inference-Header-Content-Length", strconv.Itoa(len(hdrJSON)))
	n, _ := parseCount([]byte(a.header["Inference-Header-Content-Length"]))
	if a.status != 200 || len(a.body) != n+12 {
		t.Fatalf("HTTP: %d %s", a.status, a.body)
	}
	for i := range 3 {
		if f := math.Float32frombits(binary.LittleEndian.Uint32(a.body[n+4*i:])); f != got[i] {
			t.Errorf("score %d: gRPC %v, HTTP %v", i, got[i], f)
		}
	}
	// Classification.
	req = imageRequest("m", img)
	req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "output",
		Parameters: map[string]*inference.InferParameter{"classification": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 2}}}}}
	resp, err = c.ModelInfer(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	raw := resp.RawOutputContents[0]
	var classes []string
	for len(raw) > 0 {
		var e []byte
		e, raw = wire.NextBytesElement(raw)
		classes = append(classes, string(e))
	}
	if resp.Outputs[0].Datatype != "BYTES" || !equalInts(resp.Outputs[0].Shape, []int64{1, 2}) || len(classes) != 2 ||
		classes[0] != classString(got[2], 2, "c") || classes[1] != classString(got[1], 1, "b") {
		t.Fatalf("classification %v %q", resp.Outputs[0], classes)
	}
	// Typed contents: bytes_contents, and an FP32 tensor on the tensor interface.
	req = imageRequest("m", img)
	req.RawInputContents = nil
	req.Inputs[0].Contents = &inference.InferTensorContents{BytesContents: [][]byte{img}}
	if resp, err = c.ModelInfer(t.Context(), req); err != nil || rawScores(t, resp)[0] != got[0] {
		t.Fatalf("bytes_contents: %v %v", resp, err)
	}
	vals := make([]float32, 3*side*side)
	for i := range vals {
		vals[i] = 0.5
	}
	treq := &inference.ModelInferRequest{ModelName: "m.tensor", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32",
		Shape: []int64{1, 3, side, side}, Contents: &inference.InferTensorContents{Fp32Contents: vals}}}}
	if resp, err = c.ModelInfer(t.Context(), treq); err != nil || resp.ModelName != "m.tensor" || rawScores(t, resp)[0] != 0.5 {
		t.Fatalf("fp32_contents: %v %v", resp, err)
	}
	rawVals := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		rawVals = binary.LittleEndian.AppendUint32(rawVals, math.Float32bits(v))
	}
	treq.Inputs[0].Contents, treq.RawInputContents = nil, [][]byte{rawVals}
	if resp, err = c.ModelInfer(t.Context(), treq); err != nil || rawScores(t, resp)[0] != 0.5 {
		t.Fatalf("raw FP32: %v %v", resp, err)
	}
}

func equalInts(a, b []int64) bool { return equalShape(a, b) }

// TestGRPCAndHTTPShareABatch: one request over HTTP and one over gRPC, in flight together,
// run in one batch of 2.
func TestGRPCAndHTTPShareABatch(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 2)
	mo := modelOpts("m", RunnersOf[float32]{f})
	mo.Batching = batcher.Config{MaxBatchSize: 2, MaxQueueSize: 8, MaxQueueDelay: time.Minute}
	ts, c, _ := newGRPCServer(t, testOptions(), mo)
	runs := make(chan int, 4)
	f.runs = runs // after the warm-up
	var wg sync.WaitGroup
	wg.Go(func() {
		if a := ts.do("POST", "/predict/", "image/png", solidPNG(t, 8, 8, 10)); a.status != 200 {
			t.Errorf("HTTP: %d %s", a.status, a.body)
		}
	})
	wg.Go(func() {
		if _, err := c.ModelInfer(t.Context(), imageRequest("m", solidPNG(t, 8, 8, 20))); err != nil {
			t.Errorf("gRPC: %v", err)
		}
	})
	wg.Wait()
	if n := <-runs; n != 2 {
		t.Fatalf("a batch of %d, want 2 (one HTTP request, one gRPC)", n)
	}
	if v := ts.metric(`gateway_requests_total{model="m",version="1",code="200"}`); v != 2 {
		t.Errorf("requests counted: %v", v)
	}
}

// TestGRPCStatusCodes: each failure gets its code, and the server goes on answering.
func TestGRPCStatusCodes(t *testing.T) {
	o := testOptions()
	o.MaxBodyBytes = 8 << 20
	ts, c, _ := newGRPCServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 8, 8, 60)
	lying := wire.AppendBytesElement(nil, img)
	binary.LittleEndian.PutUint32(lying, uint32(len(img)+100))
	var tiny []byte
	for range 1 << 20 {
		tiny = wire.AppendBytesElement(tiny, nil)
	}
	wrongType := imageRequest("m", img)
	wrongType.Inputs[0].Datatype = "INT64"
	tensorBytes := imageRequest("m.tensor", img)
	badID := imageRequest("m", img)
	badID.Inputs[0].Name = "nope"
	twoRaw := imageRequest("m", img)
	twoRaw.RawInputContents = append(twoRaw.RawInputContents, []byte{1})
	fp32Short := &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32",
		Shape: []int64{1, 3, side, side}}}, RawInputContents: [][]byte{make([]byte, 10)}}
	nan := make([]byte, 4*3*side*side)
	binary.LittleEndian.PutUint32(nan, math.Float32bits(float32(math.NaN())))
	fp32NaN := &inference.ModelInferRequest{ModelName: "m", Inputs: fp32Short.Inputs, RawInputContents: [][]byte{nan}}
	notImage := imageRequest("m", []byte("not an image at all"))
	for _, tc := range []struct {
		name string
		req  *inference.ModelInferRequest
		want codes.Code
	}{
		{"unknown model", imageRequest("nope", img), codes.NotFound},
		{"unknown version", func() *inference.ModelInferRequest { r := imageRequest("m", img); r.ModelVersion = "9"; return r }(), codes.NotFound},
		{"length prefix lies", &inference.ModelInferRequest{ModelName: "m", Inputs: imageRequest("m", img).Inputs, RawInputContents: [][]byte{lying}}, codes.InvalidArgument},
		{"truncated length", &inference.ModelInferRequest{ModelName: "m", Inputs: imageRequest("m", img).Inputs, RawInputContents: [][]byte{{1, 0}}}, codes.InvalidArgument},
		{"a million tiny elements", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{1 << 20}}}, RawInputContents: [][]byte{tiny}}, codes.InvalidArgument},
		{"shape and elements differ", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{2}}}, RawInputContents: [][]byte{wire.AppendBytesElement(nil, img)}}, codes.InvalidArgument},
		{"wrong datatype", wrongType, codes.InvalidArgument},
		{"BYTES on the tensor interface", tensorBytes, codes.InvalidArgument},
		{"unknown input", badID, codes.InvalidArgument},
		{"two raw contents", twoRaw, codes.InvalidArgument},
		{"no data", &inference.ModelInferRequest{ModelName: "m", Inputs: imageRequest("m", img).Inputs}, codes.InvalidArgument},
		{"short FP32", fp32Short, codes.InvalidArgument},
		{"NaN", fp32NaN, codes.InvalidArgument},
		{"not an image", notImage, codes.InvalidArgument},
		{"negative shape", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{-1}}}, RawInputContents: [][]byte{lying}}, codes.InvalidArgument},
		{"oversized message", imageRequest("m", make([]byte, 9<<20)), codes.ResourceExhausted},
		{"timeout parameter", func() *inference.ModelInferRequest {
			r := imageRequest("m", img)
			r.Parameters = map[string]*inference.InferParameter{"timeout": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "x"}}}
			return r
		}(), codes.InvalidArgument},
	} {
		_, err := c.ModelInfer(t.Context(), tc.req)
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		// The server answers the next client as before.
		if _, err := c.ModelInfer(t.Context(), imageRequest("m", img)); err != nil {
			t.Fatalf("after %s: %v", tc.name, err)
		}
	}
	if v := ts.metric(`gateway_requests_total{model="_unknown",version="",code="404"}`); v != 2 {
		t.Errorf("unknown models counted: %v", v)
	}
	// Every call counted in flight by the tap (the bound on messages being received) ended,
	// the refused and the oversized ones too.
	waitUntil(t, func() bool { return ts.s.grpcCalls.Load() == 0 })
	// An expired deadline: DEADLINE_EXCEEDED (grpc-go's own, or the server's shed).
	ctx, cancel := context.WithTimeout(t.Context(), time.Microsecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	if _, err := c.ModelInfer(ctx, imageRequest("m", img)); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("expired deadline: %v", err)
	}
	// Statistics: gRPC's requests are counted as HTTP's are.
	st, err := c.ModelStatistics(t.Context(), &inference.ModelStatisticsRequest{Name: "m"})
	if err != nil || len(st.ModelStats) != 1 || st.ModelStats[0].Version != "1" || st.ModelStats[0].InferenceStats.Success.Count == 0 ||
		st.ModelStats[0].InferenceStats.Fail.Count == 0 || st.ModelStats[0].ExecutionCount == 0 || len(st.ModelStats[0].BatchStats) == 0 {
		t.Errorf("ModelStatistics: %v %v", st, err)
	}
	if _, err := c.ModelStatistics(t.Context(), &inference.ModelStatisticsRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelStatistics of an unknown model: %v", err)
	}
	// The repository without a token: UNIMPLEMENTED.
	if _, err := c.RepositoryIndex(t.Context(), &inference.RepositoryIndexRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("RepositoryIndex without a token: %v", err)
	}
}

// TestGRPCRefusalsAreUnavailable: a refusal of a full queue is UNAVAILABLE: before its
// message is read when no model could take it (the only model's queue is full), and with a
// retry-after trailer when its own model refuses it (another model could have taken it).
func TestGRPCRefusalsAreUnavailable(t *testing.T) {
	for _, models := range []int{1, 2} {
		f := newFake[float32](3*side*side, 3, 1)
		mo := modelOpts("m", RunnersOf[float32]{f})
		mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 1}
		all := []ModelOptions{mo}
		if models == 2 {
			all = append(all, modelOpts("other", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
		}
		ts, c, _ := newGRPCServer(t, testOptions(), all...)
		img := solidPNG(t, 8, 8, 60)
		release := holdFullQueue(t, c, f, ts.s.models.Load().byName["m"][0], img)
		var trailer metadata.MD
		_, err := c.ModelInfer(t.Context(), imageRequest("m", img), grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || models == 2 && len(trailer.Get("retry-after")) != 1 {
			t.Errorf("%d models: a full queue: %v, trailer %v", models, err, trailer)
		}
		if v := ts.metric(`gateway_requests_total{model="m",version="1",code="503"}`); v != 1 {
			t.Errorf("%d models: refusals counted %v", models, v)
		}
		release()
	}
}

// TestGRPCMetadataCalls: liveness, readiness, metadata and configuration, and health.
func TestGRPCMetadataCalls(t *testing.T) {
	_, c, cc := newGRPCServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	ctx := t.Context()
	if r, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("live: %v %v", r, err)
	}
	if r, err := c.ServerReady(ctx, &inference.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ready: %v %v", r, err)
	}
	if r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "m"}); err != nil || !r.Ready {
		t.Errorf("model ready: %v %v", r, err)
	}
	if r, err := c.ModelReady(ctx, &inference.ModelReadyRequest{Name: "x"}); err != nil || r.Ready {
		t.Errorf("unknown model ready: %v %v", r, err)
	}
	if r, err := c.ServerMetadata(ctx, &inference.ServerMetadataRequest{}); err != nil || r.Name != "imagegate" || !strings.Contains(strings.Join(r.Extensions, ","), "classification") {
		t.Errorf("server metadata: %v %v", r, err)
	}
	md, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "m"})
	if err != nil || md.Name != "m" || md.Inputs[0].Datatype != "BYTES" || md.Outputs[0].Datatype != "FP32" || !equalInts(md.Outputs[0].Shape, []int64{-1, 3}) || md.Versions[0] != "1" {
		t.Errorf("model metadata: %v %v", md, err)
	}
	md, err = c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "m.tensor", Version: "1"})
	if err != nil || md.Inputs[0].Datatype != "FP32" || !equalInts(md.Inputs[0].Shape, []int64{-1, 3, side, side}) {
		t.Errorf("tensor metadata: %v %v", md, err)
	}
	cfg, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "m"})
	if err != nil || cfg.Config.MaxBatchSize != 4 || cfg.Config.Input[0].DataType != inference.DataType_TYPE_STRING || cfg.Config.Output[0].Dims[0] != 3 {
		t.Errorf("config: %v %v", cfg, err)
	}
	h := healthgrpc.NewHealthClient(cc)
	for _, svc := range []string{"", "inference.GRPCInferenceService"} {
		if r, err := h.Check(ctx, &healthgrpc.HealthCheckRequest{Service: svc}); err != nil || r.Status != healthgrpc.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r, err)
		}
	}
	if _, err := h.Check(ctx, &healthgrpc.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: %v", err)
	}
}

// TestGRPCRepositoryNeedsTheToken: with an admin token, the repository calls need it.
func TestGRPCRepositoryNeedsTheToken(t *testing.T) {
	o := testOptions()
	o.AdminToken = "secret"
	_, c, _ := newGRPCServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	if _, err := c.RepositoryIndex(t.Context(), &inference.RepositoryIndexRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer wrong")
	if _, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("with a wrong token: %v", err)
	}
	ctx = metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer secret")
	r, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	if err != nil || len(r.Models) != 1 || r.Models[0].Name != "m" || r.Models[0].State != StateReady {
		t.Errorf("index: %v %v", r, err)
	}
	if _, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "m",
		Parameters: map[string]*inference.ModelRepositoryParameter{"config": {}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("load with a config: %v", err)
	}
}

// TestGRPCStream: requests on one stream are each answered with their id; a failed one with
// error_message, and the stream goes on; closing the sending side ends it once all are
// answered.
func TestGRPCStream(t *testing.T) {
	ts, c, _ := newGRPCServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	st, err := c.ModelStreamInfer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		req := imageRequest("m", solidPNG(t, 8, 8, uint8(20*i)))
		if i == 3 {
			req.ModelName = "nope"
		}
		req.Id = "id-" + strconv.Itoa(i)
		if i%2 == 0 { // as tritonclient's async_stream_infer(enable_empty_final_response=True)
			req.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	st.CloseSend()
	seen := map[string]bool{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		id := r.InferResponse.GetId()
		seen[id] = true
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "id-"))
		if final, ok := r.InferResponse.GetParameters()["triton_final_response"]; ok != (i%2 == 0) || ok && !final.GetBoolParam() {
			t.Errorf("%s: triton_final_response %v, want it true exactly when the request asked for it", id, final)
		}
		if id == "id-3" {
			if !strings.Contains(r.ErrorMessage, "unknown model") {
				t.Errorf("id-3: %q", r.ErrorMessage)
			}
			continue
		}
		if r.ErrorMessage != "" || len(r.InferResponse.RawOutputContents) != 1 {
			t.Errorf("%s: %v", id, r)
		}
	}
	if len(seen) != n {
		t.Errorf("answers for %d ids, want %d", len(seen), n)
	}
	if n := grpcHeld(ts.s); n != 0 {
		t.Errorf("%d message buffers not back in the pool after every request was answered", n)
	}
}

// grpcHeld counts the message buffers s's gRPC servers have not released.
func grpcHeld(s *Server) int {
	n := 0
	for _, g := range s.grpcServers() {
		n += g.codec.Held()
	}
	return n
}

// TestGRPCMessageBuffersReturn: the pooled buffer a request's images alias goes back once it
// is answered, also when the call fails, and when a stream ends with requests read but not
// answered.
func TestGRPCMessageBuffersReturn(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 4)
	ts, c, cc := newGRPCServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{f}))
	img := solidPNG(t, 8, 8, 60)
	if _, err := c.ModelInfer(t.Context(), imageRequest("m", img)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModelInfer(t.Context(), imageRequest("nope", img)); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown model: %v", err)
	}
	bad := imageRequest("m", []byte("not an image"))
	if _, err := c.ModelInfer(t.Context(), bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad image: %v", err)
	}
	if n := grpcHeld(ts.s); n != 0 {
		t.Fatalf("%d buffers held after three answered calls", n)
	}
	// Unary calls that fail after their message was decoded, before the handler runs: a
	// second message (a cardinality violation), and a client that sends its message without
	// closing its side and then leaves.
	rawCall := func(ctx context.Context) grpc.ClientStream {
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, inference.GRPCInferenceService_ModelInfer_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st2 := rawCall(t.Context())
	st2.SendMsg(imageRequest("m", img))
	st2.SendMsg(imageRequest("m", img))
	st2.CloseSend()
	if err := st2.RecvMsg(new(inference.ModelInferResponse)); err == nil {
		t.Fatal("a unary call with two messages succeeded")
	}
	leave, cancelLeave := context.WithCancel(t.Context())
	st3 := rawCall(leave)
	st3.SendMsg(imageRequest("m", img))
	time.Sleep(100 * time.Millisecond) // the message is decoded; the server waits for the end of the client's stream
	cancelLeave()
	for end := time.Now().Add(5 * time.Second); grpcHeld(ts.s) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d buffers still held after unary calls that failed after their message was decoded", grpcHeld(ts.s))
		}
	}
	// A stream whose client leaves with requests in flight and more arriving.
	ctx, cancel := context.WithCancel(t.Context())
	st, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if err := st.Send(imageRequest("m", img)); err != nil {
			break
		}
	}
	cancel()
	for end := time.Now().Add(5 * time.Second); grpcHeld(ts.s) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d buffers still held 5 s after the stream ended", grpcHeld(ts.s))
		}
	}
}

// TestGRPCDrain: on Shutdown health turns NOT_SERVING at once, the calls in flight are
// answered, and new connections are refused once the listener closes.
func TestGRPCDrain(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 4)
	o := testOptions()
	o.DrainDelay = 300 * time.Millisecond
	ts, c, cc := newGRPCServer(t, o, modelOpts("m", RunnersOf[float32]{f}))
	f.gate = make(chan struct{})
	img := solidPNG(t, 8, 8, 60)
	var wg sync.WaitGroup
	const n = 6
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := c.ModelInfer(t.Context(), imageRequest("m", img))
			errs <- err
		})
	}
	waitUntil(t, func() bool { return ts.s.inflight.Load() == n })
	done := make(chan error, 1)
	go func() { done <- ts.s.Shutdown(context.Background()) }()
	h := healthgrpc.NewHealthClient(cc)
	waitUntil(t, func() bool {
		r, err := h.Check(t.Context(), &healthgrpc.HealthCheckRequest{})
		return err == nil && r.Status == healthgrpc.HealthCheckResponse_NOT_SERVING
	})
	close(f.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a call in flight at the drain: %v", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGRPCTruncatedFrames: a call whose gRPC message is cut short (its length prefix says
// more than its stream carries), and a connection that ends inside a frame, get the server's
// answer or a closed connection, and the server answers the next client.
func TestGRPCTruncatedFrames(t *testing.T) {
	_, c, cc := newGRPCServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	addr := cc.Target()
	for _, cut := range []string{"message", "frame"} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(nc, nc)
		fr.WriteSettings()
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/inference.GRPCInferenceService/ModelInfer"},
			{":authority", "gw"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		msg := []byte{0, 0, 0, 0x10, 0} // uncompressed, 4096 bytes declared
		msg = append(msg, 0x0a, 0x01, 'm')
		if cut == "message" {
			fr.WriteData(1, true, msg) // the stream ends 4093 bytes short
			code := ""
			for code == "" {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("no answer to a truncated message: %v", err)
				}
				if h, ok := f.(*http2.HeadersFrame); ok {
					fields, _ := hpack.NewDecoder(4096, nil).DecodeFull(h.HeaderBlockFragment())
					for _, hf := range fields {
						if hf.Name == "grpc-status" {
							code = hf.Value
						}
					}
				}
			}
			if code == "0" {
				t.Errorf("a truncated message answered OK")
			}
		} else {
			nc.Write([]byte{0, 0, 100, 0, 0}) // a DATA frame header cut short, then the end
		}
		nc.Close()
		if _, err := c.ModelInfer(t.Context(), imageRequest("m", solidPNG(t, 8, 8, 60))); err != nil {
			t.Fatalf("after a truncated %s: %v", cut, err)
		}
	}
}

// TestGRPCStalledCallsTimeOut: ModelInfer calls that send their headers and never their
// message are cancelled after server.read_timeout, so that they do not hold the calls' bound
// (what the queues can hold) and shut every other client out.
func TestGRPCStalledCallsTimeOut(t *testing.T) {
	o := testOptions()
	o.ReadTimeout = 300 * time.Millisecond
	ts, c, cc := newGRPCServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	nc, err := net.Dial("tcp", cc.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(nc, nc)
	fr.WriteSettings()
	const stalled = 20
	for i := range stalled {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/inference.GRPCInferenceService/ModelInfer"},
			{":authority", "gw"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true})
	}
	waitUntil(t, func() bool { return ts.s.grpcCalls.Load() == stalled })
	waitUntil(t, func() bool { return ts.s.grpcCalls.Load() == 0 }) // the read timeout ended them
	if _, err := c.ModelInfer(t.Context(), imageRequest("m", solidPNG(t, 8, 8, 60))); err != nil {
		t.Fatalf("after stalled calls: %v", err)
	}
}

// TestGRPCConnectionsBounded: gRPC connections are bounded by server.max_connections (their
// own count, beside HTTP's): a client over it is refused UNAVAILABLE and counted, HTTP is
// untouched, and once a connection closes a new client is served.
func TestGRPCConnectionsBounded(t *testing.T) {
	o := testOptions()
	o.MaxConnections = 2
	ts, _, cc := newGRPCServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	target := cc.Target()
	client := func() (*grpc.ClientConn, healthgrpc.HealthClient) {
		c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, healthgrpc.NewHealthClient(c)
	}
	check := func(h healthgrpc.HealthClient) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := h.Check(ctx, &healthgrpc.HealthCheckRequest{})
		return err
	}
	c1, h1 := client()
	_, h2 := client()
	for _, h := range []healthgrpc.HealthClient{h1, h2} {
		if err := check(h); err != nil {
			t.Fatalf("within the bound: %v", err)
		}
	}
	c3, h3 := client()
	if err := check(h3); status.Code(err) != codes.Unavailable {
		t.Fatalf("a third connection over max_connections 2: %v, want UNAVAILABLE", err)
	}
	if v := ts.metric(`gateway_refusals_total{stage="connections"}`); v < 1 {
		t.Errorf("gateway_refusals_total{stage=\"connections\"} = %v, want the refusals counted", v)
	}
	if code := ts.do("GET", "/v2/health/ready", "", nil).status; code != 200 {
		t.Errorf("HTTP readiness %d while gRPC is at its bound", code)
	}
	c3.Close() // it would reconnect into the place freed next
	c1.Close()
	_, h4 := client()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := check(h4)
		if err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("a connection after one closed: %v", err)
		}
	}
}

// TestGRPCRefusedCallsCostAWindow: a call refused at the door (its model's queue full) costs
// the server at most its flow-control window of upload (server.grpc_call_window, 64 KiB by
// default), not its whole message: under an overload of photos, receiving every refused
// call's message whole made a gRPC refusal cost twice an HTTP one.
func TestGRPCRefusedCallsCostAWindow(t *testing.T) {
	const calls, big = 8, 900 << 10
	for _, window := range []int64{0, 1 << 20} {
		f := newFake[float32](3*side*side, 3, 1)
		mo := modelOpts("m", RunnersOf[float32]{f})
		mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 1}
		o := testOptions()
		o.GRPCCallWindow = window
		s, err := New(o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AddModel(mo); err != nil {
			t.Fatal(err)
		}
		serve(t, s)
		tcp, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := &countingListener{Listener: tcp}
		go s.ServeGRPC(ln)
		cc, err := grpc.NewClient(tcp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(math.MaxInt32)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		c := inference.NewGRPCInferenceServiceClient(cc)
		img := solidPNG(t, 8, 8, 60)
		release := holdFullQueue(t, c, f, s.models.Load().byName["m"][0], img)
		read := func() (n int64) {
			ln.mu.Lock()
			defer ln.mu.Unlock()
			for _, c := range ln.conns {
				n += c.read.Load()
			}
			return n
		}
		before := read()
		photo := append(bytes.Clone(img), make([]byte, big)...) // refused before it is decoded
		for range calls {
			if _, err := c.ModelInfer(t.Context(), imageRequest("m", photo)); status.Code(err) != codes.Unavailable {
				t.Fatalf("window %d: a call to a full queue: %v", window, err)
			}
		}
		got := read() - before
		// How much more arrives under a larger window depends on how fast the client sends
		// before the refusal reaches it: only the default's bound is checked.
		const bound = calls * (64<<10 + 16<<10) // a window each, and framing
		if window == 0 && got > bound {
			t.Errorf("%d refused calls of %d KiB: the server read %d KiB; want at most a 64 KiB window each", calls, big>>10, got>>10)
		}
		t.Logf("call window %d: %d refused calls of %d KiB, %d KiB read", window, calls, big>>10, got>>10)
		release()
	}
}

// TestGRPCRefusalsHoldNothing: a call refused at the door holds nothing once answered, whatever
// its deadline. grpc-go arms a timer for a call's deadline before the tap runs, and a call the
// tap refuses keeps it, and its context, until that deadline (docs/operations.md, hostile
// clients). Refused calls with a short deadline and with a long one are answered alike, and
// counted once.
func TestGRPCRefusalsHoldNothing(t *testing.T) {
	const calls = 2000
	f := newFake[float32](3*side*side, 3, 1)
	mo := modelOpts("m", RunnersOf[float32]{f})
	mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 1}
	ts, c, _ := newGRPCServer(t, testOptions(), mo)
	img := solidPNG(t, 8, 8, 60)
	release := holdFullQueue(t, c, f, ts.s.models.Load().byName["m"][0], img)
	req := imageRequest("m", img)
	refuse := func(deadline time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		_, err := c.ModelInfer(ctx, req)
		return err
	}
	short, long := refuse(10*time.Second), refuse(time.Hour)
	if status.Code(short) != codes.Unavailable || status.Code(long) != codes.Unavailable || status.Convert(short).Message() != status.Convert(long).Message() {
		t.Fatalf("refused with a 10 s deadline: %v; with an hour's: %v", short, long)
	}
	liveObjects := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapObjects)
	}
	before := liveObjects()
	for range calls {
		if err := refuse(time.Hour); status.Code(err) != codes.Unavailable {
			t.Fatalf("a call to a full queue: %v", err)
		}
	}
	if grown := liveObjects() - before; grown > calls/4 {
		t.Errorf("%d calls refused with an hour's deadline: %d more objects live on the heap; want none held per call", calls, grown)
	}
	if v := ts.metric(`gateway_requests_total{model="m",version="1",code="503"}`); v != calls+2 {
		t.Errorf("refusals counted %v, want %d", v, calls+2)
	}
	release()
}

// holdFullQueue fills model m's queue (max_batch_size 1, max_queue_size 1; its runner f) over
// gRPC: one call runs, held by f's gate, and one waits. release opens the gate and waits for
// both answers; a failed check before it must not leave the run held, so cleanup opens it too.
func holdFullQueue(t *testing.T, c inference.GRPCInferenceServiceClient, f *fakeRunner[float32], m *model, img []byte) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	f.gate = gate
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open)
	entered := f.entered.Load() // the warm-up's runs
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			if _, err := c.ModelInfer(t.Context(), imageRequest(m.name, img)); err != nil {
				t.Error(err)
			}
		})
		if i == 0 { // in the run: queueLen is 0 before the submission too
			waitUntil(t, func() bool { return f.entered.Load() == entered+1 })
		}
		waitUntil(t, func() bool { return m.pending.Load() == int64(i+1) && m.impl.queueLen() == i })
	}
	return func() {
		open()
		wg.Wait()
	}
}
