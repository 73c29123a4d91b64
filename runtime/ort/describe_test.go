package ort

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/imagegate/imagegate/internal/onnxtest"
)

func TestDescribe(t *testing.T) {
	initORT(t)
	info, err := Describe(defaultModel)
	if err != nil {
		t.Fatal(err)
	}
	in, out, err := Inspect(defaultModel)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(info.Inputs, in) || !reflect.DeepEqual(info.Outputs, out) || len(info.Metadata) != 0 {
		t.Fatalf("Describe %+v, Inspect %v %v", info, in, out)
	}

	g := onnxtest.Means("uint8", "NHWC", "H", "W", false)
	g.Metadata = map[string]string{"labels": `["r","g","b"]`, "Image.NominalPixelRange": "NominalRange_0_255"}
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(path, g.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err = Describe(path)
	if err != nil {
		t.Fatal(err)
	}
	want := ModelInfo{
		Inputs:   []TensorInfo{{Name: "input", Type: "uint8", Shape: []int64{-1, -1, -1, 3}}},
		Outputs:  []TensorInfo{{Name: "output", Type: "float32", Shape: []int64{-1, 3}}},
		Metadata: g.Metadata, Producer: "imagegate-tests",
	}
	if !reflect.DeepEqual(info, want) {
		t.Fatalf("Describe:\n got %+v\nwant %+v", info, want)
	}
	if _, err := Describe(filepath.Join(t.TempDir(), "missing.onnx")); err == nil {
		t.Fatal("Describe of a missing file")
	}
}
