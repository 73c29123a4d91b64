package ort

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/imagegate/imagegate/internal/onnxtest"
)

// scanModel reads what ONNX Runtime reports (Inspect, a temporary session; Describe's own
// temporary session) from every model at hand: the shipped one, the shared MobileNetV2 (int8, ONNX zoo export), the integration
// tests' models, and small ones written here, among them an IR 3 model that lists its
// initializer among the graph's inputs (ONNX Runtime leaves it out) and one whose output has
// no fixed class count (ONNX Runtime's shape inference may fix it: scanModel says incomplete).
func TestScanModelMatchesONNXRuntime(t *testing.T) {
	initORT(t)
	paths := []string{defaultModel}
	if m, _ := filepath.Glob("../../cmd/gateway/testdata/*.onnx"); len(m) > 0 {
		paths = append(paths, m...)
	}
	if _, err := os.Stat("../../../shared/models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx"); err == nil {
		paths = append(paths, "../../../shared/models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx")
	} else {
		t.Log("../shared is absent: the shared MobileNetV2 is not compared")
	}
	dir := t.TempDir()
	twoInputs := onnxtest.Means("float32", "NCHW", int64(8), int64(8), false)
	twoInputs.Inputs = append(twoInputs.Inputs, onnxtest.Tensor{Name: "mask", Type: "uint8", Shape: []any{"N", int64(1)}})
	for name, m := range map[string][]byte{
		"ir3-initializer-input.onnx": tinyModel(3, true, 4),
		"ir8.onnx":                   tinyModel(8, false, 4),
		"dynamic-classes.onnx":       tinyModel(8, false, 0),
		"nhwc-uint8-any-size.onnx":   onnxtest.Means("uint8", "NHWC", "H", "W", false).Bytes(),
		"keepdims.onnx":              onnxtest.Means("float32", "NCHW", int64(224), int64(224), true).Bytes(),
		"two-inputs.onnx":            twoInputs.Bytes(),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, m, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	for _, p := range paths {
		s, err := scanModel(p, true)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		// Seeking past the weights instead of hashing them reads the same, hash aside.
		if u, err := scanModel(p, false); err != nil {
			t.Errorf("%s, seeking: %v", p, err)
		} else if u.sum != ([sha256.Size]byte{}) || u.size != s.size || !reflect.DeepEqual(u.inputs, s.inputs) ||
			!reflect.DeepEqual(u.outputs, s.outputs) || u.complete != s.complete || u.externalData != s.externalData {
			t.Errorf("%s: seeking read %+v, hashing %+v", p, u, s)
		}
		in, out, err := Inspect(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		data, _ := os.ReadFile(p)
		if s.sum != sha256.Sum256(data) || s.size != int64(len(data)) {
			t.Errorf("%s: hash or size differs from the file's", p)
		}
		if s.externalData {
			t.Errorf("%s: external data reported", p)
		}
		t.Logf("%s: %v %v complete %v", filepath.Base(p), s.inputs, s.outputs, s.complete)
		if !reflect.DeepEqual(s.inputs, in) {
			t.Errorf("%s: inputs %v, ONNX Runtime says %v", p, s.inputs, in)
		}
		if filepath.Base(p) == "dynamic-classes.onnx" {
			if s.complete {
				t.Errorf("%s: an output of [N, ?] reported complete", p)
			}
			continue
		}
		if !s.complete {
			t.Errorf("%s: reported incomplete", p)
		}
		if !reflect.DeepEqual(s.outputs, out) {
			t.Errorf("%s: outputs %v, ONNX Runtime says %v", p, s.outputs, out)
		}
		// Describe, which reads them so, says what its temporary session says.
		d, err := Describe(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		ds, err := describeSession(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !reflect.DeepEqual(d.Inputs, ds.Inputs) || !reflect.DeepEqual(d.Outputs, ds.Outputs) {
			t.Errorf("%s: Describe %v %v, its session %v %v", p, d.Inputs, d.Outputs, ds.Inputs, ds.Outputs)
		}
	}
}

// A truncated or garbled file is an error, never a partial answer.
func TestScanModelRefusesDamage(t *testing.T) {
	data, err := os.ReadFile(defaultModel)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"truncated": data[:len(data)/2],
		"one short": data[:len(data)-1],
		"garbage":   {0xff, 0xff, 0xff},
	} {
		p := filepath.Join(dir, "m.onnx")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, hash := range []bool{true, false} {
			if _, err := scanModel(p, hash); err == nil {
				t.Errorf("%s (hash %v): no error", name, hash)
			}
		}
	}
}

// Tensors whose data is in another file are noticed wherever ONNX lets them be: an
// initializer, a Constant node's attribute, a subgraph's initializer.
func TestScanModelExternalData(t *testing.T) {
	external := func(name string) []byte {
		b := appendString(nil, tensorName, name)
		b = protowire.AppendTag(b, tensorLocation, protowire.VarintType)
		return protowire.AppendVarint(b, tensorExternal)
	}
	attr := func(num protowire.Number, v []byte) []byte {
		return appendMessage(appendString(nil, attrName, "value"), num, v)
	}
	dir := t.TempDir()
	for name, g := range map[string][]byte{
		"initializer": appendMessage(nil, graphInitializer, external("w")),
		"constant": appendMessage(nil, graphNode, encodeNode(onnxNode{outputs: []string{"c"}, opType: "Constant",
			attrs: [][]byte{attr(attrT, external("c"))}})),
		"subgraph": appendMessage(nil, graphNode, encodeNode(onnxNode{inputs: []string{"b"}, outputs: []string{"y"}, opType: "If",
			attrs: [][]byte{attr(attrG, appendMessage(nil, graphInitializer, external("w")))}})),
	} {
		p := filepath.Join(dir, name+".onnx")
		if err := os.WriteFile(p, appendMessage(nil, modelGraph, g), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, hash := range []bool{true, false} {
			s, err := scanModel(p, hash)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !s.externalData {
				t.Errorf("%s: external data not noticed", name)
			}
		}
	}
}

// tinyModel is input [N,4] → MatMul(w [4,classes]) → output [N,classes] (classes 0: a
// symbolic class dimension, 4 columns in fact), at IR version ir; initInput lists w among the
// graph's inputs too, as IR 3 required.
func tinyModel(ir int, initInput bool, classes int64) []byte {
	valueInfo := func(name string, dims ...any) []byte {
		var shape []byte
		for _, d := range dims {
			var dim []byte
			switch d := d.(type) {
			case string:
				dim = appendString(nil, 2, d)
			case int64:
				dim = protowire.AppendTag(nil, dimValue, protowire.VarintType)
				dim = protowire.AppendVarint(dim, uint64(d))
			}
			shape = appendMessage(shape, shapeDim, dim)
		}
		tensor := protowire.AppendTag(nil, tensorElem, protowire.VarintType)
		tensor = protowire.AppendVarint(tensor, tensorFloat)
		tensor = appendMessage(tensor, tensorShape, shape)
		return appendMessage(appendString(nil, valueInfoName, name), valueInfoType, appendMessage(nil, typeTensor, tensor))
	}
	var w []byte
	for _, d := range []int64{4, 4} {
		w = protowire.AppendTag(w, tensorDims, protowire.VarintType)
		w = protowire.AppendVarint(w, uint64(d))
	}
	w = protowire.AppendTag(w, tensorDataType, protowire.VarintType)
	w = protowire.AppendVarint(w, tensorFloat)
	w = appendString(w, tensorName, "w")
	w = protowire.AppendTag(w, tensorRawData, protowire.BytesType)
	w = protowire.AppendBytes(w, make([]byte, 4*4*4))
	var g []byte
	g = appendMessage(g, graphNode, encodeNode(onnxNode{inputs: []string{"input", "w"}, outputs: []string{"output"}, name: "mm", opType: "MatMul"}))
	g = appendString(g, 2, "tiny")
	g = appendMessage(g, graphInitializer, w)
	g = appendMessage(g, graphInput, valueInfo("input", "N", int64(4)))
	if initInput {
		g = appendMessage(g, graphInput, valueInfo("w", int64(4), int64(4)))
	}
	if classes > 0 {
		g = appendMessage(g, graphOutput, valueInfo("output", "N", classes))
	} else {
		g = appendMessage(g, graphOutput, valueInfo("output", "N", "C"))
	}
	opset := appendString(nil, 1, "")
	opset = protowire.AppendTag(opset, 2, protowire.VarintType)
	opset = protowire.AppendVarint(opset, 13)
	m := protowire.AppendTag(nil, 1, protowire.VarintType) // ir_version
	m = protowire.AppendVarint(m, uint64(ir))
	m = appendMessage(m, 8, opset)
	return appendMessage(m, modelGraph, g)
}
