package oipgrpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
	"github.com/imagegate/imagegate/loadtest/oipgrpc/oipgrpctest"
)

const (
	model  = oipgrpctest.Model
	input  = oipgrpctest.Input
	output = oipgrpctest.Output
)

func dial(t *testing.T, srv *oipgrpctest.Server, o oipgrpc.Options) *oipgrpc.Client {
	t.Helper()
	c, err := oipgrpc.Dial(srv.Addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var images = [][]byte{[]byte("\xff\xd8\xff first image"), []byte("\x89PNG second, longer image"), {}}

// wantScores is the fake model's output for images, flattened.
func wantScores(imgs ...[]byte) []float32 {
	var out []float32
	for _, img := range imgs {
		out = append(out, oipgrpctest.Scores(img)...)
	}
	return out
}

func code(err error) codes.Code { return status.Code(err) }

// TestMetadataCalls: health, server and model metadata, configuration, statistics and the
// repository calls, as tritonclient.grpc makes them, with the status codes of refusals.
func TestMetadataCalls(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	c := dial(t, srv, oipgrpc.Options{})
	ctx := t.Context()
	if live, err := c.ServerLive(ctx); !live || err != nil {
		t.Fatalf("live %v %v", live, err)
	}
	if ready, err := c.ServerReady(ctx); !ready || err != nil {
		t.Fatalf("ready %v %v", ready, err)
	}
	for _, v := range []string{"", oipgrpctest.Version} {
		if ready, err := c.ModelReady(ctx, model, v); !ready || err != nil {
			t.Errorf("model ready (version %q): %v %v", v, ready, err)
		}
	}
	if ready, err := c.ModelReady(ctx, "nope", ""); ready || err != nil {
		t.Errorf("unknown model ready: %v %v", ready, err)
	}
	sm, err := c.ServerMetadata(ctx)
	if err != nil || sm.GetName() != "oipgrpctest" || !strings.Contains(strings.Join(sm.GetExtensions(), ","), "classification") {
		t.Fatalf("server metadata %v %v", sm, err)
	}
	md, err := c.ModelMetadata(ctx, model, "")
	if err != nil || md.GetInputs()[0].GetDatatype() != "BYTES" || !reflect.DeepEqual(md.GetOutputs()[0].GetShape(), []int64{-1, oipgrpctest.Classes}) {
		t.Fatalf("model metadata %v %v", md, err)
	}
	if _, err := c.ModelMetadata(ctx, model, "9"); code(err) != codes.NotFound {
		t.Errorf("unknown version: %v", err)
	}
	cfg, err := c.ModelConfig(ctx, model, "")
	if err != nil || cfg.GetMaxBatchSize() != 8 || cfg.GetInput()[0].GetDataType() != inference.DataType_TYPE_STRING ||
		cfg.GetDynamicBatching().GetMaxQueueDelayMicroseconds() != 100 {
		t.Fatalf("model config %v %v", cfg, err)
	}
	if _, err := c.ModelConfig(ctx, "nope", ""); code(err) != codes.NotFound {
		t.Errorf("config of an unknown model: %v", err)
	}
	if _, err := c.Infer(ctx, model, "", imageRequest(images[0])); err != nil {
		t.Fatal(err)
	}
	st, err := c.ModelStatistics(ctx, model, "")
	if err != nil || len(st) != 1 || st[0].GetInferenceCount() != 1 || st[0].GetInferenceStats().GetSuccess().GetCount() != 1 {
		t.Fatalf("statistics %v %v", st, err)
	}
	// Unloaded, the model is not ready and refuses inferences; loaded again, it serves.
	if err := c.UnloadModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	idx, err := c.RepositoryIndex(ctx, false)
	if err != nil || len(idx) != 1 || idx[0].GetState() != "UNAVAILABLE" {
		t.Fatalf("index %v %v", idx, err)
	}
	if ready, _ := c.ModelReady(ctx, model, ""); ready {
		t.Error("unloaded model is ready")
	}
	if _, err := c.Infer(ctx, model, "", imageRequest(images[0])); code(err) != codes.Unavailable {
		t.Errorf("infer on an unloaded model: %v", err)
	}
	if err := c.LoadModel(ctx, model, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadModel(ctx, "nope", nil); code(err) != codes.NotFound {
		t.Errorf("load of an unknown model: %v", err)
	}
	if ready, _ := c.ModelReady(ctx, model, ""); !ready {
		t.Error("reloaded model is not ready")
	}
}

func imageRequest(imgs ...[]byte) *oip.Request {
	return &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, false, imgs...)}}
}

// TestInfer: images sent as raw BYTES come back as the model's scores for each, a
// classification as "<score>:<index>:<label>" rows, the id echoed, and the client's headers
// reach the server as metadata.
func TestInfer(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	c := dial(t, srv, oipgrpc.Options{Header: map[string]string{"Authorization": "Bearer x"}})
	req := imageRequest(images...)
	req.ID = "req-1"
	r, err := c.Infer(t.Context(), model, "", req)
	if err != nil {
		t.Fatal(err)
	}
	out := r.Output(output)
	if r.ID != "req-1" || r.ModelName != model || out == nil || !out.Binary || !reflect.DeepEqual(out.Shape, []int64{3, oipgrpctest.Classes}) {
		t.Fatalf("response %+v", r)
	}
	if !reflect.DeepEqual(out.FP32, wantScores(images...)) {
		t.Fatalf("scores %v, want %v", out.FP32, wantScores(images...))
	}
	if got := srv.LastHeader("authorization"); !reflect.DeepEqual(got, []string{"Bearer x"}) {
		t.Errorf("server saw authorization %q", got)
	}

	req.Outputs = []oip.Output{{Name: output, Classification: 2}}
	r, err = c.Infer(t.Context(), model, oipgrpctest.Version, req)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := r.Output(output).Classes()
	if err != nil || len(rows) != 3 {
		t.Fatalf("classes %v %v", rows, err)
	}
	for i, img := range images {
		scores := oipgrpctest.Scores(img)
		for j, want := range oipgrpctest.Top(scores, 2) {
			got := rows[i][j]
			if got.Index != want || got.Label != oipgrpctest.Label(want) || math.Abs(got.Score-float64(scores[want])) > 1e-4 {
				t.Errorf("image %d class %d: %+v, want index %d score %v", i, j, got, want, scores[want])
			}
		}
	}
	if _, err := c.Infer(t.Context(), "nope", "", imageRequest(images[0])); code(err) != codes.NotFound {
		t.Errorf("unknown model: %v", err)
	}
}

// TestEncodeRequest: the request as tritonclient.grpc lays it out, down to the wire: the
// BYTES elements length-prefixed in raw_input_contents (field 7 of ModelInferRequest), no
// typed contents, classification as an int64_param, parameters by kind.
func TestEncodeRequest(t *testing.T) {
	req := &oip.Request{
		Inputs:     []oip.Input{oip.ImageInput(input, true, []byte("ab"), []byte("c"))},
		Outputs:    []oip.Output{{Name: output, Classification: 3}, {Name: "other"}},
		Parameters: map[string]any{"s": "v", "b": true, "i": 7, "u": uint64(9), "f": 0.5},
	}
	pr, err := oipgrpc.EncodeRequest(model, "", req)
	if err != nil {
		t.Fatal(err)
	}
	in := pr.GetInputs()[0]
	if pr.GetModelName() != model || pr.GetModelVersion() != "" || pr.GetId() != "" || in.GetName() != input ||
		in.GetDatatype() != "BYTES" || !reflect.DeepEqual(in.GetShape(), []int64{2}) || in.GetContents() != nil {
		t.Fatalf("request %v", pr)
	}
	wantRaw := []byte{2, 0, 0, 0, 'a', 'b', 1, 0, 0, 0, 'c'}
	if len(pr.GetRawInputContents()) != 1 || !bytes.Equal(pr.GetRawInputContents()[0], wantRaw) {
		t.Fatalf("raw_input_contents % x, want % x", pr.GetRawInputContents(), wantRaw)
	}
	if k := pr.GetOutputs()[0].GetParameters()["classification"].GetInt64Param(); k != 3 || pr.GetOutputs()[1].GetParameters() != nil {
		t.Errorf("outputs %v", pr.GetOutputs())
	}
	p := pr.GetParameters()
	if p["s"].GetStringParam() != "v" || !p["b"].GetBoolParam() || p["i"].GetInt64Param() != 7 || p["u"].GetUint64Param() != 9 || p["f"].GetDoubleParam() != 0.5 {
		t.Errorf("parameters %v", p)
	}
	// On the wire: field 7, length-delimited, holding exactly the prefixed elements.
	wire, err := proto.Marshal(pr)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for b := wire; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal("bad wire data")
		}
		b = b[n:]
		if num == 7 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			found = bytes.Equal(v, wantRaw)
			b = b[m:]
			continue
		}
		b = b[protowire.ConsumeFieldValue(num, typ, b):]
	}
	if !found {
		t.Errorf("no field 7 with the raw elements in % x", wire)
	}
	for name, bad := range map[string]*oip.Request{
		"no input":        {},
		"shape lies":      {Inputs: []oip.Input{{Name: input, Datatype: oip.BYTES, Shape: []int64{3}, Bytes: [][]byte{{1}}}}},
		"bad parameter":   {Inputs: req.Inputs, Parameters: map[string]any{"x": []int{1}}},
		"mixed datatypes": {Inputs: []oip.Input{{Name: input, Datatype: oip.FP32, Shape: []int64{1}, Bytes: [][]byte{{1}}}}},
	} {
		if _, err := oipgrpc.EncodeRequest(model, "", bad); !errors.Is(err, oipgrpc.ErrInvalid) && !errors.Is(err, oip.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDecodeResponse: raw contents and typed contents read alike; a response whose data
// contradicts its shape, a lying BYTES length, or raw contents that do not match the outputs
// are refused.
func TestDecodeResponse(t *testing.T) {
	raw := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5))
	raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(-2))
	out := func(name, dt string, shape ...int64) *inference.ModelInferResponse_InferOutputTensor {
		return &inference.ModelInferResponse_InferOutputTensor{Name: name, Datatype: dt, Shape: shape}
	}
	r, err := oipgrpc.DecodeResponse(&inference.ModelInferResponse{Id: "x", Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("a", "FP32", 1, 2)},
		RawOutputContents: [][]byte{raw}, Parameters: map[string]*inference.InferParameter{"triton_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}})
	if err != nil || !reflect.DeepEqual(r.Outputs[0].FP32, []float32{1.5, -2}) || r.Parameters["triton_final_response"] != true || r.ID != "x" {
		t.Fatalf("raw: %+v %v", r, err)
	}
	typed := out("a", "FP32", 2)
	typed.Contents = &inference.InferTensorContents{Fp32Contents: []float32{1.5, -2}}
	u8 := out("u", "UINT8", 3)
	u8.Contents = &inference.InferTensorContents{UintContents: []uint32{0, 7, 255}}
	by := out("s", "BYTES", 1, 1)
	by.Contents = &inference.InferTensorContents{BytesContents: [][]byte{[]byte("0.5:1:cat")}}
	r, err = oipgrpc.DecodeResponse(&inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{typed, u8, by}})
	if err != nil || !reflect.DeepEqual(r.Outputs[0].FP32, []float32{1.5, -2}) || !reflect.DeepEqual(r.Outputs[1].UINT8, []uint8{0, 7, 255}) || r.Outputs[0].Binary {
		t.Fatalf("typed: %+v %v", r, err)
	}
	if cl, err := r.Outputs[2].Classes(); err != nil || cl[0][0].Label != "cat" {
		t.Fatalf("classes %v %v", cl, err)
	}
	big := out("u", "UINT8", 1)
	big.Contents = &inference.InferTensorContents{UintContents: []uint32{256}}
	both := out("a", "FP32", 2)
	both.Contents = typed.Contents
	for name, bad := range map[string]*inference.ModelInferResponse{
		"raw count":        {Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("a", "FP32", 1, 2), out("b", "FP32", 1)}, RawOutputContents: [][]byte{raw}},
		"raw size":         {Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("a", "FP32", 3)}, RawOutputContents: [][]byte{raw}},
		"lying length":     {Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("s", "BYTES", 1)}, RawOutputContents: [][]byte{{200, 0, 0, 0, 'x'}}},
		"typed count":      {Outputs: []*inference.ModelInferResponse_InferOutputTensor{typed, out("b", "FP32", 1)}},
		"UINT8 over 255":   {Outputs: []*inference.ModelInferResponse_InferOutputTensor{big}},
		"raw and contents": {Outputs: []*inference.ModelInferResponse_InferOutputTensor{both}, RawOutputContents: [][]byte{raw}},
		"unknown datatype": {Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("a", "INT128", 1)}},
	} {
		if _, err := oipgrpc.DecodeResponse(bad); !errors.Is(err, oipgrpc.ErrInvalid) && !errors.Is(err, oip.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestConcurrentInfers: 16 inferences at once on one connection, half of them through
// AsyncInfer's callback, each get the same scores as the same request alone.
func TestConcurrentInfers(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	c := dial(t, srv, oipgrpc.Options{})
	alone, err := c.Infer(t.Context(), model, "", imageRequest(images...))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*oip.Response, 16)
	errs := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		if i%2 == 0 {
			go func() {
				defer wg.Done()
				results[i], errs[i] = c.Infer(t.Context(), model, "", imageRequest(images...))
			}()
			continue
		}
		if err := c.AsyncInfer(t.Context(), model, "", imageRequest(images...), func(r *oip.Response, err error) {
			results[i], errs[i] = r, err
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || !reflect.DeepEqual(results[i].Outputs[0].FP32, alone.Outputs[0].FP32) {
			t.Errorf("request %d: %v %v", i, errs[i], results[i])
		}
	}
	if err := c.AsyncInfer(t.Context(), model, "", &oip.Request{}, func(*oip.Response, error) { t.Error("callback of a request never sent") }); err == nil {
		t.Error("AsyncInfer of an empty request")
	}
}

// TestErrorCodes: each refusal reaches the caller as its status code: RESOURCE_EXHAUSTED and
// UNAVAILABLE from the server, DEADLINE_EXCEEDED when the deadline passes first,
// INVALID_ARGUMENT for a BYTES element whose length prefix lies, and RESOURCE_EXHAUSTED from
// the client itself for an answer over its MaxMessageSize.
func TestErrorCodes(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	srv.SetFail(func(ctx context.Context, r *inference.ModelInferRequest) error {
		switch r.GetId() {
		case "busy":
			return status.Error(codes.ResourceExhausted, "queue full")
		case "draining":
			return status.Error(codes.Unavailable, "shutting down")
		case "slow":
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	})
	c := dial(t, srv, oipgrpc.Options{})
	for id, want := range map[string]codes.Code{"busy": codes.ResourceExhausted, "draining": codes.Unavailable, "slow": codes.DeadlineExceeded, "fine": codes.OK} {
		timeout := time.Minute // a deadline that a loaded test machine does not reach
		if id == "slow" {
			timeout = 100 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		req := imageRequest(images[0])
		req.ID = id
		_, err := c.Infer(ctx, model, "", req)
		cancel()
		if code(err) != want {
			t.Errorf("%s: %v, want %v", id, err, want)
		}
	}
	lying := &inference.ModelInferRequest{ModelName: model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: input, Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{{99, 0, 0, 0, 'x'}}}
	if _, err := c.InferProto(t.Context(), lying); code(err) != codes.InvalidArgument {
		t.Errorf("lying length prefix: %v", err)
	}

	// 250,000 one-byte images: a 1.25 MB request whose 5 MB answer is over grpc-go's default
	// of 4 MiB but well under this client's default (tritonclient's 2^31-1).
	many := make([][]byte, 250000)
	for i := range many {
		many[i] = []byte{byte(i)}
	}
	if r, err := c.Infer(t.Context(), model, "", imageRequest(many...)); err != nil || len(r.Outputs[0].FP32) != len(many)*oipgrpctest.Classes {
		t.Fatalf("large answer: %v", err)
	}
	small := dial(t, srv, oipgrpc.Options{MaxMessageSize: 4 << 20})
	if _, err := small.Infer(t.Context(), model, "", imageRequest(many...)); code(err) != codes.ResourceExhausted {
		t.Errorf("answer over MaxMessageSize: %v", err)
	}
}

// TestInferMarshaled: a request marshalled once is sent as it is, many times and at once, and
// the size of each answer is the size of the answer Infer decodes.
func TestInferMarshaled(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	c := dial(t, srv, oipgrpc.Options{})
	req := imageRequest(images...)
	b, err := oipgrpc.MarshalRequest(model, "", req)
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := oipgrpc.EncodeRequest(model, "", req)
	resp, err := c.InferProto(t.Context(), pr)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Size(resp)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			n, err := c.InferMarshaled(t.Context(), b)
			if err != nil || n != want {
				t.Errorf("InferMarshaled: %d bytes, %v; want %d", n, err, want)
			}
		})
	}
	wg.Wait()
	if srv.Infers.Load() != 9 {
		t.Errorf("server answered %d", srv.Infers.Load())
	}
	if _, err := c.InferMarshaled(t.Context(), []byte{0xff, 0xff}); code(err) != codes.Internal {
		t.Errorf("garbage request: %v", err) // the server cannot unmarshal it
	}
}

// TestStream: requests from many goroutines on one stream each get their own answer
// (matched by id; the server answers out of order), a request that fails gets a StreamError
// with its message and the stream goes on, Close waits for the end, and the stream's end
// reaches every waiting request.
func TestStream(t *testing.T) {
	srv := oipgrpctest.NewServer(t)
	held := make(chan struct{})
	srv.SetFail(func(ctx context.Context, r *inference.ModelInferRequest) error {
		if r.GetId() == "hold" { // answered when the stream ends
			close(held)
			<-ctx.Done()
			return ctx.Err()
		}
		if strings.HasPrefix(r.GetId(), "busy") {
			return status.Error(codes.ResourceExhausted, "queue full")
		}
		return nil
	})
	c := dial(t, srv, oipgrpc.Options{})
	s, err := c.OpenStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			img := []byte(fmt.Sprintf("image %d", i))
			req := imageRequest(img)
			if i%5 == 0 {
				req.ID = fmt.Sprintf("busy-%d", i)
			}
			r, err := s.Infer(t.Context(), model, "", req)
			if i%5 == 0 {
				var se *oipgrpc.StreamError
				if !errors.As(err, &se) || se.ID != req.ID || se.Message != "queue full" {
					t.Errorf("request %d: %v, want its StreamError", i, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(r.Outputs[0].FP32, wantScores(img)) {
				t.Errorf("request %d: %v %v", i, err, r)
			}
		})
	}
	wg.Wait()
	if _, err := s.Infer(t.Context(), "nope", "", imageRequest(images[0])); err == nil || !strings.Contains(err.Error(), "unknown model") {
		t.Errorf("unknown model on the stream: %v", err)
	}
	if r, err := s.Infer(t.Context(), model, "", imageRequest(images[1])); err != nil || r.Outputs[0].FP32[0] != wantScores(images[1])[0] {
		t.Errorf("after a failure the stream goes on: %v", err)
	}
	if _, err := s.InferProto(t.Context(), &inference.ModelInferRequest{ModelName: model}); !errors.Is(err, oipgrpc.ErrInvalid) {
		t.Errorf("request without id: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Infer(t.Context(), model, "", imageRequest(images[0])); !errors.Is(err, oipgrpc.ErrStreamClosed) {
		t.Errorf("after Close: %v", err)
	}
	if srv.Streams.Load() != 1 || s.Unmatched() != 0 {
		t.Errorf("%d streams, %d unmatched answers", srv.Streams.Load(), s.Unmatched())
	}

	// A stream that ends under a waiting request (the server stops) hands it the status.
	s2, err := c.OpenStream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		req := imageRequest(images[0])
		req.ID = "hold"
		_, err := s2.Infer(t.Context(), model, "", req)
		errc <- err
	}()
	<-held
	srv.Stop()
	if err := <-errc; code(err) != codes.Unavailable && code(err) != codes.Canceled {
		t.Errorf("request on a stream the server ended: %v", err)
	}
	if err := s2.Close(); err == nil {
		t.Error("Close of a broken stream: nil")
	}
}
