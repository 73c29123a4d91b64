package modeldesc

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
)

// TestGRPC: the image interface takes one encoded image per sample, the tensor
// interface the model's input in its layout and datatype.
func TestGRPC(t *testing.T) {
	m := Model{Name: "m", TensorName: "m.tensor", Input: "in", Output: "out", Datatype: "UINT8", Shape: []int64{224, 224, 3}, NHWC: true,
		Classes: 10, MaxBatch: 8, Versions: []string{"1", "2"}, Parameters: map[string]string{"k": "v"}}
	md := GRPCMetadata(m)
	if in := md.GetInputs()[0]; in.GetDatatype() != "BYTES" || len(in.GetShape()) != 1 || md.GetOutputs()[0].GetShape()[1] != 10 || len(md.GetVersions()) != 2 {
		t.Fatalf("image metadata: %v", md)
	}
	c := GRPCConfig(m).GetConfig()
	if in := c.GetInput()[0]; in.GetDataType() != inference.DataType_TYPE_STRING || in.GetFormat() != inference.ModelInput_FORMAT_NONE ||
		c.GetMaxBatchSize() != 8 || c.GetParameters()["k"].GetStringValue() != "v" {
		t.Fatalf("image config: %v", c)
	}
	m.Name, m.TensorOnly = "m.tensor", true
	if in := GRPCMetadata(m).GetInputs()[0]; in.GetDatatype() != "UINT8" || len(in.GetShape()) != 4 || in.GetShape()[0] != -1 {
		t.Fatalf("tensor metadata input: %v", in)
	}
	c = GRPCConfig(m).GetConfig()
	if in := c.GetInput()[0]; c.GetName() != "m.tensor" || in.GetDataType() != inference.DataType_TYPE_UINT8 || in.GetFormat() != inference.ModelInput_FORMAT_NHWC || len(in.GetDims()) != 3 {
		t.Fatalf("tensor config: %v", c)
	}
}

// TestJSONMatchesGRPC: HTTP's JSON and gRPC's messages describe a model alike (the field names
// of Triton's JSON are its protobuf's).
func TestJSONMatchesGRPC(t *testing.T) {
	for _, tensor := range []bool{false, true} {
		m := Model{Name: "m", TensorName: "m.tensor", TensorOnly: tensor, Input: "in", Output: "out", Datatype: "FP32",
			Shape: []int64{3, 224, 224}, Classes: 1000, MaxBatch: 32, Versions: []string{"1"}}
		var meta struct {
			Name   string `json:"name"`
			Inputs []struct {
				Datatype string  `json:"datatype"`
				Shape    []int64 `json:"shape"`
			} `json:"inputs"`
		}
		b, _ := json.Marshal(JSONMetadata(m))
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		g := GRPCMetadata(m)
		if meta.Name != g.GetName() || meta.Inputs[0].Datatype != g.GetInputs()[0].GetDatatype() || len(meta.Inputs[0].Shape) != len(g.GetInputs()[0].GetShape()) {
			t.Errorf("tensor %v: JSON metadata %s, gRPC %v", tensor, b, g)
		}
		var cfg struct {
			MaxBatch int `json:"max_batch_size"`
			Input    []struct {
				DataType string  `json:"data_type"`
				Format   string  `json:"format"`
				Dims     []int64 `json:"dims"`
			} `json:"input"`
		}
		b, _ = json.Marshal(JSONConfig(m))
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		c := GRPCConfig(m).GetConfig()
		if cfg.MaxBatch != int(c.GetMaxBatchSize()) || cfg.Input[0].DataType != c.GetInput()[0].GetDataType().String() ||
			cfg.Input[0].Format != c.GetInput()[0].GetFormat().String() || len(cfg.Input[0].Dims) != len(c.GetInput()[0].GetDims()) {
			t.Errorf("tensor %v: JSON config %s, gRPC %v", tensor, b, c)
		}
	}
}

// TestTritonConfig: a model read from a Triton repository is described by its configuration
// as it is, under the name asked for; its JSON is protobuf's mapping with Triton's field names
// and 64-bit integers as numbers, which protobuf's own JSON reader reads back to the message.
func TestTritonConfig(t *testing.T) {
	read := &inference.ModelConfig{Name: "m", Platform: "onnxruntime_onnx", MaxBatchSize: 8,
		Input:  []*inference.ModelInput{{Name: "in", DataType: inference.DataType_TYPE_FP32, Format: inference.ModelInput_FORMAT_NCHW, Dims: []int64{3, 224, 224}}},
		Output: []*inference.ModelOutput{{Name: "out", DataType: inference.DataType_TYPE_FP32, Dims: []int64{1000}, LabelFilename: "labels.txt"}},
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{
			PreferredBatchSize: []int32{4, 8}, MaxQueueDelayMicroseconds: 500,
			DefaultQueuePolicy: &inference.ModelQueuePolicy{MaxQueueSize: 16, TimeoutAction: inference.ModelQueuePolicy_DELAY}}},
		Parameters: map[string]*inference.ModelParameter{"task": {StringValue: "classify"}},
	}
	before := proto.Clone(read)
	for _, name := range []string{"m", "m.tensor"} {
		m := Model{Name: name, Triton: read}
		g := GRPCConfig(m).GetConfig()
		want := proto.Clone(read).(*inference.ModelConfig)
		want.Name = name
		if !proto.Equal(g, want) {
			t.Errorf("gRPC %s: %v", name, g)
		}
		b, err := json.Marshal(JSONConfig(m))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{`"dims":[3,224,224]`, `"max_queue_delay_microseconds":500`, `"data_type":"TYPE_FP32"`, `"timeout_action":"DELAY"`,
			`"parameters":{"task":{"string_value":"classify"}}`, `"name":"` + name + `"`, `"backend":""`} {
			if !strings.Contains(string(b), s) {
				t.Errorf("JSON %s: no %s", b, s)
			}
		}
		var back inference.ModelConfig
		if err := protojson.Unmarshal(b, &back); err != nil || !proto.Equal(&back, want) {
			t.Errorf("JSON read back: %v\n%v\n%v", err, &back, want)
		}
	}
	if !proto.Equal(read, before) {
		t.Error("describing changed the configuration")
	}
}
