package main_test

// The embed and detect tasks through the real binary, the real ONNX Runtime and real protocol
// clients: a detector that finds a red rectangle (internal/onnxtest.RedBox, every output layout)
// on photos of three aspect ratios under the 8 EXIF orientations, over /predict/, the Open
// Inference Protocol over HTTP (JSON and binary) and gRPC; the real face detector against its
// authors' pipeline computed here; MobileNetV2's pooled features against PIL-exact
// preprocessing. References are computed on this machine (internal/pilref), never stored.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/imagegate/imagegate/internal/onnxtest"
	"github.com/imagegate/imagegate/internal/pilref"
	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/postprocess"
)

// detection is one entry of /predict/'s detections.
type detection struct {
	Label string     `json:"label"`
	Score float64    `json:"score"`
	Box   [4]float64 `json:"box"`
}

// predictTask posts an image to a model's /predict and decodes its detections or embedding.
func (g *gateway) predictTask(model, query string, img []byte) (dets []detection, emb []float32, a answer) {
	g.t.Helper()
	a = g.do("POST", "/models/"+model+"/predict"+query, "application/octet-stream", img)
	if a.status != 200 {
		return nil, nil, a
	}
	var v struct {
		Detections *[]detection `json:"detections"`
		Embedding  *[]float32   `json:"embedding"`
	}
	if err := json.Unmarshal(a.body, &v); err != nil || v.Detections == nil && v.Embedding == nil {
		g.t.Fatalf("%s: %s is neither detections nor an embedding (%v)", model, a.body, err)
	}
	if v.Detections != nil {
		dets = *v.Detections
	}
	if v.Embedding != nil {
		emb = *v.Embedding
	}
	return dets, emb, a
}

// inferHTTP sends an Open Inference Protocol request over HTTP with the loadtest's client.
func (g *gateway) inferHTTP(model string, req *oip.Request) (*oip.Response, error) {
	c := &oip.Client{BaseURL: g.url, HTTP: client}
	return c.Infer(g.t.Context(), model, "", req)
}

// redCase is a photo with a red rectangle drawn in it, stored under each EXIF orientation.
type redCase struct {
	name  string
	rect  image.Rectangle
	w, h  int       // as displayed
	files [8][]byte // orientation o's at o-1
}

func redCases(t *testing.T) []redCase {
	t.Helper()
	shared := sharedDir(t)
	cases := []struct {
		name       string
		transposed bool
		rect       image.Rectangle
	}{
		{"skimage_astronaut.png", false, image.Rect(150, 200, 260, 330)}, // 512x512
		{"opencv_messi5.jpg", false, image.Rect(300, 40, 420, 110)},      // 548x342
		{"skimage_rocket.jpg", true, image.Rect(60, 350, 200, 600)},      // 427x640 turned: 640x427... portrait after transposing
	}
	var out []redCase
	for _, c := range cases {
		f, err := os.Open(filepath.Join(shared, "images", c.name))
		if err != nil {
			t.Skip("shared photo absent: ", err)
		}
		src, _, err := image.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		img := onnxtest.RedPhoto(src, c.transposed, c.rect)
		rc := redCase{name: c.name, rect: c.rect, w: img.Bounds().Dx(), h: img.Bounds().Dy()}
		for o := 1; o <= 8; o++ {
			if rc.files[o-1], err = onnxtest.OrientJPEG(img, o); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, rc)
	}
	return out
}

// redModel is a RedBox model served by the gateway.
type redModel struct {
	name, layout string
	w, h         int
}

// redModelsYAML writes the RedBox models to dir and returns their configuration: each a
// letterboxed detector with raw pixels (its finder compares 0..255 values) and two labels;
// the task, the output names and their layout are the model's to tell.
func redModelsYAML(t *testing.T, dir string, models []redModel) string {
	t.Helper()
	labels := filepath.Join(dir, "labels.txt")
	if err := os.WriteFile(labels, []byte("other\nred\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, m := range models {
		path := writeModel(t, dir, m.name+".onnx", onnxtest.RedBox(int64(m.h), int64(m.w), m.layout))
		// Three anchors of six values could be an NMS model's rows: a YOLO model says so.
		detect := ""
		if strings.HasPrefix(m.layout, "yolo") {
			detect = "\n    detect: {decoder: yolo}"
		}
		fmt.Fprintf(&b, `  - name: %s
    path: %s
    labels: %s%s
    preprocess: {mode: letterbox, scale: raw}
    batching: {max_batch_size: 8, max_queue_delay: 2ms}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, m.name, path, labels, detect)
	}
	return b.String()
}

// checkRedBox checks one image's detections: the rectangle drawn, class red, score 0.9, within
// one model-input pixel scaled back and a pixel for the JPEG's chroma.
func checkRedBox(t *testing.T, where string, m redModel, c redCase, box [4]float64, label string, score float64) {
	t.Helper()
	scale := min(float64(m.w)/float64(c.w), float64(m.h)/float64(c.h)) // the letterbox's
	tol := 1/scale + 1
	want := [4]float64{float64(c.rect.Min.X), float64(c.rect.Min.Y), float64(c.rect.Max.X), float64(c.rect.Max.Y)}
	for k := range 4 {
		if math.Abs(box[k]-want[k]) > tol {
			t.Errorf("%s: box %v, drawn %v (tolerance %.2f)", where, box, want, tol)
			return
		}
	}
	if label != "red" || math.Abs(score-0.9) > 1e-6 {
		t.Errorf("%s: %s %.7f, want red 0.9", where, label, score)
	}
}

// TestDetectRedBoxRoundTrip: every RedBox layout (YOLO with and without objectness, in both
// layouts; boxes + scores; NMS built in: separate outputs with a count, packed rows, packed
// rows of a dynamic count), letterboxed at 320x320, and YOLO at two other aspect ratios: the
// rectangle drawn into three photos, stored under each EXIF orientation, comes back where it
// was drawn, over /predict/ (one image a request), and over the Open Inference Protocol with
// parameter detections as one request of the 8 orientations, over HTTP (binary and JSON) and
// gRPC; the raw outputs by default.
func TestDetectRedBoxRoundTrip(t *testing.T) {
	cases := redCases(t)
	var models []redModel
	for _, l := range []string{onnxtest.RedYOLO, onnxtest.RedYOLOT, onnxtest.RedYOLOObj, onnxtest.RedYOLOObjT, onnxtest.RedBoxesScores,
		onnxtest.RedNMS, onnxtest.RedNMSPacked, onnxtest.RedNMSPackedDyn} {
		models = append(models, redModel{"red_" + l, l, 320, 320})
	}
	models = append(models, redModel{"red_wide", onnxtest.RedYOLO, 256, 192}, redModel{"red_tall", onnxtest.RedYOLOT, 160, 288})
	g := startGateway(t, "models:\n"+redModelsYAML(t, t.TempDir(), models))
	gc := g.grpcClient(t)
	for _, m := range models {
		for _, c := range cases {
			for o := 1; o <= 8; o++ {
				dets, _, a := g.predictTask(m.name, "", c.files[o-1])
				where := fmt.Sprintf("%s %s orientation %d (predict)", m.name, c.name, o)
				if a.status != 200 || len(dets) != 1 {
					t.Fatalf("%s: %d %s", where, a.status, a.body)
				}
				checkRedBox(t, where, m, c, dets[0].Box, dets[0].Label, dets[0].Score)
			}
			// The 8 orientations in one request, post-processed: HTTP binary, HTTP JSON, gRPC.
			imgs := c.files[:]
			for _, how := range []string{"http binary", "http json", "grpc"} {
				req := &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", how == "http binary", imgs...)},
					BinaryOutput: how == "http binary", Parameters: map[string]any{"detections": true}}
				var res *oip.Response
				var err error
				if how == "grpc" {
					res, err = gc.Infer(t.Context(), m.name, "", req)
				} else {
					res, err = g.inferHTTP(m.name, req)
				}
				where := fmt.Sprintf("%s %s (%s, detections)", m.name, c.name, how)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				checkDetectionTensors(t, where, m, c, res)
			}
		}
		// The raw outputs by default: the model's own, batched.
		res, err := gc.Infer(t.Context(), m.name, "", &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", true, cases[0].files[0], cases[0].files[1])}})
		if err != nil {
			t.Fatalf("%s raw: %v", m.name, err)
		}
		md, err := gc.ModelMetadata(t.Context(), m.name, "")
		if err != nil {
			t.Fatal(err)
		}
		if md.GetProperties()["task"] != "detect" || len(res.Outputs) != len(md.GetOutputs()) {
			t.Fatalf("%s: metadata %v, raw answer's outputs %d", m.name, md, len(res.Outputs))
		}
		for i, o := range md.GetOutputs() {
			r := res.Outputs[i]
			if r.Name != o.GetName() || r.Datatype != o.GetDatatype() || r.Shape[0] != 2 || len(r.Shape) != len(o.GetShape()) {
				t.Errorf("%s: raw output %s %s %v, metadata %v", m.name, r.Name, r.Datatype, r.Shape, o)
			}
		}
	}
}

// checkDetectionTensors checks an answer's five detection tensors for the 8 orientations of c.
func checkDetectionTensors(t *testing.T, where string, m redModel, c redCase, res *oip.Response) {
	t.Helper()
	boxes, scores, classes, labels, num := res.Output("detection_boxes"), res.Output("detection_scores"),
		res.Output("detection_classes"), res.Output("detection_labels"), res.Output("num_detections")
	if boxes == nil || scores == nil || classes == nil || labels == nil || num == nil || len(res.Outputs) != 5 {
		t.Fatalf("%s: outputs %v", where, res.Outputs)
	}
	if !slices.Equal(boxes.Shape, []int64{8, 1, 4}) || !slices.Equal(scores.Shape, []int64{8, 1}) || !slices.Equal(num.Shape, []int64{8}) ||
		boxes.Datatype != "FP32" || classes.Datatype != "INT64" || labels.Datatype != "BYTES" || num.Datatype != "INT64" {
		t.Fatalf("%s: shapes %v %v %v", where, boxes.Shape, scores.Shape, num.Shape)
	}
	for o := 1; o <= 8; o++ {
		i := o - 1
		if num.INT64[i] != 1 || classes.INT64[i] != 1 {
			t.Fatalf("%s orientation %d: %d detections of class %d", where, o, num.INT64[i], classes.INT64[i])
		}
		b := boxes.FP32[4*i : 4*i+4]
		checkRedBox(t, fmt.Sprintf("%s orientation %d", where, o), m, c, [4]float64{float64(b[0]), float64(b[1]), float64(b[2]), float64(b[3])},
			string(labels.Bytes[i]), float64(scores.FP32[i]))
	}
}

// TestDetectRequestOptions: a detector's selection per request (query parameters of /predict/,
// parameters of an inference request, over HTTP and gRPC), outputs chosen by name, images
// without a detection beside one with (rows past an image's count are zeros), and what a
// request may not ask (each a 400 naming what to change).
func TestDetectRequestOptions(t *testing.T) {
	cases := redCases(t)
	dir := t.TempDir()
	m := redModel{"red", onnxtest.RedNMS, 320, 320}
	g := startGateway(t, "models:\n"+redModelsYAML(t, dir, []redModel{m}))
	gc := g.grpcClient(t)
	img := cases[0].files[0]
	// The model scores its box 0.9.
	for _, c := range []struct {
		query string
		n     int
	}{{"", 1}, {"?score_threshold=0.95", 0}, {"?score_threshold=0.89&iou_threshold=0.5", 1}, {"?max_detections=1", 1}} {
		dets, _, a := g.predictTask(m.name, c.query, img)
		if a.status != 200 || len(dets) != c.n {
			t.Errorf("%s: %d %s, want %d detections", c.query, a.status, a.body, c.n)
		}
	}
	for _, c := range []struct{ query, names string }{
		{"?score_threshold=2", "score_threshold"}, {"?score_threshold=abc", "score_threshold"}, {"?iou_threshold=0", "iou_threshold"},
		{"?max_detections=0", "max_detections"}, {"?max_detections=1000", "max_detections"}, {"?top_k=3", "top_k"},
	} {
		if _, _, a := g.predictTask(m.name, c.query, img); a.status != 400 || !strings.Contains(string(a.body), c.names) {
			t.Errorf("%s: %d %s, want a 400 naming %s", c.query, a.status, a.body, c.names)
		}
	}
	// Outputs by name: two of the five, one binary, over HTTP.
	yes, no := true, false
	req := &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", false, img, cases[1].files[0], img)},
		Outputs:    []oip.Output{{Name: "num_detections", Binary: &yes}, {Name: "detection_boxes", Binary: &no}},
		Parameters: map[string]any{"detections": true, "score_threshold": 0.5}}
	res, err := g.inferHTTP(m.name, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 2 || res.Outputs[0].Name != "num_detections" || !res.Outputs[0].Binary || res.Outputs[1].Binary ||
		!slices.Equal(res.Outputs[0].INT64, []int64{1, 1, 1}) || !slices.Equal(res.Outputs[1].Shape, []int64{3, 1, 4}) {
		t.Fatalf("selected outputs: %+v", res.Outputs)
	}
	checkRedBox(t, "the second of three", m, cases[1], [4]float64{float64(res.Outputs[1].FP32[4]), float64(res.Outputs[1].FP32[5]),
		float64(res.Outputs[1].FP32[6]), float64(res.Outputs[1].FP32[7])}, "red", 0.9)
	// The same over gRPC, with the selection's parameters typed as gRPC carries them.
	for _, p := range []map[string]any{{"detections": true, "score_threshold": 0.95}, {"detections": true, "score_threshold": "0.95"}} {
		res, err = gc.Infer(t.Context(), m.name, "", &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", true, img)}, Parameters: p})
		if err != nil || !slices.Equal(res.Output("num_detections").INT64, []int64{0}) || !slices.Equal(res.Output("detection_boxes").Shape, []int64{1, 0, 4}) {
			t.Fatalf("gRPC with %v: %v %+v", p, err, res)
		}
	}
	for name, r := range map[string]*oip.Request{
		"unknown output":         {Inputs: []oip.Input{oip.ImageInput("input", false, img)}, Outputs: []oip.Output{{Name: "nope"}}},
		"detection output, raw":  {Inputs: []oip.Input{oip.ImageInput("input", false, img)}, Outputs: []oip.Output{{Name: "detection_boxes"}}},
		"classification":         {Inputs: []oip.Input{oip.ImageInput("input", false, img)}, Outputs: []oip.Output{{Name: "det_scores", Classification: 2}}},
		"bad threshold":          {Inputs: []oip.Input{oip.ImageInput("input", false, img)}, Parameters: map[string]any{"score_threshold": -1}},
		"detections not boolean": {Inputs: []oip.Input{oip.ImageInput("input", false, img)}, Parameters: map[string]any{"detections": "yes"}},
	} {
		_, err := g.inferHTTP(m.name, r)
		var e *oip.Error
		if !asOIPError(err, &e) || e.StatusCode != 400 {
			t.Errorf("%s over HTTP: %v, want a 400", name, err)
		}
		if _, err := gc.Infer(t.Context(), m.name, "", r); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
			t.Errorf("%s over gRPC: %v, want InvalidArgument", name, err)
		}
	}
	if dets, _, a := g.predictTask(m.name, "", img); a.status != 200 || len(dets) != 1 {
		t.Fatalf("after the refusals: %d %s", a.status, a.body)
	}
}

func asOIPError(err error, e **oip.Error) bool {
	if err == nil {
		return false
	}
	var target *oip.Error
	for u := err; u != nil; {
		if x, ok := u.(*oip.Error); ok {
			target = x
			break
		}
		w, ok := u.(interface{ Unwrap() error })
		if !ok {
			break
		}
		u = w.Unwrap()
	}
	*e = target
	return target != nil
}

// ultrafaceYAML serves the shared face detector with its authors' preprocessing (a stretch to
// 320x240, (x-127)/128) and selection (face probability above 0.7, NMS at IoU 0.3).
func ultrafaceYAML(t *testing.T) string {
	path := filepath.Join(sharedDir(t), "models", "ultraface-rfb-320", "version-RFB-320.onnx")
	if _, err := os.Stat(path); err != nil {
		t.Skip("the shared face detector is absent:", err)
	}
	return fmt.Sprintf(`  - name: ultraface
    path: %s
    task: detect
    preprocess: {mode: stretch, mean: [%s, %[2]s, %[2]s], std: [%s, %[3]s, %[3]s]}
    detect: {score_threshold: 0.7, iou_threshold: 0.3}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, path, strconv.FormatFloat(127.0/255, 'g', -1, 64), strconv.FormatFloat(128.0/255, 'g', -1, 64))
}

// sharedPhotoPaths lists the shared photos (the bad inputs left out).
func sharedPhotoPaths(t *testing.T) []string {
	var out []string
	for _, pat := range []string{"*.jpg", "*.jpeg", "*.png"} {
		m, _ := filepath.Glob(filepath.Join(sharedDir(t), "images", pat))
		out = append(out, m...)
	}
	if len(out) < 8 {
		t.Fatalf("only %d shared photos", len(out))
	}
	return out
}

// tensorInfer runs a preprocessed FP32 tensor [1, 3, h, w] through a model's tensor interface
// and returns its raw outputs.
func (g *gateway) tensorInfer(model string, tensor []float32, h, w int) *oip.Response {
	g.t.Helper()
	res, err := g.inferHTTP(model+".tensor", &oip.Request{BinaryOutput: true,
		Inputs: []oip.Input{{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, int64(h), int64(w)}, FP32: tensor, Binary: true}}})
	if err != nil {
		g.t.Fatal(err)
	}
	return res
}

// TestDetectUltrafaceMatchesReference: the real face detector through the gateway on every
// shared photo, against its authors' pipeline computed here: PIL's stretch and normalization
// (internal/pilref), the same model (the gateway's tensor interface, raw outputs), hard NMS
// written with numpy, boxes scaled to the photo. Same count above the threshold, each
// reference face matched at IoU >= 0.9; the same answers over gRPC.
func TestDetectUltrafaceMatchesReference(t *testing.T) {
	if err := pilref.Available(); err != nil {
		t.Skip(err)
	}
	// Two instances: a request may hold max_batch_size x instances images, and the batch is 1.
	g := startGateway(t, "models:\n"+strings.Replace(ultrafaceYAML(t), "instances: 1", "instances: 2", 1))
	gc := g.grpcClient(t)
	paths := sharedPhotoPaths(t)
	mean, std := float32(127.0/255), float32(128.0/255)
	var jobs []pilref.Job
	for _, p := range paths {
		jobs = append(jobs, pilref.Job{Path: p, Mode: "stretch", Width: 320, Height: 240, Mean: [3]float32{mean, mean, mean}, Std: [3]float32{std, std, std}})
	}
	refIn, err := pilref.Preprocess(jobs)
	if err != nil {
		t.Fatal(err)
	}
	var nms []pilref.NMSJob
	for i := range paths {
		res := g.tensorInfer("ultraface", refIn[i].Tensor, 240, 320)
		nms = append(nms, pilref.NMSJob{Boxes: res.Output("boxes").FP32, Scores: res.Output("scores").FP32, Classes: 2, W: refIn[i].W, H: refIn[i].H})
	}
	refs, err := pilref.HardNMS(nms, 0.7, 0.3, 100)
	if err != nil {
		t.Fatal(err)
	}
	faces := 0
	for i, p := range paths {
		name := filepath.Base(p)
		img, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dets, _, a := g.predictTask("ultraface", "", img)
		if a.status != 200 {
			t.Fatalf("%s: %d %s", name, a.status, a.body)
		}
		faces += len(refs[i])
		if len(dets) != len(refs[i]) {
			t.Errorf("%s: %d faces, the reference finds %d (%v; ours %v)", name, len(dets), len(refs[i]), refs[i], dets)
			continue
		}
		used := make([]bool, len(dets))
		for _, r := range refs[i] {
			best, bi := 0.0, -1
			for k, d := range dets {
				if v := iou64(d.Box, r.Box); !used[k] && v > best {
					best, bi = v, k
				}
			}
			if best < 0.9 {
				t.Errorf("%s: reference face %v has no match at IoU >= 0.9 (best %.3f; ours %v)", name, r.Box, best, dets)
				continue
			}
			used[bi] = true
		}
		// The same image over gRPC, post-processed: the same boxes, to float32.
		res, err := gc.Infer(t.Context(), "ultraface", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", true, img)}, Parameters: map[string]any{"detections": true}})
		if err != nil {
			t.Fatalf("%s over gRPC: %v", name, err)
		}
		if n := res.Output("num_detections").INT64[0]; int(n) != len(dets) {
			t.Fatalf("%s: gRPC %d detections, predict %d", name, n, len(dets))
		}
		for k, d := range dets {
			for j := range 4 {
				// /predict/ writes a float32's shortest text: compare as float32.
				if b := res.Output("detection_boxes").FP32[4*k+j]; b != float32(d.Box[j]) {
					t.Fatalf("%s: gRPC box %v, predict %v", name, res.Output("detection_boxes").FP32[4*k:4*k+4], d.Box)
				}
			}
		}
	}
	if faces < 2 {
		t.Errorf("%d faces in all the shared photos", faces)
	}
	// Images of different counts in one request (each a batch of its own: the model's batch is
	// fixed at 1, so two at most): K is the most, the rows past an image's count are zeros.
	var imgs [][]byte
	var counts []int64
	for i, p := range paths {
		if len(refs[i]) <= 1 && len(imgs) < 2 && (len(imgs) == 0 || int64(len(refs[i])) != counts[len(counts)-1]) {
			b, _ := os.ReadFile(p)
			imgs, counts = append(imgs, b), append(counts, int64(len(refs[i])))
		}
	}
	if !slices.Contains(counts, 0) || !slices.Contains(counts, 1) {
		t.Fatalf("no photos with and without a face among %d: %v", len(paths), counts)
	}
	res, err := g.inferHTTP("ultraface", &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", true, imgs...)}, Parameters: map[string]any{"detections": true}})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(imgs))
	if !slices.Equal(res.Output("num_detections").INT64, counts) || !slices.Equal(res.Output("detection_boxes").Shape, []int64{n, 1, 4}) ||
		!slices.Equal(res.Output("detection_labels").Shape, []int64{n, 1}) {
		t.Fatalf("%d images: %+v", n, res.Outputs)
	}
	for i, c := range counts {
		box, label := res.Output("detection_boxes").FP32[4*i:4*i+4], string(res.Output("detection_labels").Bytes[i])
		if c == 0 && (slices.ContainsFunc(box, func(v float32) bool { return v != 0 }) || label != "") || c == 1 && (box[2] == 0 || label != "1") {
			t.Errorf("image %d of %d detections: box %v, label %q", i, c, box, label)
		}
	}
}

func iou64(a, b [4]float64) float64 {
	f := func(v [4]float64) [4]float32 {
		return [4]float32{float32(v[0]), float32(v[1]), float32(v[2]), float32(v[3])}
	}
	return float64(postprocess.IoU(f(a), f(b)))
}

// cutMobileNet writes the shared MobileNetV2 cut at its pooled features into dir.
func cutMobileNet(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(sharedDir(t), "models", "mobilenetv2-12-int8", "mobilenetv2-12-int8.onnx")
	if _, err := os.Stat(src); err != nil {
		t.Skip("the shared MobileNetV2 is absent:", err)
	}
	if err := pilref.Available(); err != nil {
		t.Skip(err)
	}
	path := filepath.Join(dir, "features.onnx")
	if err := pilref.CutMobileNetV2(src, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEmbedMatchesPIL: MobileNetV2's pooled features (the shared int8 model cut here) served
// with -model alone (the task and the vector's output taken from the model; full decode, the
// embed task's default), against PIL-exact preprocessing on every shared photo: cosine >= 0.99.
// The vector is the same over /predict/, the Open Inference Protocol in JSON and in binary, and
// gRPC; with embed.normalize it has unit length.
func TestEmbedMatchesPIL(t *testing.T) {
	dir := t.TempDir()
	model := cutMobileNet(t, dir)
	g := launch(t, nil, "-model", model, "-listen", "127.0.0.1:0", "-admin-listen", "off", "-grpc-listen", "127.0.0.1:0")
	if !strings.Contains(g.log(), "task=embed") || !strings.Contains(g.log(), "preprocess.full_decode=true") {
		t.Fatalf("the start-up log does not say the task and the decode:\n%s", g.log())
	}
	gc := g.grpcClient(t)
	paths := sharedPhotoPaths(t)
	var jobs []pilref.Job
	for _, p := range paths {
		jobs = append(jobs, pilref.Job{Path: p, Width: 224, Height: 224, Resize: 256, Mean: [3]float32{0.485, 0.456, 0.406}, Std: [3]float32{0.229, 0.224, 0.225}})
	}
	refs, err := pilref.Preprocess(jobs)
	if err != nil {
		t.Fatal(err)
	}
	worst := 1.0
	for i, p := range paths {
		name := filepath.Base(p)
		img, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, emb, a := g.predictTask("features", "", img)
		if a.status != 200 || len(emb) != 1280 {
			t.Fatalf("%s: %d %s", name, a.status, a.body)
		}
		ref := g.tensorInfer("features", refs[i].Tensor, 224, 224).Output("features").FP32
		cos := postprocess.Cosine(emb, ref)
		worst = min(worst, cos)
		if cos < 0.99 {
			t.Errorf("%s: cosine %.5f to PIL-exact preprocessing", name, cos)
		}
		for _, how := range []string{"json", "binary", "grpc"} {
			req := &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", how != "json", img)}, BinaryOutput: how == "binary"}
			var res *oip.Response
			if how == "grpc" {
				res, err = gc.Infer(t.Context(), "features", "", req)
			} else {
				res, err = g.inferHTTP("features", req)
			}
			if err != nil || !slices.Equal(res.Output("features").Shape, []int64{1, 1280}) || !slices.Equal(res.Output("features").FP32, emb) {
				t.Fatalf("%s over %s: %v, not predict's vector", name, how, err)
			}
		}
	}
	t.Logf("lowest cosine to PIL-exact preprocessing: %.5f over %d photos", worst, len(paths))

	// embed.normalize: unit vectors, the same direction.
	yaml := fmt.Sprintf("models:\n  - name: unit\n    path: %s\n    embed: {normalize: true}\n", model)
	gn := startGateway(t, yaml)
	img, _ := os.ReadFile(paths[0])
	_, unit, a := gn.predictTask("unit", "", img)
	_, raw, _ := g.predictTask("features", "", img)
	var norm float64
	for _, v := range unit {
		norm += float64(v) * float64(v)
	}
	if a.status != 200 || math.Abs(norm-1) > 1e-5 || postprocess.Cosine(unit, raw) < 0.99999 {
		t.Fatalf("normalized: %d, norm² %v, cosine %v", a.status, norm, postprocess.Cosine(unit, raw))
	}
	var cfg struct {
		Parameters map[string]struct {
			StringValue string `json:"string_value"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(gn.do("GET", "/v2/models/unit/config", "", nil).body, &cfg); err != nil || !strings.HasPrefix(cfg.Parameters["task"].StringValue, "embed") {
		t.Fatalf("config's task: %v %+v", err, cfg.Parameters["task"])
	}
}

// TestTasksBadInput: for a classifier, an embedding model and a detector alike, bad input is
// answered as today (400 for a broken image, 413 over server.max_body_bytes, 415 for what is
// not an image), parameters of another task are refused, and the server keeps serving.
func TestTasksBadInput(t *testing.T) {
	dir := t.TempDir()
	model := cutMobileNet(t, dir)
	yaml := "server: {max_body_bytes: 2MiB}\nmodels:\n" + imagenetModelYAML(t, "{max_batch_size: 4, max_queue_delay: 2ms}") +
		fmt.Sprintf("  - name: features\n    path: %s\n    batching: {max_batch_size: 4}\n", model) + ultrafaceYAML(t)
	g := startGateway(t, yaml)
	img, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_astronaut.png"))
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xFF}, 3<<20) // the limit leaves room for the photo in base64 (1 MB)
	b64 := func(b []byte) []byte {
		j, _ := json.Marshal(map[string]string{"image": base64.StdEncoding.EncodeToString(b)})
		return j
	}
	for _, m := range []string{"mobilenetv2", "features", "ultraface"} {
		for _, c := range []struct {
			name, ct, query string
			body            []byte
			want            int
		}{
			{"truncated PNG", "image/png", "", img[:len(img)/3], 400},
			{"bad base64", "application/json", "", []byte(`{"image": "!!!!"}`), 400},
			{"too large", "image/jpeg", "", big, 413},
			{"not an image", "text/plain", "", []byte("hello"), 415},
			{"not an image in JSON", "application/json", "", b64([]byte("hello world")), 415},
			{"detections parameter", "image/png", map[bool]string{true: "?top_k=2", false: "?score_threshold=0.5"}[m == "ultraface"], img, 400},
		} {
			if m == "ultraface" && c.name == "detections parameter" {
				c.name = "top_k"
			}
			a := g.do("POST", "/models/"+m+"/predict"+c.query, c.ct, c.body)
			if a.status != c.want || !strings.Contains(string(a.body), `"error"`) {
				t.Errorf("%s, %s: %d %s, want %d", m, c.name, a.status, a.body, c.want)
			}
		}
		r := g.do("POST", "/v2/models/"+m+"/infer", "application/json", []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["`+
			base64.StdEncoding.EncodeToString(img)+`"]}],"parameters":{"detections":true}}`))
		if want := map[bool]int{true: 200, false: 400}[m == "ultraface"]; r.status != want {
			t.Errorf("%s with parameter detections: %d %s, want %d", m, r.status, r.body, want)
		}
		if a := g.do("POST", "/models/"+m+"/predict", "image/png", img); a.status != 200 {
			t.Errorf("%s after the bad inputs: %d %s", m, a.status, a.body)
		}
	}
	if n := g.metric("gateway_request_failures_total", `reason="bad_input"`); n < 15 {
		t.Errorf("%v requests counted as bad input", n)
	}
}

// TestTaskMismatchIsAStartupError: a model whose outputs do not fit the task asked for is
// refused at start-up (-check here) with the key to set, the output and its shape.
func TestTaskMismatchIsAStartupError(t *testing.T) {
	dir := t.TempDir()
	yolo := writeModel(t, dir, "yolo.onnx", onnxtest.RedBox(64, 64, onnxtest.RedYOLO))
	emb := writeModel(t, dir, "emb.onnx", onnxtest.Planted(64, 64, onnxtest.Const{Name: "pooled", Dims: []any{int64(4)}, Sizes: []int64{4}, Values: []float32{1, 2, 3, 4}}))
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-model", yolo, "-task", "embed"}, []string{"embed.output", "output", "[? 6 3]"}},
		{[]string{"-model", emb, "-task", "detect"}, []string{"detect", "pooled", "[? 4]"}},
		{[]string{"-model", emb, "-task", "classify"}, nil}, // four scores: a classifier may be that
		{[]string{"-model", yolo, "-task", "sideways"}, []string{"-task must be classify, embed or detect"}},
	} {
		out, err := runCheck(t, c.args...)
		if c.want == nil {
			if err != nil {
				t.Errorf("%v: %v\n%s", c.args, err, out)
			}
			continue
		}
		if err == nil {
			t.Errorf("%v: accepted:\n%s", c.args, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the error does not say %q:\n%s", c.args, w, out)
			}
		}
	}
}
