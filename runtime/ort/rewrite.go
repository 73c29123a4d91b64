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

	var nodes []onnxNode
	weights := map[string][]int64{} // float32 initializer name → dims
	names := map[string]bool{}      // every tensor and node name, for fresh ones
	for _, f := range gfs {
		switch f.num {
		case graphNode:
			nd, err := parseNode(f.val)
			if err != nil {
				return nil, 0, fmt.Errorf("node: %w", err)
			}
			nodes = append(nodes, nd)
			names[nd.name] = true
			for _, o := range nd.outputs {
				names[o] = true
			}
		case graphInitializer:
			name, dims, dataType, external, err := tensorInfo(f.val)
			if err != nil {
				return nil, 0, fmt.Errorf("initializer: %w", err)
			}
			if external {
				return nil, 0, errExternalData
			}
			if dataType == tensorFloat { // the identity's weights are float32 too
				weights[name] = dims
			}
			names[name] = true
		case graphInput:
			if vfs, err := fields(f.val); err == nil {
				for _, v := range vfs {
					if v.num == valueInfoName {
						names[string(v.val)] = true
					}
				}
			}
		}
	}
	producer := map[string]*onnxNode{}
	consumers := map[string]int{}
	for i := range nodes {
		for _, o := range nodes[i].outputs {
			producer[o] = &nodes[i]
		}
		for _, in := range nodes[i].inputs {
			consumers[in]++
		}
	}
	// channels gives C when x is the output of a Conv with a static 4-D float32 weight.
	channels := func(x string) (int64, bool) {
		p := producer[x]
		if p == nil || p.opType != "Conv" || !isONNXDomain(p.domain) || len(p.inputs) < 2 || len(p.outputs) != 1 {
			return 0, false
		}
		dims, ok := weights[p.inputs[1]]
		if !ok || len(dims) != 4 || dims[0] < 1 {
			return 0, false
		}
		return dims[0], true
	}
	fresh := func(base string) string {
		s := base
		for i := 1; names[s]; i++ {
			s = base + "_" + strconv.Itoa(i)
		}
		names[s] = true
		return s
	}
	ones := map[int64]string{} // C → name of its [C,1,1,1] initializer
	var newInits [][]byte
	identity := func(site *onnxNode, x string, c int64) onnxNode {
		w, ok := ones[c]
		if !ok {
			w = fresh("imagegate_ones_" + strconv.FormatInt(c, 10))
			ones[c] = w
			newInits = append(newInits, onesTensor(w, c))
		}
		return onnxNode{
			inputs: []string{x, w}, outputs: []string{fresh(x + "_imagegate_identity")},
			name: fresh(site.name + "_imagegate_identity"), opType: "Conv",
			attrs: [][]byte{intAttr("group", c), intsAttr("kernel_shape", 1, 1)},
		}
	}

	var out [][]byte // the graph's nodes, encoded, in order
	sites := 0
	for i := range nodes {
		nd := &nodes[i]
		if !isONNXDomain(nd.domain) || len(nd.inputs) != 1 || len(nd.outputs) != 1 {
			out = append(out, nd.raw)
			continue
		}
		x := nd.inputs[0]
		c, ok := channels(x)
		switch {
		case ok && nd.opType == "HardSwish":
			id := identity(nd, x, c)
			hs := onnxNode{inputs: id.outputs, outputs: []string{fresh(x + "_imagegate_hardsigmoid")},
				name: fresh(nd.name + "_imagegate_hardsigmoid"), opType: "HardSigmoid",
				attrs: [][]byte{floatAttr("alpha", 1.0/6), floatAttr("beta", 0.5)}}
			mul := onnxNode{inputs: []string{x, hs.outputs[0]}, outputs: nd.outputs, name: nd.name, opType: "Mul"}
			out = append(out, encodeNode(id), encodeNode(hs), encodeNode(mul))
			sites++
		case ok && nd.opType == "HardSigmoid" && consumers[x] > 1:
			id := identity(nd, x, c)
			hs := *nd
			hs.inputs = id.outputs
			out = append(out, encodeNode(id), encodeNode(hs))
			sites++
		default:
			out = append(out, nd.raw)
		}
	}
	if sites == 0 {
		return model, 0, nil
	}

	// The graph: its fields in their order, the nodes where the first one was, the new
	// initializers after the others. It is written straight into the model, sized first: one
	// allocation of the model's size (fresh memory is what costs at start-up, page by page).
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
	return m, sites, nil
}
