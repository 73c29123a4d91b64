package oipgrpc_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
)

// FuzzDecodeResponse: whatever a server sends, decoding it returns a response or an error,
// never a panic, and a decoded output holds exactly the elements its shape says.
func FuzzDecodeResponse(f *testing.F) {
	seed := func(r *inference.ModelInferResponse) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	out := func(dt string, shape ...int64) *inference.ModelInferResponse_InferOutputTensor {
		return &inference.ModelInferResponse_InferOutputTensor{Name: "o", Datatype: dt, Shape: shape}
	}
	seed(&inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("FP32", 1, 2)}, RawOutputContents: [][]byte{make([]byte, 8)}})
	seed(&inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{out("BYTES", 2)}, RawOutputContents: [][]byte{{1, 0, 0, 0, 'a', 0, 0, 0, 0}}})
	typed := out("UINT8", 2)
	typed.Contents = &inference.InferTensorContents{UintContents: []uint32{1, 2}}
	seed(&inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{typed}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp inference.ModelInferResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		r, err := oipgrpc.DecodeResponse(&resp)
		if err != nil {
			return
		}
		for _, o := range r.Outputs {
			n := int64(1)
			for _, d := range o.Shape {
				n *= d
			}
			if got := int64(len(o.FP32) + len(o.UINT8) + len(o.Bytes)); got != n {
				t.Fatalf("output %q shape %v holds %d elements", o.Name, o.Shape, got)
			}
		}
	})
}
