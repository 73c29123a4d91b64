package ort

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	onnx "github.com/yalue/onnxruntime_go"

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
	// The metadata as ONNX Runtime reads it.
	md, err := onnx.GetModelMetadata(path)
	if err != nil {
		t.Fatal(err)
	}
	defer md.Destroy()
	keys, _ := md.GetCustomMetadataMapKeys()
	producer, _ := md.GetProducerName()
	if len(keys) != len(info.Metadata) || producer != info.Producer {
		t.Fatalf("ONNX Runtime reads the keys %v and producer %q", keys, producer)
	}
	for _, k := range keys {
		if v, _, _ := md.LookupCustomMetadataMap(k); v != info.Metadata[k] {
			t.Errorf("metadata %s: ONNX Runtime reads %q, Describe %q", k, v, info.Metadata[k])
		}
	}
	// A truncated file is an error, not a silent empty map.
	whole, _ := os.ReadFile(path)
	cut := filepath.Join(t.TempDir(), "cut.onnx")
	os.WriteFile(cut, whole[:len(whole)-3], 0o644)
	if _, _, err := readMetadata(cut); err == nil {
		t.Error("the metadata of a truncated model was read")
	}
	if _, err := Describe(filepath.Join(t.TempDir(), "missing.onnx")); err == nil {
		t.Fatal("Describe of a missing file")
	}
}

// BenchmarkDescribe: what reading a model's inputs, outputs and metadata adds to its load,
// against InputType (the full-optimization temporary session the load used before).
func BenchmarkDescribe(b *testing.B) {
	initORT(b)
	b.Run("Describe", func(b *testing.B) {
		for b.Loop() {
			if _, err := Describe(defaultModel); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("InputType", func(b *testing.B) {
		for b.Loop() {
			if _, err := InputType(defaultModel, "input"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
