package main

import (
	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/runtime/ort"
)

// runner is an ONNX Runtime session as the gateway runs it: its one output, the scores of a
// classifier (named as the configuration's output.name, one value per class).
type runner[T ort.Elem] struct {
	*ort.Session[T]
	outputs []gateway.Output
	outs    [][]float32 // Run's answer, reused
}

func newRunner[T ort.Elem](s *ort.Session[T], output string) *runner[T] {
	return &runner[T]{Session: s, outputs: []gateway.Output{{Name: output, Shape: []int64{int64(s.Classes())}}}, outs: make([][]float32, 1)}
}

func (r *runner[T]) Outputs() []gateway.Output { return r.outputs }

// Run runs the first n rows; its one output holds their scores, valid until the next Run.
func (r *runner[T]) Run(n int) ([][]float32, error) {
	scores, err := r.Session.Run(n)
	if err != nil {
		return nil, err
	}
	r.outs[0] = scores
	return r.outs, nil
}
