package preprocess

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Shared test data lives outside the repository, next to it.
const (
	sharedDir  = "../../shared"
	imagesDir  = sharedDir + "/images"
	badDir     = imagesDir + "/bad"
	modelPath  = sharedDir + "/models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx"
	seedJSON   = sharedDir + "/seed/rime_5868.json"
	goldenDir  = "testdata/golden"
	goldenJSON = goldenDir + "/goldens.json"
)

// readShared reads a file under ../shared or skips the test when absent.
func readShared(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		tb.Skipf("shared test data %s is absent (expected next to the repository, ../shared): skipping", path)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// seedJPEG is the article's payload: the JPEG inside rime_5868.json.
func seedJPEG(tb testing.TB) []byte {
	tb.Helper()
	raw := readShared(tb, seedJSON)
	var v struct {
		Image string `json:"image"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		tb.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(v.Image)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

type top5Entry struct {
	Class int     `json:"class"`
	Prob  float64 `json:"prob"`
}

type goldenEntry struct {
	Name   string `json:"name"`
	Source string `json:"source"` // "shared" (../shared/images) or "testdata"
	Resize int    `json:"resize"`
	Crop   int    `json:"crop"`
	Golden string `json:"golden"`
	SHA256 string `json:"sha256"`
}

type goldenDoc struct {
	Pipeline    string        `json:"pipeline"`
	Torchvision string        `json:"torchvision"`
	Pillow      string        `json:"pillow"`
	Images      []goldenEntry `json:"images"`
}

func loadGoldens(tb testing.TB) *goldenDoc {
	tb.Helper()
	b, err := os.ReadFile(goldenJSON)
	if err != nil {
		tb.Fatal(err)
	}
	var d goldenDoc
	if err := json.Unmarshal(b, &d); err != nil {
		tb.Fatal(err)
	}
	return &d
}

// options are the Options equivalent to the entry's torchvision pipeline
// (uint8 output in HWC order like the golden).
func (e *goldenEntry) options() Options {
	if e.Resize == 0 {
		return Options{Width: e.Crop, Height: e.Crop, Mode: ModeStretch, Layout: NHWC}
	}
	return Options{Width: e.Crop, Height: e.Crop, Resize: e.Resize, Layout: NHWC}
}

// input returns the encoded image of a golden entry, or skips.
func (e *goldenEntry) input(tb testing.TB) []byte {
	tb.Helper()
	if e.Source == "shared" {
		return readShared(tb, filepath.Join(imagesDir, e.Name))
	}
	b, err := os.ReadFile(filepath.Join("testdata", e.Name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// pixels returns the golden uint8 HWC RGB array.
func (e *goldenEntry) pixels(tb testing.TB) []byte {
	tb.Helper()
	f, err := os.Open(filepath.Join(goldenDir, e.Golden))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		tb.Fatal(err)
	}
	if len(b) != 3*e.Crop*e.Crop {
		tb.Fatalf("%s: golden has %d bytes, want %d", e.Golden, len(b), 3*e.Crop*e.Crop)
	}
	return b
}

// diff returns mean and max |a-b| in 0..1 units.
func diff(a, b []byte) (mean, maxd float64) {
	var sum, mx int
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		sum += d
		mx = max(mx, d)
	}
	return float64(sum) / float64(len(a)) / 255, float64(mx) / 255
}

func mustNew(tb testing.TB, o Options) *Preprocessor {
	tb.Helper()
	p, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
