package ort

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// The HardSwish rewrite.
//
// On x86-64, ONNX Runtime's highest optimization level runs convolutions in its blocked
// channel layout (NCHWc: 8 or 16 channels interleaved). Every operator that layout does
// not know sits between a ReorderOutput and a ReorderInput, two full copies of its tensor.
// HardSwish is one of them: ONNX Runtime has no kernel for it and inlines its ONNX function,
// HardSigmoid(x) then Mul(x, ·), in the plain layout. MobileNetV3 has 19 of them, and in the
// shipped model the 55 reorders and the unfused HardSigmoid take a large share of a run's
// kernel time (docs/internals.md, "The HardSwish rewrite").
//
// rewriteHardSwish expresses the same function in operators the blocked layout keeps:
//
//	HardSwish(x)          →  Mul(x, HardSigmoid(Conv(x, ones, group=C, 1x1)))
//	HardSigmoid(x), where x also feeds other nodes
//	                      →  HardSigmoid(Conv(x, ones, group=C, 1x1))
//
// The 1x1 depthwise convolution with weights 1 and no bias is the identity (x·1 + 0 is x in
// float32); it gives ONNX Runtime a convolution to fuse the HardSigmoid into, which it does
// in the blocked layout, and then the Mul's two inputs have the same layout and shape, which
// the blocked layout also keeps. The second form is HardSwish as older exporters (ONNX opset
// < 14) write it. Only sites whose x is the output of a Conv with a static 4-D float32 weight
// are rewritten: its first dimension gives C. The only difference in the result is the
// HardSigmoid's rounding (ONNX Runtime's fused activation against its HardSigmoid kernel):
// the logits move by about 2e-6 of the largest (TestHardSwishRewriteKeepsResults).
//
// In the shipped model the rewrite removes 25 of the 55 reorders (those left surround the
// squeeze-and-excitation blocks' broadcast Mul) and 18 of the 19 HardSigmoid nodes; the
// identity convolutions cost most of that back. It pays where the blocked layout is 16
// channels wide (BenchmarkHardSwishRewrite), so HardSwishRewritePays says where it is used by
// default.
//
// The model is edited in its protobuf encoding without decoding the rest: other fields,
// including initializers' data, are copied byte for byte.

// rewriteVersion is part of the model cache's key: change it whenever the rewrite's output
// changes, so that no cached graph of an older rewrite is loaded.
const rewriteVersion = 1

// ONNX protobuf field numbers (onnx.proto3).
const (
	modelGraph = 7

	graphNode        = 1
	graphInitializer = 5
	graphInput       = 11

	nodeInput     = 1
	nodeOutput    = 2
	nodeName      = 3
	nodeOpType    = 4
	nodeAttribute = 5
	nodeDomain    = 7

	attrName = 1
	attrF    = 2
	attrI    = 3
	attrInts = 8
	attrType = 20

	tensorDims     = 1
	tensorDataType = 2
	tensorName     = 8
	tensorRawData  = 9
	tensorLocation = 14

	valueInfoName = 1
)

// ONNX enum values (onnx.proto3).
const (
	attrTypeFloat = 1 // AttributeProto.AttributeType
	attrTypeInt   = 2
	attrTypeInts  = 7

	tensorFloat = 1 // TensorProto.DataType FLOAT
)

// errExternalData: the model keeps tensors in other files, which ONNX Runtime finds
// relative to the model's path; a model handed over as bytes has none.
var errExternalData = errors.New("model has external data")

type onnxNode struct {
	raw     []byte // the encoded NodeProto, re-emitted as is when not rewritten
	inputs  []string
	outputs []string
	name    string
	opType  string
	domain  string
	attrs   [][]byte // encoded AttributeProtos
}

// field is one top-level field of a message, kept encoded.
type field struct {
	num protowire.Number
	raw []byte // tag and value
	val []byte // the value of a length-delimited field
}

func fields(b []byte) ([]field, error) {
	var fs []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		f := field{num: num, raw: b[:n+m]}
		if typ == protowire.BytesType {
			f.val, _ = protowire.ConsumeBytes(b[n:])
		}
		fs = append(fs, f)
		b = b[n+m:]
	}
	return fs, nil
}

func parseNode(raw []byte) (onnxNode, error) {
	nd := onnxNode{raw: raw}
	fs, err := fields(raw)
	if err != nil {
		return nd, err
	}
	for _, f := range fs {
		switch f.num {
		case nodeInput:
			nd.inputs = append(nd.inputs, string(f.val))
		case nodeOutput:
			nd.outputs = append(nd.outputs, string(f.val))
		case nodeName:
			nd.name = string(f.val)
		case nodeOpType:
			nd.opType = string(f.val)
		case nodeDomain:
			nd.domain = string(f.val)
		case nodeAttribute:
			nd.attrs = append(nd.attrs, f.val)
		}
	}
	return nd, nil
}

// tensorInfo reads an initializer's name, dims, element type and whether its data is
// external.
func tensorInfo(raw []byte) (name string, dims []int64, dataType uint64, external bool, err error) {
	fs, err := fields(raw)
	if err != nil {
		return "", nil, 0, false, err
	}
	for _, f := range fs {
		switch f.num {
		case tensorName:
			name = string(f.val)
		case tensorDims:
			if f.val != nil { // packed
				for b := f.val; len(b) > 0; {
					v, n := protowire.ConsumeVarint(b)
					if n < 0 {
						return "", nil, 0, false, protowire.ParseError(n)
					}
					dims = append(dims, int64(v))
					b = b[n:]
				}
				continue
			}
			_, _, n := protowire.ConsumeTag(f.raw)
			v, _ := protowire.ConsumeVarint(f.raw[n:])
			dims = append(dims, int64(v))
		case tensorDataType:
			_, _, n := protowire.ConsumeTag(f.raw)
			dataType, _ = protowire.ConsumeVarint(f.raw[n:])
		case tensorLocation:
			_, _, n := protowire.ConsumeTag(f.raw)
			v, _ := protowire.ConsumeVarint(f.raw[n:])
			external = v == 1
		}
	}
	return name, dims, dataType, external, nil
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func intAttr(name string, v int64) []byte {
	b := appendString(nil, attrName, name)
	b = protowire.AppendTag(b, attrI, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(v))
	b = protowire.AppendTag(b, attrType, protowire.VarintType)
	return protowire.AppendVarint(b, attrTypeInt)
}

func intsAttr(name string, vs ...int64) []byte {
	b := appendString(nil, attrName, name)
	for _, v := range vs {
		b = protowire.AppendTag(b, attrInts, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v))
	}
	b = protowire.AppendTag(b, attrType, protowire.VarintType)
	return protowire.AppendVarint(b, attrTypeInts)
}

func floatAttr(name string, v float32) []byte {
	b := appendString(nil, attrName, name)
	b = protowire.AppendTag(b, attrF, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, math.Float32bits(v))
	b = protowire.AppendTag(b, attrType, protowire.VarintType)
	return protowire.AppendVarint(b, attrTypeFloat)
}

func encodeNode(nd onnxNode) []byte {
	var b []byte
	for _, s := range nd.inputs {
		b = appendString(b, nodeInput, s)
	}
	for _, s := range nd.outputs {
		b = appendString(b, nodeOutput, s)
	}
	if nd.name != "" {
		b = appendString(b, nodeName, nd.name)
	}
	b = appendString(b, nodeOpType, nd.opType)
	for _, a := range nd.attrs {
		b = appendMessage(b, nodeAttribute, a)
	}
	if nd.domain != "" {
		b = appendString(b, nodeDomain, nd.domain)
	}
	return b
}

// onesTensor is a float32 initializer of shape [c,1,1,1] filled with 1.
func onesTensor(name string, c int64) []byte {
	var b []byte
	for _, d := range []int64{c, 1, 1, 1} {
		b = protowire.AppendTag(b, tensorDims, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, tensorDataType, protowire.VarintType)
	b = protowire.AppendVarint(b, tensorFloat)
	b = appendString(b, tensorName, name)
	raw := make([]byte, 4*c)
	for i := range c {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(1))
	}
	b = protowire.AppendTag(b, tensorRawData, protowire.BytesType)
	return protowire.AppendBytes(b, raw)
}

func isONNXDomain(d string) bool { return d == "" || d == "ai.onnx" }

// rewriteHardSwish returns model with its HardSwish sites rewritten (see above) and how
// many it rewrote; with none, it returns model itself.
func rewriteHardSwish(model []byte) ([]byte, int, error) {
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
	g, err := readGraph(gfs)
	if err != nil {
		return nil, 0, err
	}
	out, sites := g.rewrite()
	if sites == 0 {
		return model, 0, nil
	}
	return encodeModel(model, mfs, gi, gfs, out, g.newInits), sites, nil
}

// graph is what the rewrite knows of a model's graph: its nodes in order, who produces and
// who consumes each tensor, the float32 initializers' dims, every name taken, and the
// initializers it adds.
type graph struct {
	nodes     []onnxNode
	weights   map[string][]int64 // float32 initializer name → dims
	names     map[string]bool    // every tensor and node name, for fresh ones
	producer  map[string]*onnxNode
	consumers map[string]int
	ones      map[int64]string // C → name of its [C,1,1,1] initializer
	newInits  [][]byte
}

// readGraph reads a graph's nodes, float32 initializers and names from its fields.
func readGraph(gfs []field) (*graph, error) {
	g := &graph{weights: map[string][]int64{}, names: map[string]bool{}, producer: map[string]*onnxNode{},
		consumers: map[string]int{}, ones: map[int64]string{}}
	for _, f := range gfs {
		switch f.num {
		case graphNode:
			nd, err := parseNode(f.val)
			if err != nil {
				return nil, fmt.Errorf("node: %w", err)
			}
			g.nodes = append(g.nodes, nd)
			g.names[nd.name] = true
			for _, o := range nd.outputs {
				g.names[o] = true
			}
		case graphInitializer:
			name, dims, dataType, external, err := tensorInfo(f.val)
			if err != nil {
				return nil, fmt.Errorf("initializer: %w", err)
			}
			if external {
				return nil, errExternalData
			}
			if dataType == tensorFloat { // the identity's weights are float32 too
				g.weights[name] = dims
			}
			g.names[name] = true
		case graphInput:
			if vfs, err := fields(f.val); err == nil {
				for _, v := range vfs {
					if v.num == valueInfoName {
						g.names[string(v.val)] = true
					}
				}
			}
		}
	}
	for i := range g.nodes {
		for _, o := range g.nodes[i].outputs {
			g.producer[o] = &g.nodes[i]
		}
		for _, in := range g.nodes[i].inputs {
			g.consumers[in]++
		}
	}
	return g, nil
}

// channels gives C when x is the output of a Conv with a static 4-D float32 weight.
func (g *graph) channels(x string) (int64, bool) {
	p := g.producer[x]
	if p == nil || p.opType != "Conv" || !isONNXDomain(p.domain) || len(p.inputs) < 2 || len(p.outputs) != 1 {
		return 0, false
	}
	dims, ok := g.weights[p.inputs[1]]
	if !ok || len(dims) != 4 || dims[0] < 1 {
		return 0, false
	}
	return dims[0], true
}

// fresh returns a name not taken yet, from base, and takes it.
func (g *graph) fresh(base string) string {
	s := base
	for i := 1; g.names[s]; i++ {
		s = base + "_" + strconv.Itoa(i)
	}
	g.names[s] = true
	return s
}

// identity is the identity convolution of x's C channels at site: its ones initializer is
// added once per C.
func (g *graph) identity(site *onnxNode, x string, c int64) onnxNode {
	w, ok := g.ones[c]
	if !ok {
		w = g.fresh("imagegate_ones_" + strconv.FormatInt(c, 10))
		g.ones[c] = w
		g.newInits = append(g.newInits, onesTensor(w, c))
	}
	return onnxNode{
		inputs: []string{x, w}, outputs: []string{g.fresh(x + "_imagegate_identity")},
		name: g.fresh(site.name + "_imagegate_identity"), opType: "Conv",
		attrs: [][]byte{intAttr("group", c), intsAttr("kernel_shape", 1, 1)},
	}
}

// rewrite returns the graph's nodes, encoded, in order, with the sites rewritten, and how many
// sites it rewrote.
func (g *graph) rewrite() (out [][]byte, sites int) {
	for i := range g.nodes {
		nd := &g.nodes[i]
		if !isONNXDomain(nd.domain) || len(nd.inputs) != 1 || len(nd.outputs) != 1 {
			out = append(out, nd.raw)
			continue
		}
		x := nd.inputs[0]
		c, ok := g.channels(x)
		switch {
		case ok && nd.opType == "HardSwish":
			id := g.identity(nd, x, c)
			hs := onnxNode{inputs: id.outputs, outputs: []string{g.fresh(x + "_imagegate_hardsigmoid")},
				name: g.fresh(nd.name + "_imagegate_hardsigmoid"), opType: "HardSigmoid",
				attrs: [][]byte{floatAttr("alpha", 1.0/6), floatAttr("beta", 0.5)}}
			mul := onnxNode{inputs: []string{x, hs.outputs[0]}, outputs: nd.outputs, name: nd.name, opType: "Mul"}
			out = append(out, encodeNode(id), encodeNode(hs), encodeNode(mul))
			sites++
		case ok && nd.opType == "HardSigmoid" && g.consumers[x] > 1:
			id := g.identity(nd, x, c)
			hs := *nd
			hs.inputs = id.outputs
			out = append(out, encodeNode(id), encodeNode(hs))
			sites++
		default:
			out = append(out, nd.raw)
		}
	}
	return out, sites
}

// encodeModel writes the model with its graph (field gi of mfs, whose fields are gfs) holding
// the nodes out and the new initializers: the graph's fields in their order, the nodes where
// the first one was, the new initializers after the others. It is written straight into the
// model, sized first: one allocation of the model's size (fresh memory is what costs at
// start-up, page by page).
func encodeModel(model []byte, mfs []field, gi int, gfs []field, out, newInits [][]byte) []byte {
	msgLen := func(num protowire.Number, n int) int { return protowire.SizeTag(num) + protowire.SizeBytes(n) }
	glen := 0
	for _, f := range gfs {
		if f.num != graphNode {
			glen += len(f.raw)
		}
	}
	for _, n := range out {
		glen += msgLen(graphNode, len(n))
	}
	for _, t := range newInits {
		glen += msgLen(graphInitializer, len(t))
	}
	m := make([]byte, 0, len(model)-len(mfs[gi].raw)+msgLen(modelGraph, glen))
	for i, f := range mfs {
		if i != gi {
			m = append(m, f.raw...)
			continue
		}
		m = protowire.AppendTag(m, modelGraph, protowire.BytesType)
		m = protowire.AppendVarint(m, uint64(glen))
		wroteNodes := false
		for _, f := range gfs {
			if f.num != graphNode {
				m = append(m, f.raw...)
				continue
			}
			if !wroteNodes {
				for _, n := range out {
					m = appendMessage(m, graphNode, n)
				}
				wroteNodes = true
			}
		}
		for _, t := range newInits {
			m = appendMessage(m, graphInitializer, t)
		}
	}
	if len(m) != cap(m) {
		panic(fmt.Sprintf("ort: rewritten model of %d bytes, sized %d", len(m), cap(m)))
	}
	return m
}
