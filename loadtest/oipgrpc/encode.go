package oipgrpc

import (
	"fmt"
	"math"
	"sort"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oip"
)

// EncodeRequest builds the ModelInferRequest tritonclient.grpc would send for req: every
// input's data in raw_input_contents (see oip.Input.Raw), its name, datatype and shape in
// inputs; the requested outputs with parameters["classification"].int64_param when
// Classification > 0; req.Parameters as InferParameters (string, bool, signed and unsigned
// integers, float64); the id only when set. The HTTP-only settings (BinaryOutput, an input's
// Binary and Base64, an output's Binary) do not apply to gRPC and are ignored.
func EncodeRequest(model, version string, req *oip.Request) (*inference.ModelInferRequest, error) {
	if len(req.Inputs) == 0 {
		return nil, fmt.Errorf("%w request: no input", ErrInvalid)
	}
	pr := &inference.ModelInferRequest{ModelName: model, ModelVersion: version, Id: req.ID}
	for i := range req.Inputs {
		in := &req.Inputs[i]
		raw, err := in.Raw()
		if err != nil {
			return nil, err
		}
		shape := in.Shape
		if shape == nil {
			shape = []int64{}
		}
		pr.Inputs = append(pr.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.Datatype, Shape: shape})
		pr.RawInputContents = append(pr.RawInputContents, raw)
	}
	for _, o := range req.Outputs {
		out := &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o.Name}
		if o.Classification > 0 {
			out.Parameters = map[string]*inference.InferParameter{
				"classification": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(o.Classification)}},
			}
		}
		pr.Outputs = append(pr.Outputs, out)
	}
	if len(req.Parameters) > 0 {
		pr.Parameters = make(map[string]*inference.InferParameter, len(req.Parameters))
		keys := make([]string, 0, len(req.Parameters))
		for k := range req.Parameters {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the first bad one named is always the same
		for _, k := range keys {
			p, err := Param(req.Parameters[k])
			if err != nil {
				return nil, fmt.Errorf("%w request parameter %q: %v", ErrInvalid, k, err)
			}
			pr.Parameters[k] = p
		}
	}
	return pr, nil
}

// Param converts a Go value into an InferParameter: string, bool, int, int64 and the other
// signed integers (int64_param), uint64 and the other unsigned ones (uint64_param), float64
// and float32 (double_param).
func Param(v any) (*inference.InferParameter, error) {
	p := &inference.InferParameter{}
	switch v := v.(type) {
	case string:
		p.ParameterChoice = &inference.InferParameter_StringParam{StringParam: v}
	case bool:
		p.ParameterChoice = &inference.InferParameter_BoolParam{BoolParam: v}
	case int:
		p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: int64(v)}
	case int8:
		p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: int64(v)}
	case int16:
		p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: int64(v)}
	case int32:
		p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: int64(v)}
	case int64:
		p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: v}
	case uint:
		p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: uint64(v)}
	case uint8:
		p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: uint64(v)}
	case uint16:
		p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: uint64(v)}
	case uint32:
		p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: uint64(v)}
	case uint64:
		p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: v}
	case float32:
		p.ParameterChoice = &inference.InferParameter_DoubleParam{DoubleParam: float64(v)}
	case float64:
		p.ParameterChoice = &inference.InferParameter_DoubleParam{DoubleParam: v}
	default:
		return nil, fmt.Errorf("a %T value (want a string, bool, integer or float)", v)
	}
	return p, nil
}

// ParamValue returns an InferParameter's value as a Go value: string, bool, int64, uint64 or
// float64; nil when none is set.
func ParamValue(p *inference.InferParameter) any {
	switch c := p.GetParameterChoice().(type) {
	case *inference.InferParameter_StringParam:
		return c.StringParam
	case *inference.InferParameter_BoolParam:
		return c.BoolParam
	case *inference.InferParameter_Int64Param:
		return c.Int64Param
	case *inference.InferParameter_Uint64Param:
		return c.Uint64Param
	case *inference.InferParameter_DoubleParam:
		return c.DoubleParam
	}
	return nil
}

// params converts a parameter map for oip's types; nil when empty.
func params(m map[string]*inference.InferParameter) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, p := range m {
		out[k] = ParamValue(p)
	}
	return out
}

// DecodeResponse decodes a ModelInferResponse as tritonclient.grpc reads one: output i takes
// its data from raw_output_contents[i] when the response has raw contents (then one per
// output), else from its typed contents (FP32 from fp32_contents, UINT8 from uint_contents,
// BYTES from bytes_contents). Every output's element count must match its shape. Parameters
// hold the values of ParamValue. The response shares no memory with resp.
func DecodeResponse(resp *inference.ModelInferResponse) (*oip.Response, error) {
	r := &oip.Response{ModelName: resp.GetModelName(), ModelVersion: resp.GetModelVersion(), ID: resp.GetId(),
		Parameters: params(resp.GetParameters())}
	raw := resp.GetRawOutputContents()
	outs := resp.GetOutputs()
	if len(raw) > 0 && len(raw) != len(outs) {
		return nil, fmt.Errorf("%w response: %d outputs, %d raw_output_contents", ErrInvalid, len(outs), len(raw))
	}
	for i, o := range outs {
		t := oip.Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape(), Parameters: params(o.GetParameters())}
		if t.Shape == nil {
			t.Shape = []int64{} // a scalar: the protocol's empty shape
		}
		if len(raw) > 0 {
			if o.GetContents() != nil {
				return nil, fmt.Errorf("%w output %q: both contents and raw_output_contents", ErrInvalid, t.Name)
			}
			t.Binary = true
			if err := t.SetRaw(raw[i]); err != nil {
				return nil, err
			}
		} else if err := fromContents(&t, o.GetContents()); err != nil {
			return nil, err
		}
		r.Outputs = append(r.Outputs, t)
	}
	return r, nil
}

// fromContents sets t's data from typed contents, checking the count against the shape.
func fromContents(t *oip.Tensor, c *inference.InferTensorContents) error {
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 || d > 0 && n > math.MaxInt64/d {
			return fmt.Errorf("%w output %q: shape %v", ErrInvalid, t.Name, t.Shape)
		}
		n *= d
	}
	var got int
	switch t.Datatype {
	case oip.FP32:
		t.FP32 = append([]float32(nil), c.GetFp32Contents()...)
		got = len(t.FP32)
	case oip.UINT8:
		for i, v := range c.GetUintContents() {
			if v > math.MaxUint8 {
				return fmt.Errorf("%w output %q: UINT8 element %d is %d", ErrInvalid, t.Name, i, v)
			}
			t.UINT8 = append(t.UINT8, uint8(v))
		}
		got = len(c.GetUintContents())
	case oip.INT64:
		t.INT64 = append([]int64(nil), c.GetInt64Contents()...)
		got = len(t.INT64)
	case oip.INT32:
		for _, v := range c.GetIntContents() {
			t.INT64 = append(t.INT64, int64(v))
		}
		got = len(t.INT64)
	case oip.BYTES:
		for _, e := range c.GetBytesContents() {
			t.Bytes = append(t.Bytes, append([]byte(nil), e...))
		}
		got = len(t.Bytes)
	default:
		return fmt.Errorf("%w output %q: datatype %q (this client decodes BYTES, FP32, UINT8, INT64 and INT32)", ErrInvalid, t.Name, t.Datatype)
	}
	if int64(got) != n {
		return fmt.Errorf("%w output %q: shape %v, %d elements in its contents", ErrInvalid, t.Name, t.Shape, got)
	}
	return nil
}
