package grpcapi

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/imagegate/imagegate/api/inference"
)

// TestCode: refusals of an overloaded server are UNAVAILABLE (retryable), a request too large
// RESOURCE_EXHAUSTED, a client that left CANCELED, anything unknown INTERNAL.
func TestCode(t *testing.T) {
	for st, want := range map[int]codes.Code{
		http.StatusBadRequest: codes.InvalidArgument, http.StatusUnsupportedMediaType: codes.InvalidArgument,
		http.StatusRequestEntityTooLarge: codes.ResourceExhausted, http.StatusNotFound: codes.NotFound,
		http.StatusMethodNotAllowed: codes.NotFound, http.StatusRequestTimeout: codes.DeadlineExceeded,
		http.StatusGatewayTimeout: codes.DeadlineExceeded, http.StatusTooManyRequests: codes.Unavailable,
		http.StatusServiceUnavailable: codes.Unavailable, statusClientClosed: codes.Canceled,
		http.StatusInternalServerError: codes.Internal, 418: codes.Internal,
	} {
		if got := Code(st); got != want {
			t.Errorf("Code(%d) = %v, want %v", st, got, want)
		}
	}
}

// TestDescriptions: the image interface takes one encoded image per sample, the tensor
// interface the model's input in its layout and datatype.
func TestDescriptions(t *testing.T) {
	m := Model{Name: "m", Input: "in", Output: "out", Datatype: "UINT8", Shape: []int64{224, 224, 3}, NHWC: true,
		Classes: 10, MaxBatch: 8, Versions: []string{"1", "2"}, Parameters: map[string]string{"k": "v"}}
	md := Metadata(m)
	if in := md.GetInputs()[0]; in.GetDatatype() != "BYTES" || len(in.GetShape()) != 1 || md.GetOutputs()[0].GetShape()[1] != 10 || len(md.GetVersions()) != 2 {
		t.Fatalf("image metadata: %v", md)
	}
	c := Config(m).GetConfig()
	if in := c.GetInput()[0]; in.GetDataType() != inference.DataType_TYPE_STRING || in.GetFormat() != inference.ModelInput_FORMAT_NONE ||
		c.GetMaxBatchSize() != 8 || c.GetParameters()["k"].GetStringValue() != "v" {
		t.Fatalf("image config: %v", c)
	}
	m.Name, m.TensorOnly = "m.tensor", true
	if in := Metadata(m).GetInputs()[0]; in.GetDatatype() != "UINT8" || len(in.GetShape()) != 4 || in.GetShape()[0] != -1 {
		t.Fatalf("tensor metadata input: %v", in)
	}
	c = Config(m).GetConfig()
	if in := c.GetInput()[0]; c.GetName() != "m.tensor" || in.GetDataType() != inference.DataType_TYPE_UINT8 || in.GetFormat() != inference.ModelInput_FORMAT_NHWC || len(in.GetDims()) != 3 {
		t.Fatalf("tensor config: %v", c)
	}
}
