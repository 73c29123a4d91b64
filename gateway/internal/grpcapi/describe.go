package grpcapi

import (
	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/stats"
)

// Model describes a model version as ModelMetadata and ModelConfig answer it.
type Model struct {
	Name       string   // as asked for: NAME, or NAME.tensor for the tensor interface
	TensorOnly bool     // the tensor interface: it takes the model's input, not encoded images
	Versions   []string // the versions served (ModelMetadata only)
	Input      string   // the input's name
	Output     string   // the output's name
	Datatype   string   // the input's datatype (FP32 or UINT8)
	Shape      []int64  // one sample of the input (CHW or HWC)
	NHWC       bool     // the input is channels last
	Classes    int      // the output's classes
	MaxBatch   int      // the samples one request may carry
	Parameters map[string]string
}

// Metadata is m's ModelMetadata answer.
func Metadata(m Model) *inference.ModelMetadataResponse {
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

// Config is m's ModelConfig answer, as HTTP's .../config answers in JSON: dimensions per
// sample; the image interface takes one encoded image per sample.
func Config(m Model) *inference.ModelConfigResponse {
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

// Statistics is one model version's ModelStatistics from its counters' snapshot.
func Statistics(name, version string, s stats.Snapshot) *inference.ModelStatistics {
	d := func(v stats.Duration) *inference.StatisticDuration {
		return &inference.StatisticDuration{Count: v.Count, Ns: v.Ns}
	}
	is := s.InferenceStats
	out := &inference.ModelStatistics{Name: name, Version: version, LastInference: s.LastInference,
		InferenceCount: s.InferenceCount, ExecutionCount: s.ExecutionCount,
		InferenceStats: &inference.InferStatistics{Success: d(is.Success), Fail: d(is.Fail), Queue: d(is.Queue),
			ComputeInput: d(is.ComputeInput), ComputeInfer: d(is.ComputeInfer), ComputeOutput: d(is.ComputeOutput),
			CacheHit: &inference.StatisticDuration{}, CacheMiss: &inference.StatisticDuration{}}}
	for _, b := range s.BatchStats {
		out.BatchStats = append(out.BatchStats, &inference.InferBatchStatistics{BatchSize: b.BatchSize,
			ComputeInput: d(b.ComputeInput), ComputeInfer: d(b.ComputeInfer), ComputeOutput: d(b.ComputeOutput)})
	}
	return out
}
