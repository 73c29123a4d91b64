package openapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite openapi.json from docs/openapi.yaml")

const source = "../../docs/openapi.yaml"

// generate converts the YAML source to the JSON served (anchors resolved, keys sorted).
func generate(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatalf("%s: %v (the document must be JSON too: string keys only)", source, err)
	}
	return b.Bytes()
}

// TestGenerated: openapi.json is docs/openapi.yaml as JSON.
func TestGenerated(t *testing.T) {
	want := generate(t)
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(JSON, want) {
		t.Fatal("openapi.json is not docs/openapi.yaml: run `go generate ./api/openapi`")
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(JSON, &doc); err != nil || doc.OpenAPI != "3.1.0" || len(doc.Paths) < 20 {
		t.Fatalf("openapi %q, %d paths: %v", doc.OpenAPI, len(doc.Paths), err)
	}
}
