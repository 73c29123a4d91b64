package oip

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Tensor datatypes this package encodes and decodes.
const (
	BYTES = "BYTES"
	FP32  = "FP32"
	UINT8 = "UINT8"
	INT64 = "INT64" // outputs only: a detector's classes and counts
	INT32 = "INT32"
)

// HeaderLength is the HTTP header that gives the length of the JSON part of a body that
// carries binary tensor data (Triton's binary_tensor_data extension).
const HeaderLength = "Inference-Header-Content-Length"

// ErrInvalid is wrapped by every error about a request this package refuses to encode or a
// response it cannot decode.
var ErrInvalid = errors.New("oip: invalid")

// Request is one inference request. The zero value is not useful: set at least one input.
type Request struct {
	// ID is echoed by the server in its response (optional).
	ID string
	// Inputs are the input tensors, in order.
	Inputs []Input
	// Outputs are the requested outputs; none: the server returns every output as JSON (or
	// as binary with BinaryOutput).
	Outputs []Output
	// BinaryOutput asks for every output as binary tensor data unless the output says
	// otherwise (parameters.binary_data_output).
	BinaryOutput bool
	// Parameters are further request parameters (string, number or bool values).
	Parameters map[string]any
}

// Input is one input tensor. Exactly one of Bytes, FP32 and UINT8 holds its data, the one of
// its Datatype, flattened in row-major order.
type Input struct {
	Name     string
	Datatype string
	Shape    []int64
	Bytes    [][]byte
	FP32     []float32
	UINT8    []uint8
	// Binary sends the data as binary tensor data after the JSON header (parameters.
	// binary_data_size) instead of as a JSON array.
	Binary bool
	// Base64 writes BYTES elements in JSON as standard base64 strings (how the gateway takes
	// encoded images in JSON); without it an element is written as its text and must be
	// valid UTF-8. Binary data carries the bytes as they are either way.
	Base64 bool
}

// ImageInput is a BYTES input of encoded images (JPEG, PNG, ...), shape [n], written as
// base64 strings in JSON and as raw bytes in binary.
func ImageInput(name string, binary bool, images ...[]byte) Input {
	return Input{Name: name, Datatype: BYTES, Shape: []int64{int64(len(images))}, Bytes: images, Binary: binary, Base64: true}
}

// Output is one requested output.
type Output struct {
	Name string
	// Binary, when set, says whether this output comes back as binary tensor data
	// (parameters.binary_data); nil leaves it to Request.BinaryOutput.
	Binary *bool
	// Classification > 0 asks for the k best classes instead of the scores (Triton's
	// classification extension): a BYTES tensor [n, k] of "<score>:<index>:<label>".
	Classification int
}

// Encoded is an encoded request body.
type Encoded struct {
	// Body is the HTTP body: the JSON header, then the binary tensor data if any.
	Body []byte
	// HeaderLength is the JSON header's length: the value of the
	// Inference-Header-Content-Length header when Binary.
	HeaderLength int
	// Binary reports whether the body carries binary tensor data after the JSON.
	Binary bool
}

// ContentType is the body's media type: application/json, or application/octet-stream when
// it carries binary data.
func (e Encoded) ContentType() string {
	if e.Binary {
		return "application/octet-stream"
	}
	return "application/json"
}

type jsonRequest struct {
	ID         string         `json:"id,omitempty"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Inputs     []jsonInput    `json:"inputs"`
	Outputs    []jsonOutput   `json:"outputs,omitempty"`
}

type jsonInput struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

type jsonOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// Encode checks the request (every input's element count against its shape) and encodes it.
func (r *Request) Encode() (Encoded, error) {
	if len(r.Inputs) == 0 {
		return Encoded{}, fmt.Errorf("%w request: no input", ErrInvalid)
	}
	jr := jsonRequest{ID: r.ID, Parameters: r.Parameters}
	if r.BinaryOutput {
		jr.Parameters = withParam(r.Parameters, "binary_data_output", true)
	}
	var bin []byte
	for _, in := range r.Inputs {
		ji := jsonInput{Name: in.Name, Shape: in.Shape, Datatype: in.Datatype}
		if ji.Shape == nil {
			ji.Shape = []int64{}
		}
		n, err := in.count()
		if err != nil {
			return Encoded{}, err
		}
		if want, ok := elements(in.Shape); !ok || want != int64(n) {
			return Encoded{}, fmt.Errorf("%w input %q: shape %v holds %d elements, the data %d", ErrInvalid, in.Name, in.Shape, want, n)
		}
		if in.Binary {
			start := len(bin)
			bin = in.appendBinary(bin)
			ji.Parameters = map[string]any{"binary_data_size": len(bin) - start}
		} else if ji.Data, err = in.appendJSON(nil); err != nil {
			return Encoded{}, err
		}
		jr.Inputs = append(jr.Inputs, ji)
	}
	for _, o := range r.Outputs {
		jo := jsonOutput{Name: o.Name}
		if o.Binary != nil {
			jo.Parameters = withParam(jo.Parameters, "binary_data", *o.Binary)
		}
		if o.Classification > 0 {
			jo.Parameters = withParam(jo.Parameters, "classification", o.Classification)
		}
		jr.Outputs = append(jr.Outputs, jo)
	}
	head, err := json.Marshal(jr)
	if err != nil {
		return Encoded{}, fmt.Errorf("%w request: %v", ErrInvalid, err)
	}
	return Encoded{Body: append(head, bin...), HeaderLength: len(head), Binary: len(bin) > 0 || hasBinary(r.Inputs)}, nil
}

func hasBinary(ins []Input) bool {
	for _, in := range ins {
		if in.Binary {
			return true
		}
	}
	return false
}

// withParam returns a copy of p with k set to v.
func withParam(p map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(p)+1)
	for pk, pv := range p {
		out[pk] = pv
	}
	out[k] = v
	return out
}

// elements is the element count of a shape; ok is false for a negative dimension or an
// overflow.
func elements(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || d > 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// count is the number of elements in the input's data, checked against its datatype.
func (in *Input) count() (int, error) {
	var n, set int
	if in.Bytes != nil {
		n, set = len(in.Bytes), set+1
	}
	if in.FP32 != nil {
		n, set = len(in.FP32), set+1
	}
	if in.UINT8 != nil {
		n, set = len(in.UINT8), set+1
	}
	ok := set <= 1
	switch in.Datatype {
	case BYTES:
		ok = ok && (in.FP32 == nil && in.UINT8 == nil)
	case FP32:
		ok = ok && (in.Bytes == nil && in.UINT8 == nil)
	case UINT8:
		ok = ok && (in.Bytes == nil && in.FP32 == nil)
	default:
		return 0, fmt.Errorf("%w input %q: datatype %q (this client encodes BYTES, FP32 and UINT8)", ErrInvalid, in.Name, in.Datatype)
	}
	if !ok {
		return 0, fmt.Errorf("%w input %q: its data must be in the field of its datatype %s only", ErrInvalid, in.Name, in.Datatype)
	}
	return n, nil
}

// Raw checks the input (its data against its datatype and shape) and returns its data as raw
// bytes, as binary tensor data and the gRPC protocol's raw_input_contents lay it out: values
// little-endian, each BYTES element as a 4-byte little-endian length and the element's bytes.
func (in *Input) Raw() ([]byte, error) {
	n, err := in.count()
	if err != nil {
		return nil, err
	}
	if want, ok := elements(in.Shape); !ok || want != int64(n) {
		return nil, fmt.Errorf("%w input %q: shape %v holds %d elements, the data %d", ErrInvalid, in.Name, in.Shape, want, n)
	}
	size := 0
	switch in.Datatype {
	case BYTES:
		for _, e := range in.Bytes {
			size += 4 + len(e)
		}
	case FP32:
		size = 4 * len(in.FP32)
	case UINT8:
		size = len(in.UINT8)
	}
	return in.appendBinary(make([]byte, 0, size)), nil
}

// appendBinary appends the input's binary tensor data: little-endian values, BYTES elements
// each as a 4-byte little-endian length and the bytes.
func (in *Input) appendBinary(b []byte) []byte {
	switch in.Datatype {
	case BYTES:
		for _, e := range in.Bytes {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
			b = append(b, e...)
		}
	case FP32:
		for _, f := range in.FP32 {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
	case UINT8:
		b = append(b, in.UINT8...)
	}
	return b
}

// appendJSON appends the input's data as a flat JSON array.
func (in *Input) appendJSON(b []byte) ([]byte, error) {
	b = append(b, '[')
	switch in.Datatype {
	case BYTES:
		for i, e := range in.Bytes {
			if i > 0 {
				b = append(b, ',')
			}
			if in.Base64 {
				b = append(b, '"')
				b = base64.StdEncoding.AppendEncode(b, e)
				b = append(b, '"')
				continue
			}
			if !utf8.Valid(e) {
				return nil, fmt.Errorf("%w input %q: BYTES element %d is not UTF-8 text; set Base64 or Binary", ErrInvalid, in.Name, i)
			}
			s, _ := json.Marshal(string(e))
			b = append(b, s...)
		}
	case FP32:
		for i, f := range in.FP32 {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return nil, fmt.Errorf("%w input %q: FP32 element %d is %v, which JSON cannot hold; set Binary", ErrInvalid, in.Name, i, f)
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
		}
	case UINT8:
		for i, v := range in.UINT8 {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(v), 10)
		}
	}
	return append(b, ']'), nil
}
