package ort

import (
	"errors"
	"fmt"
)

// Initializers listed as inputs.
//
// ONNX files written for IR version 3 (and by old exporters since) list every weight among
// the graph's inputs as well as its initializers, which makes each weight an input a caller
// may override. ONNX Runtime then keeps them as values that may change from run to run: it
// warns "Initializer ... appears in graph inputs and will not be treated as constant value"
// and leaves out the optimizations that need constant weights (constant folding, fusing a
// BatchNormalization into its Conv, prepacking). The gateway feeds the image input only, so
// every such input always holds its initializer's value: dropping them from the inputs gives
// the same function (to float32 rounding: the folded and fused weights round differently),
// optimized as a new export's would be, and runs the shared face detector two to three times
// faster (docs/internals.md, "Initializers listed as inputs").

// dropInitializerInputs returns model without the graph inputs that name an initializer, and
// how many it dropped (0: model is returned as it is). Other fields, weights included, are
// copied byte for byte.
func dropInitializerInputs(model []byte) ([]byte, int, error) {
	mfs, err := fields(model)
	if err != nil {
		return nil, 0, fmt.Errorf("model: %w", err)
	}
	gi := -1
	for i, f := range mfs {
		if f.num == modelGraph {
			gi = i
		}
	}
	if gi < 0 {
		return nil, 0, errors.New("model has no graph")
	}
	gfs, err := fields(mfs[gi].val)
	if err != nil {
		return nil, 0, fmt.Errorf("graph: %w", err)
	}
	inits := map[string]bool{}
	for _, f := range gfs {
		if f.num == graphInitializer {
			name, _, _, _, err := tensorInfo(f.val)
			if err != nil {
				return nil, 0, fmt.Errorf("initializer: %w", err)
			}
			inits[name] = true
		}
	}
	graph := make([]byte, 0, len(mfs[gi].val))
	dropped := 0
	for _, f := range gfs {
		if f.num == graphInput && inits[valueName(f.val)] {
			dropped++
			continue
		}
		graph = append(graph, f.raw...)
	}
	if dropped == 0 {
		return model, 0, nil
	}
	out := make([]byte, 0, len(model))
	for i, f := range mfs {
		if i == gi {
			out = appendMessage(out, modelGraph, graph)
			continue
		}
		out = append(out, f.raw...)
	}
	return out, dropped, nil
}

// valueName is a ValueInfoProto's name.
func valueName(b []byte) string {
	fs, err := fields(b)
	if err != nil {
		return ""
	}
	for _, f := range fs {
		if f.num == valueInfoName {
			return string(f.val)
		}
	}
	return ""
}
