package modeldesc

import (
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
)

// Model describes a model version as its metadata and configuration answer it.
type Model struct {
	Name       string   // as asked for: NAME, or NAME.tensor for the tensor interface
	TensorOnly bool     // the tensor interface: it takes the model's input, not encoded images
	TensorName string   // the tensor interface's name, NAME.tensor (the image interface names it)
	Versions   []string // the versions served (ModelMetadata only)
	Input      string   // the input's name
	Output     string   // the output's name
	Datatype   string   // the input's datatype (FP32 or UINT8)
	Shape      []int64  // one sample of the input (CHW or HWC)
	NHWC       bool     // the input is channels last
	Classes    int      // the output's classes
	MaxBatch   int      // the samples one request may carry
	Parameters map[string]string
	// Triton, when not nil, is the model's configuration in Triton's schema (a model of a
	// Triton repository): the configuration answers it, under the name asked for.
	Triton *inference.ModelConfig
}

// GRPCMetadata is m's ModelMetadata answer.
func GRPCMetadata(m Model) *inference.ModelMetadataResponse {
	in := &inference.ModelMetadataResponse_TensorMetadata{Name: m.Input, Datatype: "BYTES", Shape: []int64{-1}}
	if m.TensorOnly {
		in = &inference.ModelMetadataResponse_TensorMetadata{Name: m.Input, Datatype: m.Datatype, Shape: append([]int64{-1}, m.Shape...)}
	}
	return &inference.ModelMetadataResponse{
		Name:     m.Name,
		Versions: m.Versions,
		Platform: "onnxruntime_onnx",
		Inputs:   []*inference.ModelMetadataResponse_TensorMetadata{in},
		Outputs:  []*inference.ModelMetadataResponse_TensorMetadata{{Name: m.Output, Datatype: "FP32", Shape: []int64{-1, int64(m.Classes)}}},
	}
}

// GRPCConfig is m's ModelConfig answer, as JSONConfig's in Triton's message.
func GRPCConfig(m Model) *inference.ModelConfigResponse {
	if m.Triton != nil {
		c := proto.Clone(m.Triton).(*inference.ModelConfig)
		c.Name = m.Name
		return &inference.ModelConfigResponse{Config: c}
	}
	in := &inference.ModelInput{Name: m.Input, DataType: inference.DataType_TYPE_STRING, Format: inference.ModelInput_FORMAT_NONE, Dims: []int64{1}}
	if m.TensorOnly {
		in = &inference.ModelInput{Name: m.Input, DataType: inference.DataType_TYPE_FP32, Format: inference.ModelInput_FORMAT_NCHW, Dims: m.Shape}
		if m.NHWC {
			in.Format = inference.ModelInput_FORMAT_NHWC
		}
		if m.Datatype == "UINT8" {
			in.DataType = inference.DataType_TYPE_UINT8
		}
	}
	params := make(map[string]*inference.ModelParameter, len(m.Parameters))
	for k, v := range m.Parameters {
		params[k] = &inference.ModelParameter{StringValue: v}
	}
	return &inference.ModelConfigResponse{Config: &inference.ModelConfig{
		Name:             m.Name,
		Platform:         "onnxruntime_onnx",
		Backend:          "onnxruntime",
		MaxBatchSize:     int32(m.MaxBatch),
		Input:            []*inference.ModelInput{in},
		Output:           []*inference.ModelOutput{{Name: m.Output, DataType: inference.DataType_TYPE_FP32, Dims: []int64{int64(m.Classes)}}},
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{}},
		Parameters:       params,
	}}
}

// JSONMetadata is m's metadata as GET /v2/models/NAME answers it.
func JSONMetadata(m Model) map[string]any {
	input := map[string]any{"name": m.Input, "datatype": "BYTES", "shape": []int64{-1},
		"parameters": map[string]any{
			"content":         "encoded image: JPEG, PNG, WebP, GIF (first frame), BMP or TIFF",
			"json_encoding":   "base64 string per image (a data: URL prefix is accepted)",
			"binary_encoding": "the image's raw bytes",
			"tensor_model":    m.TensorName,
		}}
	if m.TensorOnly {
		input = map[string]any{"name": m.Input, "datatype": m.Datatype, "shape": append([]int64{-1}, m.Shape...)}
	}
	return map[string]any{
		"name":     m.Name,
		"versions": m.Versions,
		"platform": "onnxruntime_onnx",
		"inputs":   []any{input},
		"outputs":  []any{map[string]any{"name": m.Output, "datatype": "FP32", "shape": []int64{-1, int64(m.Classes)}}},
	}
}

// JSONConfig is Triton's model configuration extension (GET .../config), which its tools read
// before they send anything (perf_analyzer stops without it; Triton's image client takes
// max_batch_size from it). Dimensions are per sample, as in Triton's configuration: the image
// interface takes one encoded image per sample (shape [n] or [n, 1]), the tensor interface
// the model's input. max_batch_size is what one request may carry.
func JSONConfig(m Model) map[string]any {
	if m.Triton != nil {
		c := protoJSON(m.Triton.ProtoReflect())
		c["name"] = m.Name
		return c
	}
	input := map[string]any{"name": m.Input, "data_type": "TYPE_STRING", "format": "FORMAT_NONE", "dims": []int64{1}}
	if m.TensorOnly {
		format := "FORMAT_NCHW"
		if m.NHWC {
			format = "FORMAT_NHWC"
		}
		dt := "TYPE_FP32"
		if m.Datatype == "UINT8" {
			dt = "TYPE_UINT8"
		}
		input = map[string]any{"name": m.Input, "data_type": dt, "format": format, "dims": m.Shape}
	}
	params := make(map[string]any, len(m.Parameters))
	for k, v := range m.Parameters {
		params[k] = map[string]string{"string_value": v} // Triton's ModelParameter
	}
	return map[string]any{
		"name":             m.Name,
		"platform":         "onnxruntime_onnx",
		"backend":          "onnxruntime",
		"max_batch_size":   m.MaxBatch,
		"input":            []any{input},
		"output":           []any{map[string]any{"name": m.Output, "data_type": "TYPE_FP32", "dims": []int64{int64(m.Classes)}}},
		"dynamic_batching": map[string]any{},
		"parameters":       params,
	}
}
