package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/imagegate/imagegate/loadtest/oip"
)

// Round trips of the project's Open Inference Protocol client (loadtest/oip) against the real
// gateway serving the shared ImageNet classifier: every combination of JSON and binary
// inputs and outputs, compressed bodies, classification, the tensor interface, metadata and
// readiness. References are computed here, on this machine, from the same server: the
// article API's softmax scores of the same photos, and the scores of the same pixels sent as
// an image and as a tensor.

// sharedPhotos reads photos from ../shared/images.
func sharedPhotos(t *testing.T, names ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(sharedDir(t), "images", n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// articleScores returns an image's softmax scores from the article API (?top_k=all).
func articleScores(t *testing.T, g *gateway, img []byte) []float64 {
	t.Helper()
	a := g.do("POST", "/models/mobilenetv2/predict?top_k=1000", "application/octet-stream", img)
	if a.status != 200 {
		t.Fatalf("article API: %d %s", a.status, a.body)
	}
	p := decodePrediction(t, a)
	s := make([]float64, 1000)
	for _, e := range p.TopK {
		s[e.Index] = e.Score
	}
	return s
}

func softmax64(v []float32) []float64 {
	mx := math.Inf(-1)
	for _, x := range v {
		mx = math.Max(mx, float64(x))
	}
	out := make([]float64, len(v))
	sum := 0.0
	for i, x := range v {
		out[i] = math.Exp(float64(x) - mx)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func argmax[F float32 | float64](v []F) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// maxDiff is the largest absolute difference between two score vectors.
func maxDiff[F, G float32 | float64](a []F, b []G) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func imagenetLabels(t *testing.T) []string {
	var labels []string
	if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(sharedDir(t), "models", "mobilenetv2-12-int8", "imagenet-simple-labels.json"))), &labels); err != nil {
		t.Fatal(err)
	}
	return labels
}

func TestV2ClientRoundTrip(t *testing.T) {
	g := startGateway(t, "models:\n"+imagenetModelYAML(t, "{max_batch_size: 4, max_queue_delay: 2ms}"))
	ctx := t.Context()
	c := &oip.Client{BaseURL: g.url}
	labels := imagenetLabels(t)

	for name, f := range map[string]func() (bool, error){
		"live":          func() (bool, error) { return c.Live(ctx) },
		"ready":         func() (bool, error) { return c.Ready(ctx) },
		"model ready":   func() (bool, error) { return c.ModelReady(ctx, "mobilenetv2", "") },
		"version ready": func() (bool, error) { return c.ModelReady(ctx, "mobilenetv2", "1") },
		"tensor ready":  func() (bool, error) { return c.ModelReady(ctx, "mobilenetv2.tensor", "1") },
	} {
		if ok, err := f(); !ok || err != nil {
			t.Fatalf("%s: %v %v", name, ok, err)
		}
	}
	if ok, err := c.ModelReady(ctx, "nope", ""); ok || err != nil {
		t.Fatalf("an unknown model is ready: %v %v", ok, err)
	}
	sm, err := c.ServerMetadata(ctx)
	if err != nil || sm.Name == "" || sm.Version == "" || !slices.Contains(sm.Extensions, "binary_tensor_data") || !slices.Contains(sm.Extensions, "classification") {
		t.Fatalf("server metadata %+v %v", sm, err)
	}
	md, err := c.ModelMetadata(ctx, "mobilenetv2", "")
	if err != nil || md.Name != "mobilenetv2" || len(md.Inputs) != 1 || md.Inputs[0].Datatype != oip.BYTES ||
		!slices.Equal(md.Inputs[0].Shape, []int64{-1}) || len(md.Outputs) != 1 || !slices.Equal(md.Outputs[0].Shape, []int64{-1, 1000}) {
		t.Fatalf("model metadata %+v %v", md, err)
	}
	tm, err := c.ModelMetadata(ctx, "mobilenetv2.tensor", "1")
	if err != nil || tm.Name != "mobilenetv2.tensor" || len(tm.Inputs) != 1 || tm.Inputs[0].Datatype != oip.FP32 ||
		!slices.Equal(tm.Inputs[0].Shape, []int64{-1, 3, 224, 224}) {
		t.Fatalf("tensor model metadata %+v %v", tm, err)
	}
	input, output := md.Inputs[0].Name, md.Outputs[0].Name

	photos := sharedPhotos(t, "skimage_coffee.png", "skimage_chelsea_cat.png", "skimage_rocket.jpg")
	refs := make([][]float64, len(photos))
	for i, p := range photos {
		refs[i] = articleScores(t, g, p)
	}
	if argmax(refs[0]) != 967 {
		t.Fatalf("coffee's top-1 on the article API is %d, want 967 (espresso)", argmax(refs[0]))
	}

	// Every combination: input JSON (base64) or binary, outputs JSON or binary (request-wide
	// or per output), body plain, gzip or deflate; the scores, and in a second request of the
	// same samples a top-3 classification (an output is requested once, as Triton requires).
	yes, no := true, false
	var first []float32 // the photos' scores from the first combination
	for _, binIn := range []bool{false, true} {
		for _, outMode := range []string{"json", "binary_data_output", "per-output"} {
			for _, comp := range []string{"", "gzip", "deflate"} {
				name := fmt.Sprintf("binary input %v, outputs %s, compression %q", binIn, outMode, comp)
				req := &oip.Request{ID: name, Inputs: []oip.Input{oip.ImageInput(input, binIn, photos...)},
					Outputs: []oip.Output{{Name: output}}}
				creq := &oip.Request{ID: name + ", classes", Inputs: req.Inputs,
					Outputs: []oip.Output{{Name: output, Classification: 3}}}
				switch outMode {
				case "binary_data_output":
					req.BinaryOutput, creq.BinaryOutput = true, true
				case "per-output":
					// Overridden per output: scores as JSON, classes binary.
					req.BinaryOutput, creq.BinaryOutput = true, true
					req.Outputs[0].Binary, creq.Outputs[0].Binary = &no, &yes
				}
				c := &oip.Client{BaseURL: g.url, Compression: comp}
				r, err := c.Infer(ctx, "mobilenetv2", "", req)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				cr, err := c.Infer(ctx, "mobilenetv2", "", creq)
				if err != nil {
					t.Fatalf("%s, classes: %v", name, err)
				}
				for _, a := range []*oip.Response{r, cr} {
					if a.ModelName != "mobilenetv2" || a.ModelVersion != "1" || len(a.Outputs) != 1 {
						t.Fatalf("%s: answer %+v", name, a)
					}
				}
				if r.ID != name || cr.ID != creq.ID {
					t.Fatalf("%s: ids %q, %q", name, r.ID, cr.ID)
				}
				scores, classes := &r.Outputs[0], &cr.Outputs[0]
				wantBin := outMode == "binary_data_output"
				if scores.Binary != wantBin || classes.Binary != (outMode != "json") {
					t.Fatalf("%s: scores binary %v, classes binary %v", name, scores.Binary, classes.Binary)
				}
				if scores.Datatype != oip.FP32 || !slices.Equal(scores.Shape, []int64{3, 1000}) {
					t.Fatalf("%s: scores %s %v", name, scores.Datatype, scores.Shape)
				}
				rows, err := classes.Classes()
				if err != nil || !slices.Equal(classes.Shape, []int64{3, 3}) {
					t.Fatalf("%s: classes %v %v", name, classes.Shape, err)
				}
				for i := range photos {
					row := scores.Row(i)
					if d := maxDiff(softmax64(row), refs[i]); d > 1e-4 {
						t.Fatalf("%s: photo %d: softmax of the v2 scores differs from the article API's by %g", name, i, d)
					}
					if first == nil {
						first = slices.Clone(scores.FP32)
					}
					// The classes are the 3 best of the same scores (those of the other
					// request, to rounding), best first, with their raw values as Triton writes
					// them (%f) and their labels.
					order := make([]int, 1000)
					for j := range order {
						order[j] = j
					}
					slices.SortStableFunc(order, func(a, b int) int {
						switch {
						case row[a] > row[b]:
							return -1
						case row[a] < row[b]:
							return 1
						}
						return 0
					})
					for j, cl := range rows[i] {
						want := strconv.FormatFloat(float64(row[order[j]]), 'f', 6, 32)
						if cl.Index != order[j] || cl.Label != labels[cl.Index] || math.Abs(cl.Score-float64(row[order[j]])) > 1e-4 {
							t.Fatalf("%s: photo %d class %d is %+v, want %s:%d:%s", name, i, j, cl, want, order[j], labels[order[j]])
						}
					}
				}
				if rows[0][0].Index != 967 || rows[0][0].Label != "espresso" {
					t.Fatalf("%s: coffee's best class %+v", name, rows[0][0])
				}
				if d := maxDiff(scores.FP32, first); d > 1e-3 {
					t.Fatalf("%s: scores differ from the first combination's by %g", name, d)
				}
			}
		}
	}

	// The tensor interface: the same pixels as an image and as the tensor the preprocessing
	// makes of them. A 256x256 image of one colour needs no resize; its center crop is that
	// colour, (v/255 - mean)/std per channel.
	rgb := [3]uint8{200, 120, 40}
	img := image.NewNRGBA(image.Rect(0, 0, 256, 256))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = rgb[0], rgb[1], rgb[2], 255
	}
	var pngBuf bytes.Buffer
	png.Encode(&pngBuf, img)
	mean, std := [3]float64{0.485, 0.456, 0.406}, [3]float64{0.229, 0.224, 0.225}
	tensor := make([]float32, 3*224*224)
	for ch := range 3 {
		v := float32((float64(rgb[ch])/255 - mean[ch]) / std[ch])
		for i := range 224 * 224 {
			tensor[ch*224*224+i] = v
		}
	}
	fromImage, err := c.Infer(ctx, "mobilenetv2", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, pngBuf.Bytes())}})
	if err != nil {
		t.Fatal(err)
	}
	want := fromImage.Outputs[0].FP32
	for _, tc := range []struct {
		model  string
		binary bool
	}{{"mobilenetv2.tensor", true}, {"mobilenetv2.tensor", false}, {"mobilenetv2", true}} {
		r, err := c.Infer(ctx, tc.model, "1", &oip.Request{Inputs: []oip.Input{{Name: tm.Inputs[0].Name, Datatype: oip.FP32,
			Shape: []int64{1, 3, 224, 224}, FP32: tensor, Binary: tc.binary}}})
		if err != nil {
			t.Fatalf("%s, binary %v: %v", tc.model, tc.binary, err)
		}
		if r.ModelName != tc.model || len(r.Outputs) != 1 {
			t.Fatalf("%s: %+v", tc.model, r)
		}
		got := r.Outputs[0].FP32
		if d := maxDiff(got, want); d > 1e-3 || argmax(got) != argmax(want) {
			t.Fatalf("%s, binary %v: the tensor's scores differ from the image's by %g (top-1 %d vs %d)", tc.model, tc.binary, d, argmax(got), argmax(want))
		}
		t.Logf("%s, binary %v: tensor vs image scores differ by at most %g", tc.model, tc.binary, maxDiff(got, want))
	}

	// Errors come back as *oip.Error with the server's message.
	var e *oip.Error
	if _, err := c.Infer(ctx, "mobilenetv2", "7", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, false, photos[0])}}); !errors.As(err, &e) || e.StatusCode != 404 || !strings.Contains(e.Message, "version") {
		t.Fatalf("unknown version: %v", err)
	}
	if _, err := c.Infer(ctx, "mobilenetv2.tensor", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])}}); !errors.As(err, &e) || e.StatusCode != 400 {
		t.Fatalf("an image to the tensor interface: %v", err)
	}
	if _, err := c.ModelMetadata(ctx, "nope", ""); !errors.As(err, &e) || e.StatusCode != 404 || e.Message == "" {
		t.Fatalf("unknown model metadata: %v", err)
	}
}
