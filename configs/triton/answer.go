package triton

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
)

// Served is what the gateway serves of a model version, once its configuration is complete
// (configs.Model.Complete): what Answer fills in.
type Served struct {
	Name                  string
	InputName, OutputName string
	// InputType is float32 or uint8; Layout NCHW or NHWC.
	InputType, Layout string
	Width, Height     int
	Classes           int
	// MaxBatchSize is the samples one request may carry; Instances the model's instances.
	MaxBatchSize, Instances int
}

// Answer is the configuration GET /v2/models/{m}/config answers for a model version read from
// read (nil: the model folder has no config.pbtxt): what was read, with what it leaves out
// filled in from what is served, as Triton's auto-complete fills it: name, platform and
// backend, max_batch_size, the input's and the served output's name, data type, format and
// dims, an instance group, the version policy. Where read states dims or data types that the
// model contradicts, the model version is not served: the error says which.
func Answer(read *inference.ModelConfig, s Served) (*inference.ModelConfig, error) {
	c := &inference.ModelConfig{}
	if read != nil {
		c = proto.Clone(read).(*inference.ModelConfig)
	}
	if c.Name == "" {
		c.Name = s.Name
	}
	if c.Platform == "" {
		c.Platform = Platform
	}
	if c.Backend == "" {
		c.Backend = Backend
	}
	batchless := c.MaxBatchSize == 0
	if batchless {
		// The gateway batches along the first axis: the dims it answers are per sample, as
		// with any max_batch_size.
		c.MaxBatchSize = int32(s.MaxBatchSize)
	}
	perSample := func(dims []int64, rank int) []int64 {
		if batchless && len(dims) == rank+1 {
			return dims[1:]
		}
		return dims
	}
	inDims := []int64{3, int64(s.Height), int64(s.Width)}
	format := inference.ModelInput_FORMAT_NCHW
	if s.Layout == "NHWC" {
		inDims, format = []int64{int64(s.Height), int64(s.Width), 3}, inference.ModelInput_FORMAT_NHWC
	}
	dt := inference.DataType_TYPE_FP32
	if s.InputType == "uint8" {
		dt = inference.DataType_TYPE_UINT8
	}
	if len(c.Input) == 0 {
		c.Input = []*inference.ModelInput{{}}
	}
	in := c.Input[0]
	if in.Name == "" {
		in.Name = s.InputName
	}
	if in.DataType == inference.DataType_TYPE_INVALID {
		in.DataType = dt
	}
	if in.Format == inference.ModelInput_FORMAT_NONE {
		in.Format = format
	}
	in.Dims = perSample(in.Dims, 3)
	if len(in.Dims) == 0 {
		in.Dims = inDims
	}
	var out *inference.ModelOutput
	if read != nil {
		if o := ServedOutput(read); o != nil {
			out = c.Output[slices.Index(read.Output, o)]
		}
	}
	if out == nil {
		for _, o := range c.Output {
			if o.Name == s.OutputName {
				out = o
			}
		}
	}
	if out == nil {
		out = &inference.ModelOutput{}
		c.Output = append(c.Output, out)
	}
	if out.Name == "" {
		out.Name = s.OutputName
	}
	switch out.DataType {
	case inference.DataType_TYPE_INVALID:
		out.DataType = inference.DataType_TYPE_FP32
	case inference.DataType_TYPE_FP32:
	default:
		return nil, fmt.Errorf("output %s: data_type is %s, but the model's output is TYPE_FP32", out.Name, out.DataType)
	}
	out.Dims = perSample(out.Dims, 1)
	switch {
	case len(out.Dims) == 0:
		out.Dims = []int64{int64(s.Classes)}
	case len(out.Dims) != 1 || (out.Dims[0] != -1 && out.Dims[0] != int64(s.Classes)):
		return nil, fmt.Errorf("output %s: dims are %v, but the model's output has %d classes per image ([%d])", out.Name, out.Dims, s.Classes, s.Classes)
	}
	for _, o := range c.Output {
		if o != out && len(o.Dims) > 0 {
			o.Dims = perSample(o.Dims, len(o.Dims)-1)
		}
	}
	if len(c.InstanceGroup) == 0 {
		c.InstanceGroup = []*inference.ModelInstanceGroup{{Name: c.Name, Kind: inference.ModelInstanceGroup_KIND_CPU, Count: int32(s.Instances)}}
	}
	if c.VersionPolicy == nil {
		c.VersionPolicy = &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}}}
	}
	return c, nil
}
