package onnxtest

import "fmt"

// Models for the decoders of embeddings and detections: each takes float32 images
// [N, 3, h, w] (NCHW, batch axis dynamic) and answers per image.

// Const is one output of Planted: the same values for every image.
type Const struct {
	Name string
	// Dims is one image's shape (the batch axis comes first in the model): int64 sizes, or
	// strings to declare an axis dynamic (the values still have the sizes of Sizes).
	Dims []any
	// Sizes are the dimensions Values fill (Dims' where they are numbers).
	Sizes  []int64
	Values []float32
	// Type is float32 (the default), int64 or int32.
	Type string
}

// Planted is a model whose outputs are constants, the same for every image: a decoder's input
// known exactly, through ONNX Runtime and the session's buffers.
func Planted(h, w int64, outs ...Const) Graph {
	g := Graph{Inputs: []Tensor{{Name: "input", Type: "float32", Shape: []any{"N", int64(3), h, w}}}}
	zero := g.batchZero()
	for _, o := range outs {
		v := g.perImage(zero, o.Name+"_c", o.Sizes, o.Values)
		typ := o.Type
		if typ == "" {
			typ = "float32"
		}
		g.Outputs = append(g.Outputs, Tensor{Name: o.Name, Type: typ, Shape: append([]any{"N"}, o.Dims...)})
		to := map[string]int64{"float32": 1, "int64": 7, "int32": 6}[typ]
		g.Nodes = append(g.Nodes, Node{Op: "Cast", In: []string{v}, Out: []string{o.Name}, Int: map[string]int64{"to": to}})
	}
	return g
}

// batchZero adds nodes computing zeros of shape [N, 1, 1, 1] from the input (so that outputs
// follow the batch) and returns its name.
func (g *Graph) batchZero() string {
	g.Inits = append(g.Inits, Init{Name: "zero", Dims: []int64{1}, F32: []float32{0}})
	g.Nodes = append(g.Nodes,
		Node{Op: "ReduceMean", In: []string{"input"}, Out: []string{"mean"}, Ints: map[string][]int64{"axes": {1, 2, 3}}, Int: map[string]int64{"keepdims": 1}},
		Node{Op: "Mul", In: []string{"mean", "zero"}, Out: []string{"z4"}})
	return "z4"
}

// perImage adds nodes computing an [N, sizes...] tensor whose every image holds values, and
// returns its name.
func (g *Graph) perImage(zero, name string, sizes []int64, values []float32) string {
	shape := []int64{-1}
	dims := []int64{1}
	n := int64(1)
	for _, s := range sizes {
		shape = append(shape, 1)
		dims = append(dims, s)
		n *= s
	}
	if int64(len(values)) != n {
		panic(fmt.Sprintf("onnxtest: %s has %d values for %v", name, len(values), sizes))
	}
	g.Inits = append(g.Inits, Init{Name: name + "_shape", Dims: []int64{int64(len(shape))}, I64: shape},
		Init{Name: name + "_v", Dims: dims, F32: values})
	g.Nodes = append(g.Nodes,
		Node{Op: "Reshape", In: []string{zero, name + "_shape"}, Out: []string{name + "_z"}},
		Node{Op: "Add", In: []string{name + "_z", name + "_v"}, Out: []string{name}})
	return name
}

// RedBox layouts: how the red box is answered.
const (
	RedYOLO          = "yolo"           // [N, 4+2, 3]: anchor 0 the box, class 1 at 0.9; v8's layout
	RedYOLOT         = "yolo_t"         // [N, 3, 4+2]: the same, transposed
	RedYOLOObj       = "yolo_obj"       // [N, 5+2, 3]: with objectness 1 (v5's values, v8's layout)
	RedYOLOObjT      = "yolo_obj_t"     // [N, 3, 5+2]: v5's layout
	RedBoxesScores   = "boxes_scores"   // boxes [N, 2, 4] normalized corners, scores [N, 2, 2] with background
	RedNMS           = "nms"            // boxes [N, 2, 4], scores [N, 2], classes [N, 2] int64, count [N, 1] int64 = 1
	RedNMSPacked     = "nms_packed"     // [N, 2, 6] rows x1 y1 x2 y2 score class
	RedNMSPackedDyn  = "nms_packed_dyn" // the same, its rows axis declared dynamic
	redScore         = 0.9
	redClass         = 1
	redYOLOAnchors   = 3
	redFinderMinDiff = 150
)

// RedBox is a detector for end-to-end tests: it finds the pixels whose red value exceeds
// their green by more than 150 (in 0..255: serve it with raw scaling) and answers their
// bounding box in input pixels (x2, y2 one past the last red pixel), class 1 with score 0.9,
// in one of the layouts above, beside empty anchors or rows. A test draws a red rectangle into
// a photo, lets the gateway's preprocessing place it in the input (letterbox, stretch, EXIF
// orientation), and checks that the decoded, mapped box is the rectangle it drew.
func RedBox(h, w int64, layout string) Graph {
	g := Graph{Inputs: []Tensor{{Name: "input", Type: "float32", Shape: []any{"N", int64(3), h, w}}}}
	zero := g.batchZero()
	g.Inits = append(g.Inits, Init{Name: "i0", I64: []int64{0}}, Init{Name: "i1", I64: []int64{1}},
		Init{Name: "thr", Dims: []int64{1}, F32: []float32{redFinderMinDiff}}, Init{Name: "one", Dims: []int64{1}, F32: []float32{1}},
		Init{Name: "half", Dims: []int64{1}, F32: []float32{0.5}})
	nd := func(op string, in []string, out string, ints map[string]int64) {
		g.Nodes = append(g.Nodes, Node{Op: op, In: in, Out: []string{out}, Int: ints})
	}
	nd("Gather", []string{"input", "i0"}, "red", map[string]int64{"axis": 1})
	nd("Gather", []string{"input", "i1"}, "green", map[string]int64{"axis": 1})
	nd("Sub", []string{"red", "green"}, "diff", nil)
	nd("Greater", []string{"diff", "thr"}, "mask", nil)
	nd("Cast", []string{"mask"}, "maskf", map[string]int64{"to": 1})
	g.Nodes = append(g.Nodes,
		Node{Op: "ReduceMax", In: []string{"maskf"}, Out: []string{"cols"}, Ints: map[string][]int64{"axes": {1}}, Int: map[string]int64{"keepdims": 0}},
		Node{Op: "ReduceMax", In: []string{"maskf"}, Out: []string{"rows"}, Ints: map[string][]int64{"axes": {2}}, Int: map[string]int64{"keepdims": 0}})
	for _, e := range []struct{ src, lo, hi string }{{"cols", "x1", "x2"}, {"rows", "y1", "y2"}} {
		nd("ArgMax", []string{e.src}, e.lo+"i", map[string]int64{"axis": 1, "keepdims": 1})
		nd("ArgMax", []string{e.src}, e.hi+"i", map[string]int64{"axis": 1, "keepdims": 1, "select_last_index": 1})
		nd("Cast", []string{e.lo + "i"}, e.lo, map[string]int64{"to": 1})
		nd("Cast", []string{e.hi + "i"}, e.hi+"l", map[string]int64{"to": 1})
		nd("Add", []string{e.hi + "l", "one"}, e.hi, nil)
	}
	nd("Concat", []string{"x1", "y1", "x2", "y2"}, "xyxy", map[string]int64{"axis": 1}) // [N, 4]
	nd("Add", []string{"x1", "x2"}, "sx", nil)
	nd("Mul", []string{"sx", "half"}, "cx", nil)
	nd("Add", []string{"y1", "y2"}, "sy", nil)
	nd("Mul", []string{"sy", "half"}, "cy", nil)
	nd("Sub", []string{"x2", "x1"}, "bw", nil)
	nd("Sub", []string{"y2", "y1"}, "bh", nil)
	nd("Concat", []string{"cx", "cy", "bw", "bh"}, "cxcywh", map[string]int64{"axis": 1})
	reshape := func(in, out string, shape ...int64) {
		g.Inits = append(g.Inits, Init{Name: out + "_shape", Dims: []int64{int64(len(shape))}, I64: shape})
		nd("Reshape", []string{in, out + "_shape"}, out, nil)
	}
	switch layout {
	case RedYOLO, RedYOLOT, RedYOLOObj, RedYOLOObjT:
		obj := layout == RedYOLOObj || layout == RedYOLOObjT
		tail := []float32{0, redScore} // class 0, class 1
		if obj {
			tail = []float32{1, 0, redScore}
		}
		v := int64(4 + len(tail))
		scores := g.perImage(zero, "tail", []int64{int64(len(tail))}, tail)
		nd("Concat", []string{"cxcywh", scores}, "anchor0", map[string]int64{"axis": 1}) // [N, v]
		reshape("anchor0", "anchor0c", -1, v, 1)
		empty := g.perImage(zero, "empty", []int64{v, redYOLOAnchors - 1}, make([]float32, v*(redYOLOAnchors-1)))
		out := "output"
		if layout == RedYOLOT || layout == RedYOLOObjT {
			out = "vxa"
		}
		nd("Concat", []string{"anchor0c", empty}, out, map[string]int64{"axis": 2}) // [N, v, A]
		shape := []any{"N", v, int64(redYOLOAnchors)}
		if out == "vxa" {
			g.Nodes = append(g.Nodes, Node{Op: "Transpose", In: []string{"vxa"}, Out: []string{"output"}, Ints: map[string][]int64{"perm": {0, 2, 1}}})
			shape = []any{"N", int64(redYOLOAnchors), v}
		}
		g.Outputs = []Tensor{{Name: "output", Type: "float32", Shape: shape}}
	case RedBoxesScores:
		g.Inits = append(g.Inits, Init{Name: "wh", Dims: []int64{1, 4}, F32: []float32{float32(w), float32(h), float32(w), float32(h)}})
		nd("Div", []string{"xyxy", "wh"}, "norm", nil)
		reshape("norm", "box0", -1, 1, 4)
		empty := g.perImage(zero, "empty", []int64{1, 4}, make([]float32, 4))
		nd("Concat", []string{"box0", empty}, "boxes", map[string]int64{"axis": 1})
		sc := g.perImage(zero, "sc", []int64{2, 2}, []float32{1 - redScore, redScore, 1, 0})
		nd("Identity", []string{sc}, "scores", nil)
		g.Outputs = []Tensor{{Name: "scores", Type: "float32", Shape: []any{"N", int64(2), int64(2)}},
			{Name: "boxes", Type: "float32", Shape: []any{"N", int64(2), int64(4)}}}
	case RedNMS:
		reshape("xyxy", "box0", -1, 1, 4)
		empty := g.perImage(zero, "empty", []int64{1, 4}, []float32{0, 0, 9, 9}) // padding past the count
		nd("Concat", []string{"box0", empty}, "det_boxes", map[string]int64{"axis": 1})
		sc := g.perImage(zero, "sc", []int64{2}, []float32{redScore, 0.99})
		nd("Identity", []string{sc}, "det_scores", nil)
		cl := g.perImage(zero, "cl", []int64{2}, []float32{redClass, 0})
		nd("Cast", []string{cl}, "det_classes", map[string]int64{"to": 7})
		cnt := g.perImage(zero, "cnt", []int64{1}, []float32{1})
		nd("Cast", []string{cnt}, "num_dets", map[string]int64{"to": 7})
		g.Outputs = []Tensor{{Name: "num_dets", Type: "int64", Shape: []any{"N", int64(1)}},
			{Name: "det_boxes", Type: "float32", Shape: []any{"N", int64(2), int64(4)}},
			{Name: "det_scores", Type: "float32", Shape: []any{"N", int64(2)}},
			{Name: "det_classes", Type: "int64", Shape: []any{"N", int64(2)}}}
	case RedNMSPacked, RedNMSPackedDyn:
		tail := g.perImage(zero, "tail", []int64{2}, []float32{redScore, redClass})
		nd("Concat", []string{"xyxy", tail}, "row0", map[string]int64{"axis": 1})
		reshape("row0", "row0r", -1, 1, 6)
		empty := g.perImage(zero, "empty", []int64{1, 6}, make([]float32, 6))
		if layout == RedNMSPacked {
			nd("Concat", []string{"row0r", empty}, "output", map[string]int64{"axis": 1})
			g.Outputs = []Tensor{{Name: "output", Type: "float32", Shape: []any{"N", int64(2), int64(6)}}}
			break
		}
		// Rows up to one past whether anything is red (2 when something is): a length that
		// only the run knows, so that ONNX Runtime allocates the output.
		nd("Concat", []string{"row0r", empty}, "packed", map[string]int64{"axis": 1})
		g.Nodes = append(g.Nodes, Node{Op: "ReduceMax", In: []string{"maskf"}, Out: []string{"any"}, Ints: map[string][]int64{"axes": {0, 1, 2}}, Int: map[string]int64{"keepdims": 0}})
		nd("Add", []string{"any", "one"}, "endf", nil)
		nd("Cast", []string{"endf"}, "end", map[string]int64{"to": 7})
		g.Inits = append(g.Inits, Init{Name: "start", Dims: []int64{1}, I64: []int64{0}}, Init{Name: "axis1", Dims: []int64{1}, I64: []int64{1}})
		nd("Slice", []string{"packed", "start", "end", "axis1"}, "output", nil)
		g.Outputs = []Tensor{{Name: "output", Type: "float32", Shape: []any{"N", "K", int64(6)}}}
	default:
		panic("onnxtest: RedBox layout " + layout)
	}
	return g
}
