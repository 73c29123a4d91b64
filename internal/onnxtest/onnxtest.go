// Package onnxtest writes small ONNX models for the tests of other packages: image models
// with the inputs, outputs and metadata a test needs, that ONNX Runtime loads and runs. It is
// imported by tests only.
package onnxtest

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Tensor is a graph input or output. Shape holds int64 (fixed) or string (named, dynamic)
// dimensions.
type Tensor struct {
	Name  string
	Type  string // float32 or uint8
	Shape []any
}

// Node is one operator.
type Node struct {
	Op      string
	In, Out []string
	Ints    map[string][]int64 // list attributes
	Int     map[string]int64   // integer attributes
}

// Init is a constant tensor of the graph (an initializer): F32 or I64 holds its values.
type Init struct {
	Name string
	Dims []int64
	F32  []float32
	I64  []int64
}

// Graph is a whole model.
type Graph struct {
	Inputs, Outputs []Tensor
	Nodes           []Node
	Inits           []Init
	// Metadata becomes the model's metadata_props.
	Metadata map[string]string
}

// Means is an image model that answers each image's per-channel means: [N, 3] scores, or
// [N, 3, 1, 1] with keepDims. layout is NCHW or NHWC; elem float32 or uint8; h and w are
// int64 sizes or strings (dynamic).
func Means(elem, layout string, h, w any, keepDims bool) Graph {
	shape, axes := []any{"N", int64(3), h, w}, []int64{2, 3}
	if layout == "NHWC" {
		shape, axes = []any{"N", h, w, int64(3)}, []int64{1, 2}
	}
	out := []any{"N", int64(3)}
	keep := int64(0)
	if keepDims {
		out, keep = []any{"N", int64(3), int64(1), int64(1)}, 1
	}
	g := Graph{
		Inputs:  []Tensor{{Name: "input", Type: elem, Shape: shape}},
		Outputs: []Tensor{{Name: "output", Type: "float32", Shape: out}},
	}
	src := "input"
	if elem != "float32" {
		g.Nodes = append(g.Nodes, Node{Op: "Cast", In: []string{"input"}, Out: []string{"x"}, Int: map[string]int64{"to": 1}})
		src = "x"
	}
	g.Nodes = append(g.Nodes, Node{Op: "ReduceMean", In: []string{src}, Out: []string{"output"},
		Ints: map[string][]int64{"axes": axes}, Int: map[string]int64{"keepdims": keep}})
	return g
}

// ONNX's protobuf field numbers (onnx/onnx.proto) and data types.
const (
	modelIRVersion     = 1
	modelOpsetImport   = 8
	modelProducerName  = 2
	modelGraph         = 7
	modelMetadataProps = 14
	opsetVersion       = 2
	entryKey           = 1
	entryValue         = 2
	graphNode          = 1
	graphName          = 2
	graphInput         = 11
	graphInitializer   = 5
	tensorDims         = 1
	tensorDataType     = 2
	tensorName         = 8
	tensorRawData      = 9
	graphOutput        = 12
	nodeInput          = 1
	nodeOutput         = 2
	nodeOpType         = 4
	nodeAttribute      = 5
	attrName           = 1
	attrI              = 3
	attrInts           = 8
	attrType           = 20
	attrTypeInt        = 2
	attrTypeInts       = 7
	valueInfoName      = 1
	valueInfoType      = 2
	typeTensor         = 1
	tensorElemType     = 1
	tensorShape        = 2
	shapeDim           = 1
	dimValue           = 1
	dimParam           = 2
)

func elemType(t string) uint64 {
	switch t {
	case "float32":
		return 1
	case "uint8":
		return 2
	case "int64":
		return 7
	case "int32":
		return 6
	}
	panic("onnxtest: element type " + t)
}

// Bytes encodes the model (IR version 8, opset 13).
func (g Graph) Bytes() []byte {
	var graph []byte
	for _, n := range g.Nodes {
		graph = msg(graph, graphNode, node(n))
	}
	graph = str(graph, graphName, "test")
	for _, t := range g.Inits {
		graph = msg(graph, graphInitializer, initializer(t))
	}
	for _, t := range g.Inputs {
		graph = msg(graph, graphInput, valueInfo(t))
	}
	for _, t := range g.Outputs {
		graph = msg(graph, graphOutput, valueInfo(t))
	}
	var m []byte
	m = protowire.AppendTag(m, modelIRVersion, protowire.VarintType)
	m = protowire.AppendVarint(m, 8)
	m = str(m, modelProducerName, "imagegate-tests")
	var opset []byte
	opset = protowire.AppendTag(opset, opsetVersion, protowire.VarintType)
	opset = protowire.AppendVarint(opset, 13)
	m = msg(m, modelOpsetImport, opset)
	m = msg(m, modelGraph, graph)
	for _, k := range slices.Sorted(maps.Keys(g.Metadata)) {
		m = msg(m, modelMetadataProps, str(str(nil, entryKey, k), entryValue, g.Metadata[k]))
	}
	return m
}

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func msg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func node(n Node) []byte {
	var b []byte
	for _, s := range n.In {
		b = str(b, nodeInput, s)
	}
	for _, s := range n.Out {
		b = str(b, nodeOutput, s)
	}
	b = str(b, nodeOpType, n.Op)
	for name, vs := range n.Ints {
		a := str(nil, attrName, name)
		for _, v := range vs {
			a = protowire.AppendTag(a, attrInts, protowire.VarintType)
			a = protowire.AppendVarint(a, uint64(v))
		}
		a = protowire.AppendTag(a, attrType, protowire.VarintType)
		a = protowire.AppendVarint(a, attrTypeInts)
		b = msg(b, nodeAttribute, a)
	}
	for name, v := range n.Int {
		a := str(nil, attrName, name)
		a = protowire.AppendTag(a, attrI, protowire.VarintType)
		a = protowire.AppendVarint(a, uint64(v))
		a = protowire.AppendTag(a, attrType, protowire.VarintType)
		a = protowire.AppendVarint(a, attrTypeInt)
		b = msg(b, nodeAttribute, a)
	}
	return b
}

func valueInfo(t Tensor) []byte {
	var shape []byte
	for _, d := range t.Shape {
		var dim []byte
		switch x := d.(type) {
		case int64:
			dim = protowire.AppendTag(dim, dimValue, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(x))
		case int:
			dim = protowire.AppendTag(dim, dimValue, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(x))
		case string:
			dim = str(dim, dimParam, x)
		default:
			panic(fmt.Sprintf("onnxtest: dimension %v", d))
		}
		shape = msg(shape, shapeDim, dim)
	}
	var tt []byte
	tt = protowire.AppendTag(tt, tensorElemType, protowire.VarintType)
	tt = protowire.AppendVarint(tt, elemType(t.Type))
	tt = msg(tt, tensorShape, shape)
	return msg(str(nil, valueInfoName, t.Name), valueInfoType, msg(nil, typeTensor, tt))
}

func initializer(t Init) []byte {
	var b []byte
	for _, d := range t.Dims {
		b = protowire.AppendTag(b, tensorDims, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	typ := uint64(1)
	var raw []byte
	if t.I64 != nil {
		typ = 7
		for _, v := range t.I64 {
			raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
		}
	} else {
		for _, v := range t.F32 {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
	}
	b = protowire.AppendTag(b, tensorDataType, protowire.VarintType)
	b = protowire.AppendVarint(b, typ)
	b = str(b, tensorName, t.Name)
	b = protowire.AppendTag(b, tensorRawData, protowire.BytesType)
	return protowire.AppendBytes(b, raw)
}
