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
	var seen uint16
	return p.object(func(key []byte, esc bool) error {
		switch {
		case keyEquals(key, esc, "id"):
			if err := once(&seen, 1, "id"); err != nil {
				return err
			}
			s, err := p.stringValue(maxIDBytes, "id")
			if err != nil {
				return err
			}
			v.ID, v.HasID = append(v.ID[:0], s...), true
		case keyEquals(key, esc, "parameters"):
			if err := once(&seen, 2, "parameters"); err != nil {
				return err
			}
			var pseen uint16
			return p.object(func(k []byte, esc bool) error {
				if keyEquals(k, esc, "binary_data_output") {
					if err := once(&pseen, 1, "parameters.binary_data_output"); err != nil {
						return err
					}
					b, err := p.boolValue("parameters.binary_data_output")
					v.BinaryOutput = b
					return err
				}
				return p.skipValue(0)
			}, false)
		case keyEquals(key, esc, "inputs"):
			if err := once(&seen, 4, "inputs"); err != nil {
				return err
			}
			return p.array(func() error {
				v.Inputs++
				if v.Inputs > 1 {
					return p.skipValue(0) // counted; the model takes one
				}
				return v.parseInput(&p)
			})
		case keyEquals(key, esc, "outputs"):
			if err := once(&seen, 8, "outputs"); err != nil {
				return err
			}
			return p.array(func() error {
				if len(v.Outs) >= maxOutputs {
					return Malformed("more than %d outputs requested", maxOutputs)
				}
				v.Outs = append(v.Outs, Output{Binary: -1})
				return v.parseOutput(&p, &v.Outs[len(v.Outs)-1])
			})
		default:
			return p.skipValue(0)
		}
		return nil
	}, true)
}

// once marks bit in *seen for a key of the object being read, and refuses the key a second
// time: which of two values counts is left open by JSON, so the request is ambiguous (the
// article's API refuses a second "image" likewise).
func once(seen *uint16, bit uint16, key string) error {
	if *seen&bit != 0 {
		return Malformed("the key %q appears twice", key)
	}
	*seen |= bit
	return nil
}

func (v *InferRequest) parseInput(p *scanner) error {
	in := &v.In
	var seen uint16
	return p.object(func(key []byte, esc bool) error {
		switch {
		case keyEquals(key, esc, "name"):
			if err := once(&seen, 1, "inputs[].name"); err != nil {
				return err
			}
			s, err := p.stringValue(maxNameBytes, "input name")
			in.Name = append(in.Name[:0], s...)
			return err
		case keyEquals(key, esc, "datatype"):
			if err := once(&seen, 2, "inputs[].datatype"); err != nil {
				return err
			}
			s, err := p.stringValue(16, "datatype")
			in.Datatype = append(in.Datatype[:0], s...)
			return err
		case keyEquals(key, esc, "shape"):
			if err := once(&seen, 4, "inputs[].shape"); err != nil {
				return err
			}
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
		case keyEquals(key, esc, "parameters"):
			if err := once(&seen, 8, "inputs[].parameters"); err != nil {
				return err
			}
			var pseen uint16
			return p.object(func(k []byte, esc bool) error {
				if keyEquals(k, esc, "binary_data_size") {
					if err := once(&pseen, 1, "inputs[].parameters.binary_data_size"); err != nil {
						return err
					}
					d, err := p.intValue("binary_data_size")
					if err == nil && d < 0 {
						err = Malformed("binary_data_size must not be negative")
					}
					in.BinarySize, in.HasBinary = d, true
					return err
				}
				return p.skipValue(0)
			}, false)
		case keyEquals(key, esc, "data"):
			if err := once(&seen, 16, "inputs[].data"); err != nil {
				return err
			}
			start := p.i
			if err := p.skipValue(0); err != nil {
				return err
			}
			in.Data = p.b[start:p.i]
			return nil
		}
		return p.skipValue(0)
	}, false)
}

func (v *InferRequest) parseOutput(p *scanner, o *Output) error {
	var seen uint16
	return p.object(func(key []byte, esc bool) error {
		switch {
		case keyEquals(key, esc, "name"):
			if err := once(&seen, 1, "outputs[].name"); err != nil {
				return err
			}
			s, err := p.stringValue(maxNameBytes, "output name")
			o.Name = append(o.Name[:0], s...)
			return err
		case keyEquals(key, esc, "parameters"):
			if err := once(&seen, 2, "outputs[].parameters"); err != nil {
				return err
			}
			var pseen uint16
			return p.object(func(k []byte, esc bool) error {
				switch {
				case keyEquals(k, esc, "binary_data"):
					if err := once(&pseen, 1, "outputs[].parameters.binary_data"); err != nil {
						return err
					}
					b, err := p.boolValue("binary_data")
					o.Binary = 0
					if b {
						o.Binary = 1
					}
					return err
				case keyEquals(k, esc, "classification"):
					if err := once(&pseen, 2, "outputs[].parameters.classification"); err != nil {
						return err
					}
					d, err := p.intValue("classification")
					if err == nil && (d < 1 || d > math.MaxInt32) {
						err = Malformed("classification must be a positive count, got %d", d)
					}
					o.Classification = int(d)
					return err
				}
				return p.skipValue(0)
			}, false)
		}
		return p.skipValue(0)
	}, false)
}
