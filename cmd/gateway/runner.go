package main

import (
	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/postprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

// runner is an ONNX Runtime session as the gateway runs it: a classifier's one output, its
// scores (named as the configuration's output.name, one value per class), or the outputs
// another task reads (a session made with OutputNames: an embedding's vector, a detector's
// boxes, scores, classes, count), integer ones handed as float32 values.
type runner[T ort.Elem] struct {
	*ort.Session[T]
	outputs []gateway.Output
	outs    [][]float32 // Run's answer, reused
	multi   bool        // the session runs OutputNames (RunOutputs)
	conv    [][]float32 // per output: an integer output's values as float32, reused
}

// newRunner adapts a classifier's session: its one output, named output.
func newRunner[T ort.Elem](s *ort.Session[T], output string) *runner[T] {
	return &runner[T]{Session: s, outputs: []gateway.Output{{Name: output, Shape: []int64{int64(s.Classes())}}}, outs: make([][]float32, 1)}
}

// newTaskRunner adapts a session made with OutputNames: each output's per-sample shape is its
// shape without the batch axis (an output without one is served with batches of one: its
// whole shape is the sample's).
func newTaskRunner[T ort.Elem](s *ort.Session[T]) *runner[T] {
	specs := s.Outputs()
	r := &runner[T]{Session: s, multi: true, outs: make([][]float32, len(specs)), conv: make([][]float32, len(specs))}
	for _, sp := range specs {
		shape := sp.Shape
		if sp.Batched {
			shape = shape[1:]
		}
		dt := map[string]string{"float32": "FP32", "int64": "INT64", "int32": "INT32"}[sp.Type]
		r.outputs = append(r.outputs, gateway.Output{Name: sp.Name, Shape: append([]int64(nil), shape...), Datatype: dt})
	}
	return r
}

// runnerFor adapts s as the task of m needs.
func runnerFor[T ort.Elem](s *ort.Session[T], output string, task bool) *runner[T] {
	if task {
		return newTaskRunner(s)
	}
	return newRunner(s, output)
}

func (r *runner[T]) Outputs() []gateway.Output { return r.outputs }

// Run runs the first n rows; its outputs hold their values, valid until the next Run.
func (r *runner[T]) Run(n int) ([][]float32, error) {
	if !r.multi {
		scores, err := r.Session.Run(n)
		if err != nil {
			return nil, err
		}
		r.outs[0] = scores
		return r.outs, nil
	}
	outs, err := r.RunOutputs(n)
	if err != nil {
		return nil, err
	}
	for k := range outs {
		o := &outs[k]
		switch {
		case o.F32 != nil:
			r.outs[k] = o.F32
		case o.I64 != nil:
			r.conv[k] = postprocess.Float32s(r.conv[k][:0], o.I64)
			r.outs[k] = r.conv[k]
		default:
			r.conv[k] = postprocess.Float32s(r.conv[k][:0], o.I32)
			r.outs[k] = r.conv[k]
		}
	}
	return r.outs, nil
}
