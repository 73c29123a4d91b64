package wire

import (
	"encoding/json"
	"math"
)

// The Open Inference Protocol's inference request, as JSON (the header of a request whose
// tensors may follow in binary).

// Limits of an inference request's JSON header.
const (
	maxIDBytes    = 256
	maxNameBytes  = 256
	maxOutputs    = 8
	maxParams     = 16
	maxParamBytes = 256
)

// InferRequest is an inference request's JSON header as parsed. It is meant to be reused:
// Reset keeps its buffers.
type InferRequest struct {
	ID           []byte
	HasID        bool
	BinaryOutput bool // parameters.binary_data_output
	Inputs       int  // inputs listed; only the first is kept (the models take one)
	In           Input
	Outs         []Output
	// Params are the request's other parameters, in order: a detector's selection
	// (score_threshold, ...), detections; those the server does not know are kept and ignored.
	Params []Param
}

// Param is a request parameter: its key and its value's text (a string's, escapes undone; a
// number's or a boolean's literal).
type Param struct {
	Key, Value []byte
}

// AddParam appends a parameter, reusing the buffers of Params' spare capacity.
func (v *InferRequest) AddParam(key, value []byte) {
	n := len(v.Params)
	if n < cap(v.Params) {
		v.Params = v.Params[:n+1]
	} else {
		v.Params = append(v.Params, Param{})
	}
	p := &v.Params[n]
	p.Key, p.Value = append(p.Key[:0], key...), append(p.Value[:0], value...)
}

// Input is the request's first input.
type Input struct {
	Name, Datatype []byte
	Shape          [MaxDims]int64
	NDim           int
	Data           []byte // the raw JSON value of "data"
	BinarySize     int64  // parameters.binary_data_size, when HasBinary
	HasBinary      bool
}

// Output is one requested output.
type Output struct {
	Name           []byte
	Binary         int8 // parameters.binary_data: -1 unset, 0 false, 1 true
	Classification int  // parameters.classification: the top k as classes; 0: scores
}

// Reset empties v for the next request, keeping its buffers.
func (v *InferRequest) Reset() {
	*v = InferRequest{ID: v.ID[:0], Outs: v.Outs[:0], Params: v.Params[:0], In: Input{Name: v.In.Name[:0], Datatype: v.In.Datatype[:0]}}
}

// Parse reads the inference request's JSON header strictly, within its limits: one pass, no
// value kept but InferRequest's fields (the input's "data" as its raw span). v must be fresh
// or Reset.
func (v *InferRequest) Parse(b []byte) error {
	p := scanner{b: b}
	return p.fields([]string{"id", "parameters", "inputs", "outputs"}, "", true, func(k int) error {
		switch k {
		case 0:
			s, err := p.stringValue(maxIDBytes, "id")
			v.ID, v.HasID = append(v.ID[:0], s...), err == nil
			return err
		case 1:
			return v.parseParams(&p)
		case 2:
			return p.array(func() error {
				v.Inputs++
				if v.Inputs > 1 {
					return p.skipValue(0) // counted; the model takes one
				}
				return v.parseInput(&p)
			})
		}
		return p.array(func() error {
			if len(v.Outs) >= maxOutputs {
				return Malformed("more than %d outputs requested", maxOutputs)
			}
			v.Outs = append(v.Outs, Output{Binary: -1})
			return parseOutput(&p, &v.Outs[len(v.Outs)-1])
		})
	})
}

// fields reads a JSON object at p.i, handing each of its keys that keys names to read (by its
// index there), with p.i at the value, which read must consume; the values of other keys are
// skipped. A key named in keys may appear once: which of two values counts is left open by
// JSON, so the request is ambiguous (the article's API refuses a second "image" likewise).
// where prefixes the key in that error ("inputs[]."). With top, the object must be the whole
// input.
func (p *scanner) fields(keys []string, where string, top bool, read func(k int) error) error {
	var seen uint32
	return p.object(func(key []byte, esc bool) error {
		for i, k := range keys {
			if keyEquals(key, esc, k) {
				if seen&(1<<i) != 0 {
					return Malformed("the key %q appears twice", where+k)
				}
				seen |= 1 << i
				return read(i)
			}
		}
		return p.skipValue(0)
	}, top)
}

// parseParams reads the request's parameters: binary_data_output, and the others into Params
// (a string, a number or a boolean each; objects, arrays and nulls are skipped; a key appears
// once).
func (v *InferRequest) parseParams(p *scanner) error {
	bdo := false
	return p.object(func(key []byte, esc bool) error {
		if keyEquals(key, esc, "binary_data_output") {
			if bdo {
				return Malformed("the key %q appears twice", "parameters.binary_data_output")
			}
			bdo = true
			b, err := p.boolValue("parameters.binary_data_output")
			v.BinaryOutput = b
			return err
		}
		if esc {
			k, err := unescape(key, "parameter name")
			if err != nil {
				return err
			}
			key = k
		}
		if len(key) > maxNameBytes {
			return Malformed("a parameter's name is longer than %d bytes", maxNameBytes)
		}
		for _, q := range v.Params {
			if string(q.Key) == string(key) {
				return Malformed("the key %q appears twice", "parameters."+Truncate(string(key), 60))
			}
		}
		if len(v.Params) >= maxParams {
			return Malformed("more than %d parameters", maxParams)
		}
		what := "parameters." + Truncate(string(key), 60)
		var val []byte
		switch {
		case p.i < len(p.b) && p.b[p.i] == '"':
			s, err := p.stringValue(maxParamBytes, what)
			if err != nil {
				return err
			}
			val = s
		case p.i < len(p.b) && (p.b[p.i] == '{' || p.b[p.i] == '['):
			return p.skipValue(0) // no parameter the server reads is structured
		default:
			val = p.literal()
			switch l := string(val); {
			case l == "null":
				return nil
			case l != "true" && l != "false" && !isJSONNumber(l):
				return Malformed("%s must be a string, a number or a boolean, got %q", what, Truncate(l, 20))
			}
		}
		v.AddParam(key, val)
		return nil
	}, false)
}

// unescape undoes a JSON string's escapes (raw is its text between the quotes).
func unescape(raw []byte, what string) ([]byte, error) {
	var s string
	q := append(append([]byte{'"'}, raw...), '"')
	if err := json.Unmarshal(q, &s); err != nil {
		return nil, Malformed("%s: %v", what, err)
	}
	return []byte(s), nil
}

func (v *InferRequest) parseInput(p *scanner) error {
	in := &v.In
	return p.fields([]string{"name", "datatype", "shape", "parameters", "data"}, "inputs[].", false, func(k int) error {
		switch k {
		case 0:
			s, err := p.stringValue(maxNameBytes, "input name")
			in.Name = append(in.Name[:0], s...)
			return err
		case 1:
			s, err := p.stringValue(16, "datatype")
			in.Datatype = append(in.Datatype[:0], s...)
			return err
		case 2:
			in.NDim = 0
			return p.array(func() error {
				if in.NDim == MaxDims {
					return Malformed("shape has more than %d dimensions", MaxDims)
				}
				d, err := p.intValue("shape")
				if err == nil && d < 0 {
					err = Malformed("shape dimensions must not be negative, got %d", d)
				}
				in.Shape[in.NDim] = d
				in.NDim++
				return err
			})
		case 3:
			return p.fields([]string{"binary_data_size"}, "inputs[].parameters.", false, func(int) error {
				d, err := p.intValue("binary_data_size")
				if err == nil && d < 0 {
					err = Malformed("binary_data_size must not be negative")
				}
				in.BinarySize, in.HasBinary = d, true
				return err
			})
		}
		start := p.i
		if err := p.skipValue(0); err != nil {
			return err
		}
		in.Data = p.b[start:p.i]
		return nil
	})
}

func parseOutput(p *scanner, o *Output) error {
	return p.fields([]string{"name", "parameters"}, "outputs[].", false, func(k int) error {
		if k == 0 {
			s, err := p.stringValue(maxNameBytes, "output name")
			o.Name = append(o.Name[:0], s...)
			return err
		}
		return p.fields([]string{"binary_data", "classification"}, "outputs[].parameters.", false, func(k int) error {
			if k == 0 {
				b, err := p.boolValue("binary_data")
				o.Binary = 0
				if b {
					o.Binary = 1
				}
				return err
			}
			d, err := p.intValue("classification")
			if err == nil && (d < 1 || d > math.MaxInt32) {
				err = Malformed("classification must be a positive count, got %d", d)
			}
			o.Classification = int(d)
			return err
		})
	})
}
