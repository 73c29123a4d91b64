package gateway

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// FuzzGRPCModelInfer: any ModelInferRequest message, decoded as grpc-go decodes it and run
// through the pipeline (the fake runner), is answered with scores or with a status code of
// the documented set, never a panic or INTERNAL; and the next valid request is answered.
func FuzzGRPCModelInfer(f *testing.F) {
	img := solidPNG(f, 8, 8, 60)
	seeds := []*inference.ModelInferRequest{
		imageRequest("m", img),
		imageRequest("m", img, img),
		{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &inference.InferTensorContents{BytesContents: [][]byte{img}}}}},
		{ModelName: "m.tensor", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, side, side}}}, RawInputContents: [][]byte{make([]byte, 4*3*side*side)}},
		{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{3}}}, RawInputContents: [][]byte{wire.AppendBytesElement([]byte{9, 0, 0, 0}, img)}},
	}
	seeds[1].Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "output",
		Parameters: map[string]*inference.InferParameter{"classification": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 2}}}}}
	for _, r := range seeds {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s, err := New(testOptions(), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Shutdown(f.Context()) })
	if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
		f.Fatal(err)
	}
	valid := imageRequest("m", img)
	f.Fuzz(func(t *testing.T, b []byte) {
		var req inference.ModelInferRequest
		if proto.Unmarshal(b, &req) != nil {
			return // grpc-go refuses it before the handler (INTERNAL: cannot unmarshal)
		}
		_, err := s.grpcInfer(t.Context(), &req, nil, false, 0)
		switch status.Code(err) {
		case codes.OK, codes.InvalidArgument, codes.NotFound, codes.ResourceExhausted, codes.Unavailable:
		default:
			t.Fatalf("%v", err)
		}
		if _, err := s.grpcInfer(t.Context(), valid, nil, false, 0); err != nil {
			t.Fatalf("the next valid request: %v", err)
		}
	})
}
