package oip

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Response is a decoded inference response.
type Response struct {
	ModelName    string
	ModelVersion string
	ID           string
	// Parameters are the response's parameters (numbers as json.Number).
	Parameters map[string]any
	Outputs    []Tensor
}

// Tensor is one output tensor. The field of its Datatype holds its data, flattened in
// row-major order: FP32 (a JSON null, which is how NaN and ±Inf travel in JSON, reads as NaN),
// UINT8, INT64 (INT32 outputs too), or Bytes (each element's bytes; in JSON, a string's text).
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	// Parameters are the output's parameters (numbers as json.Number), binary_data_size
	// included when it came as binary data.
	Parameters map[string]any
	// Binary reports whether the data came as binary tensor data.
	Binary bool
	FP32   []float32
	UINT8  []uint8
	INT64  []int64 // INT64 and INT32 values
	Bytes  [][]byte
}

// Output returns the output named name, or nil.
func (r *Response) Output(name string) *Tensor {
	for i := range r.Outputs {
		if r.Outputs[i].Name == name {
			return &r.Outputs[i]
		}
	}
	return nil
}

// Row returns row i of a two-dimensional FP32 tensor [n, k] (a sample's scores).
func (t *Tensor) Row(i int) []float32 {
	if len(t.Shape) != 2 || t.FP32 == nil || i < 0 || int64(i) >= t.Shape[0] {
		return nil
	}
	k := int(t.Shape[1])
	return t.FP32[i*k : (i+1)*k]
}

type jsonResponse struct {
	ModelName    string           `json:"model_name"`
	ModelVersion string           `json:"model_version"`
	ID           string           `json:"id"`
	Parameters   map[string]any   `json:"parameters"`
	Outputs      []jsonTensorData `json:"outputs"`
}

type jsonTensorData struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters map[string]any  `json:"parameters"`
	Data       json.RawMessage `json:"data"`
}

// DecodeResponse decodes an inference response body. headerLength is the value of the
// response's Inference-Header-Content-Length header, or -1 when it has none (the body is
// then all JSON). Outputs with parameters.binary_data_size take their data, in order, from the
// bytes after the JSON header; their sizes must add up to exactly those bytes.
func DecodeResponse(body []byte, headerLength int) (*Response, error) {
	head, bin := body, []byte(nil)
	if headerLength >= 0 {
		if headerLength > len(body) {
			return nil, fmt.Errorf("%w response: %s is %d, the body has %d bytes", ErrInvalid, HeaderLength, headerLength, len(body))
		}
		head, bin = body[:headerLength], body[headerLength:]
	}
	var jr jsonResponse
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if err := dec.Decode(&jr); err != nil {
		return nil, fmt.Errorf("%w response JSON: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w response: data after the JSON object (a binary response without %s?)", ErrInvalid, HeaderLength)
	}
	r := &Response{ModelName: jr.ModelName, ModelVersion: jr.ModelVersion, ID: jr.ID, Parameters: jr.Parameters}
	for _, o := range jr.Outputs {
		t := Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Parameters: o.Parameters}
		n, ok := elements(o.Shape)
		if !ok || o.Shape == nil {
			return nil, fmt.Errorf("%w output %q: shape %v", ErrInvalid, o.Name, o.Shape)
		}
		if size, has := o.Parameters["binary_data_size"]; has {
			num, isNum := size.(json.Number)
			sz, err := num.Int64()
			if !isNum || err != nil || sz < 0 || sz > int64(len(bin)) {
				return nil, fmt.Errorf("%w output %q: binary_data_size %v, %d bytes left", ErrInvalid, o.Name, size, len(bin))
			}
			if o.Data != nil {
				return nil, fmt.Errorf("%w output %q: both data and binary_data_size", ErrInvalid, o.Name)
			}
			t.Binary = true
			if err := t.fromBinary(bin[:sz], n); err != nil {
				return nil, err
			}
			bin = bin[sz:]
		} else if err := t.fromJSON(o.Data, n); err != nil {
			return nil, err
		}
		r.Outputs = append(r.Outputs, t)
	}
	if len(bin) > 0 {
		return nil, fmt.Errorf("%w response: %d bytes of binary data that no output claims", ErrInvalid, len(bin))
	}
	return r, nil
}

// SetRaw sets the tensor's data from raw bytes laid out as binary tensor data (and the gRPC
// protocol's raw_output_contents): little-endian values, BYTES elements each with a 4-byte
// little-endian length. Name, Datatype and Shape must be set; the element count must match
// the shape. The tensor keeps copies, not raw.
func (t *Tensor) SetRaw(raw []byte) error {
	n, ok := elements(t.Shape)
	if !ok || t.Shape == nil {
		return fmt.Errorf("%w output %q: shape %v", ErrInvalid, t.Name, t.Shape)
	}
	return t.fromBinary(raw, n)
}

func (t *Tensor) fromBinary(raw []byte, n int64) error {
	switch t.Datatype {
	case FP32:
		if len(raw)%4 != 0 || int64(len(raw)/4) != n { // not 4*n: a huge shape overflows it
			return fmt.Errorf("%w output %q: %d bytes for %d FP32 values", ErrInvalid, t.Name, len(raw), n)
		}
		t.FP32 = make([]float32, n)
		for i := range t.FP32 {
			t.FP32[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case UINT8:
		if int64(len(raw)) != n {
			return fmt.Errorf("%w output %q: %d bytes for %d UINT8 values", ErrInvalid, t.Name, len(raw), n)
		}
		t.UINT8 = bytes.Clone(raw)
	case INT64, INT32:
		size := map[string]int{INT64: 8, INT32: 4}[t.Datatype]
		if len(raw)%size != 0 || int64(len(raw)/size) != n {
			return fmt.Errorf("%w output %q: %d bytes for %d %s values", ErrInvalid, t.Name, len(raw), n, t.Datatype)
		}
		t.INT64 = make([]int64, n)
		for i := range t.INT64 {
			if size == 8 {
				t.INT64[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			} else {
				t.INT64[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
			}
		}
	case BYTES:
		t.Bytes = make([][]byte, 0, min(n, int64(len(raw)/4)))
		for len(raw) > 0 {
			if len(raw) < 4 {
				return fmt.Errorf("%w output %q: BYTES element %d has a truncated length", ErrInvalid, t.Name, len(t.Bytes))
			}
			l := binary.LittleEndian.Uint32(raw)
			if uint64(l) > uint64(len(raw)-4) {
				return fmt.Errorf("%w output %q: BYTES element %d says %d bytes, %d remain", ErrInvalid, t.Name, len(t.Bytes), l, len(raw)-4)
			}
			t.Bytes = append(t.Bytes, bytes.Clone(raw[4:4+l]))
			raw = raw[4+l:]
		}
		if int64(len(t.Bytes)) != n {
			return fmt.Errorf("%w output %q: shape %v, %d BYTES elements", ErrInvalid, t.Name, t.Shape, len(t.Bytes))
		}
	default:
		return fmt.Errorf("%w output %q: datatype %q (this client decodes BYTES, FP32, UINT8, INT64 and INT32)", ErrInvalid, t.Name, t.Datatype)
	}
	return nil
}

// fromJSON reads the output's JSON data, flat or nested, and checks its count against n.
func (t *Tensor) fromJSON(data json.RawMessage, n int64) error {
	if data == nil {
		return fmt.Errorf("%w output %q: no data and no binary_data_size", ErrInvalid, t.Name)
	}
	var add func(tok json.Token) error
	switch t.Datatype {
	case FP32:
		t.FP32 = make([]float32, 0, min(n, 1<<20))
		add = func(tok json.Token) error {
			switch v := tok.(type) {
			case nil:
				t.FP32 = append(t.FP32, float32(math.NaN()))
				return nil
			case json.Number:
				f, err := strconv.ParseFloat(string(v), 32)
				if err == nil {
					t.FP32 = append(t.FP32, float32(f))
					return nil
				}
			}
			return fmt.Errorf("%w output %q: FP32 element %v", ErrInvalid, t.Name, tok)
		}
	case UINT8:
		t.UINT8 = make([]uint8, 0, min(n, 1<<20))
		add = func(tok json.Token) error {
			if v, ok := tok.(json.Number); ok {
				if u, err := strconv.ParseUint(string(v), 10, 8); err == nil {
					t.UINT8 = append(t.UINT8, uint8(u))
					return nil
				}
			}
			return fmt.Errorf("%w output %q: UINT8 element %v", ErrInvalid, t.Name, tok)
		}
	case INT64, INT32:
		t.INT64 = make([]int64, 0, min(n, 1<<20))
		bits := map[string]int{INT64: 64, INT32: 32}[t.Datatype]
		add = func(tok json.Token) error {
			if v, ok := tok.(json.Number); ok {
				if i, err := strconv.ParseInt(string(v), 10, bits); err == nil {
					t.INT64 = append(t.INT64, i)
					return nil
				}
			}
			return fmt.Errorf("%w output %q: %s element %v", ErrInvalid, t.Name, t.Datatype, tok)
		}
	case BYTES:
		t.Bytes = make([][]byte, 0, min(n, 1<<20))
		add = func(tok json.Token) error {
			if s, ok := tok.(string); ok {
				t.Bytes = append(t.Bytes, []byte(s))
				return nil
			}
			return fmt.Errorf("%w output %q: BYTES element %v is not a string", ErrInvalid, t.Name, tok)
		}
	default:
		return fmt.Errorf("%w output %q: datatype %q (this client decodes BYTES, FP32, UINT8, INT64 and INT32)", ErrInvalid, t.Name, t.Datatype)
	}
	count, err := flatten(data, add)
	if err != nil {
		return fmt.Errorf("%w output %q data: %v", ErrInvalid, t.Name, err)
	}
	if count != n {
		return fmt.Errorf("%w output %q: shape %v, %d elements", ErrInvalid, t.Name, t.Shape, count)
	}
	return nil
}

// flatten calls add for each element of a JSON array, flat or nested, in order, and returns
// their count.
func flatten(data []byte, add func(json.Token) error) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	depth, count := 0, int64(0)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return count, err
		}
		switch tok {
		case json.Delim('['):
			depth++
			continue
		case json.Delim(']'):
			depth--
			continue
		}
		if _, isDelim := tok.(json.Delim); isDelim || depth == 0 {
			return count, fmt.Errorf("want an array of values, got %v", tok)
		}
		if err := add(tok); err != nil {
			return count, err
		}
		count++
	}
	if depth != 0 {
		return count, fmt.Errorf("unbalanced array")
	}
	return count, nil
}

// Class is one element of a classification output.
type Class struct {
	Score float64 // the model's output value for the class
	Index int
	Label string // empty when the server has no labels
}

// ParseClass parses a classification element, "<score>:<index>[:<label>]" (the label may
// itself hold ':').
func ParseClass(s string) (Class, error) {
	score, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Class{}, fmt.Errorf("%w classification %q: want <score>:<index>[:<label>]", ErrInvalid, s)
	}
	idx, label, _ := strings.Cut(rest, ":")
	var c Class
	var err1, err2 error
	c.Score, err1 = strconv.ParseFloat(score, 64)
	c.Index, err2 = strconv.Atoi(idx)
	if err1 != nil || err2 != nil || c.Index < 0 {
		return Class{}, fmt.Errorf("%w classification %q: want <score>:<index>[:<label>]", ErrInvalid, s)
	}
	c.Label = label
	return c, nil
}

// Classes parses a classification output [n, k] into n rows of k classes, best first as the
// server sends them.
func (t *Tensor) Classes() ([][]Class, error) {
	if t.Datatype != BYTES || len(t.Shape) != 2 {
		return nil, fmt.Errorf("%w output %q: a classification is a BYTES tensor [n, k], got %s %v", ErrInvalid, t.Name, t.Datatype, t.Shape)
	}
	if n, ok := elements(t.Shape); !ok || n != int64(len(t.Bytes)) {
		return nil, fmt.Errorf("%w output %q: shape %v, %d elements", ErrInvalid, t.Name, t.Shape, len(t.Bytes))
	}
	k := int(t.Shape[1])
	rows := make([][]Class, t.Shape[0])
	for i := range rows {
		rows[i] = make([]Class, k)
		for j := range k {
			c, err := ParseClass(string(t.Bytes[i*k+j]))
			if err != nil {
				return nil, err
			}
			rows[i][j] = c
		}
	}
	return rows, nil
}
