package ort

import (
	"fmt"

	onnx "github.com/yalue/onnxruntime_go"
)

// ModelInfo is what a model file says about itself: its inputs and outputs, and its
// metadata_props.
type ModelInfo struct {
	Inputs, Outputs []TensorInfo
	// Metadata holds the model's metadata_props (empty when it has none).
	Metadata map[string]string
	// Producer is the producer_name the exporter wrote ("pytorch", "tf2onnx", ...).
	Producer string
}

// Describe reads a model's inputs, outputs and metadata through ONNX Runtime without creating
// a session for serving: the temporary sessions it reads them from skip graph optimization,
// which does not change the model's inputs, outputs or metadata.
func Describe(path string) (ModelInfo, error) {
	opts, err := onnx.NewSessionOptions()
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot create session options: %w", err)
	}
	defer opts.Destroy()
	if err := opts.SetGraphOptimizationLevel(onnx.GraphOptimizationLevelDisableAll); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot set the optimization level: %w", err)
	}
	if err := opts.SetIntraOpNumThreads(1); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot set the threads: %w", err)
	}
	in, out, err := onnx.GetInputOutputInfoWithOptions(path, opts)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot read model %s: %w", path, err)
	}
	info := ModelInfo{Inputs: tensorInfos(in), Outputs: tensorInfos(out), Metadata: map[string]string{}}
	md, err := onnx.GetModelMetadataWithOptions(path, opts)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot read the metadata of model %s: %w", path, err)
	}
	defer md.Destroy()
	if info.Producer, err = md.GetProducerName(); err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot read the producer of model %s: %w", path, err)
	}
	keys, err := md.GetCustomMetadataMapKeys()
	if err != nil {
		return ModelInfo{}, fmt.Errorf("ort: cannot read the metadata of model %s: %w", path, err)
	}
	for _, k := range keys {
		v, ok, err := md.LookupCustomMetadataMap(k)
		if err != nil {
			return ModelInfo{}, fmt.Errorf("ort: cannot read metadata %q of model %s: %w", k, path, err)
		}
		if ok {
			info.Metadata[k] = v
		}
	}
	return info, nil
}

func tensorInfos(infos []onnx.InputOutputInfo) []TensorInfo {
	r := make([]TensorInfo, len(infos))
	for i, x := range infos {
		r[i] = TensorInfo{Name: x.Name, Type: typeName(x.DataType), Shape: append([]int64(nil), x.Dimensions...)}
		if x.OrtValueType != onnx.ONNXTypeTensor { // a sequence or a map: no element type or shape
			r[i].Type, r[i].Shape = x.OrtValueType.String(), nil
		}
	}
	return r
}
