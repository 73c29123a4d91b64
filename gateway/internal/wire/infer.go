package wire

import "math"

// The Open Inference Protocol's inference request, as JSON (the header of a request whose
// tensors may follow in binary).

// Limits of an inference request's JSON header.
const (
	maxIDBytes   = 256
	maxNameBytes = 256
	maxOutputs   = 8
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
	*v = InferRequest{ID: v.ID[:0], Outs: v.Outs[:0], In: Input{Name: v.In.Name[:0], Datatype: v.In.Datatype[:0]}}
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
			return p.fields([]string{"binary_data_output"}, "parameters.", false, func(int) error {
				b, err := p.boolValue("parameters.binary_data_output")
				v.BinaryOutput = b
				return err
			})
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
