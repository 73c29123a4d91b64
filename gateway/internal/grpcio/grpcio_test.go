package grpcio

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
)

// FuzzUnmarshalInfer: the server's decoding of a ModelInferRequest (raw_input_contents
// aliasing the message) gives what protobuf-go's gives, and fails where it fails.
func FuzzUnmarshalInfer(f *testing.F) {
	r := &inference.ModelInferRequest{ModelName: "m", Id: "id",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{{4, 0, 0, 0, 1, 2, 3, 4}, nil, []byte("x")}}
	for _, m := range []*inference.ModelInferRequest{r, {ModelName: "m", RawInputContents: [][]byte{{}}}, {ModelName: "m"}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got inference.ModelInferRequest
		werr := proto.Unmarshal(b, &want)
		gerr := UnmarshalInfer(append([]byte(nil), b...), &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("protobuf-go: %v; unmarshalInfer: %v", werr, gerr)
		}
		if werr == nil && !proto.Equal(&want, &got) {
			t.Fatalf("decoded differently:\n%v\n%v", &want, &got)
		}
	})
}

// TestBufferPoolSizes: a buffer has the length asked for, comes back from its class, and a
// buffer of another capacity is not pooled.
func TestBufferPoolSizes(t *testing.T) {
	var p BufferPool
	for _, n := range []int{0, 1, 256, 257, 16 << 10, 232491, 4 << 20, 4<<20 + 1} {
		b := p.Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		p.Put(b)
	}
	odd := make([]byte, 300)
	p.Put(&odd)
	if b := p.Get(300); cap(*b) != 512 {
		t.Errorf("Get(300) has capacity %d, want 512", cap(*b))
	}
}
