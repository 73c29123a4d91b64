package postprocess_test

// End to end below the gateway: the real decoders of preprocess, the real ONNX Runtime on a
// real model or a test model, and postprocess, as the gateway will chain them; references
// computed here, on this machine (internal/pilref: PIL and numpy).

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	_ "image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/imagegate/imagegate/internal/onnxtest"
	"github.com/imagegate/imagegate/internal/pilref"
	"github.com/imagegate/imagegate/postprocess"
	"github.com/imagegate/imagegate/preprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

const (
	shared    = "../../shared"
	images    = shared + "/images"
	ultraface = shared + "/models/ultraface-rfb-320/version-RFB-320.onnx"
	mobilenet = shared + "/models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx"
)

var ortOnce sync.Once

func initORT(t *testing.T) {
	t.Helper()
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		lib, _ = filepath.Abs("../.deps/onnxruntime/libonnxruntime.so")
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skip("ONNX Runtime is not installed (scripts/setup-onnxruntime.sh): ", err)
	}
	var err error
	ortOnce.Do(func() { err = ort.Init(lib) })
	if err != nil {
		t.Fatal(err)
	}
}

func needFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is absent (../shared beside the checkout): %v", path, err)
	}
}

func needPIL(t *testing.T) {
	t.Helper()
	if err := pilref.Available(); err != nil {
		t.Skip(err)
	}
}

// photos lists the shared photos (the bad inputs left out). Under the race detector, which
// finds nothing in these single-goroutine loops and slows them tenfold, one in three (the
// large ones kept); make test runs the package again without it, every photo.
func photos(t *testing.T) []string {
	t.Helper()
	needFile(t, images)
	var out []string
	for _, pat := range []string{"*.jpg", "*.jpeg", "*.png"} {
		m, _ := filepath.Glob(filepath.Join(images, pat))
		for i, p := range m {
			if !raceEnabled || i%3 == 0 || strings.Contains(p, "landscape") {
				out = append(out, p)
			}
		}
	}
	return out
}

func session(t *testing.T, cfg ort.SessionConfig) *ort.Session[float32] {
	t.Helper()
	cfg.IntraOp, cfg.InterOp = 1, 1
	if cfg.MaxBatchSize == 0 {
		cfg.MaxBatchSize = 1
	}
	s, err := ort.NewSession[float32](cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func frame(g preprocess.Geometry) postprocess.Frame {
	return postprocess.Frame{Width: g.Width, Height: g.Height, Orientation: g.Orientation, ScaleX: g.ScaleX, ScaleY: g.ScaleY, OffsetX: g.OffsetX, OffsetY: g.OffsetY}
}

func iou(a [4]float32, b [4]float64) float64 {
	return float64(postprocess.IoU(a, [4]float32{float32(b[0]), float32(b[1]), float32(b[2]), float32(b[3])}))
}

// TestUltrafaceMatchesReference: the real face detector on every shared photo. The reference
// is its authors' pipeline computed here: PIL's stretch to 320x240 and (x-127)/128, the same
// ONNX Runtime session, hard NMS (face probability above 0.7, IoU 0.3) written with numpy,
// boxes scaled to the photo. Ours is the gateway's: preprocess's default (DCT-scaled) decode,
// postprocess's boxes+scores decoder and per-class NMS, mapped back by the decode's geometry.
// Same count on every photo, each reference face matched by one of ours at IoU >= 0.9; the
// faces the shared images' README names are found.
func TestUltrafaceMatchesReference(t *testing.T) {
	initORT(t)
	needPIL(t)
	needFile(t, ultraface)
	mean := [3]float32{127.0 / 255, 127.0 / 255, 127.0 / 255}
	std := [3]float32{128.0 / 255, 128.0 / 255, 128.0 / 255}
	s := session(t, ort.SessionConfig{ModelPath: ultraface, InputName: "input", OutputNames: []string{"scores", "boxes"}, InputShape: []int64{3, 240, 320}})
	pre, err := preprocess.New(preprocess.Options{Width: 320, Height: 240, Mode: preprocess.ModeStretch, Mean: mean, Std: std})
	if err != nil {
		t.Fatal(err)
	}
	dec := postprocess.Decoder{Kind: postprocess.BoxesScores, Anchors: 4420, Classes: 2, Normalized: true, Background: true, InputWidth: 320, InputHeight: 240}
	if err := dec.Check(); err != nil {
		t.Fatal(err)
	}
	params := postprocess.Params{ScoreThreshold: 0.7, IOUThreshold: 0.3, MaxDetections: 100}
	paths := photos(t)
	var jobs []pilref.Job
	for _, p := range paths {
		jobs = append(jobs, pilref.Job{Path: p, Mode: "stretch", Width: 320, Height: 240, Mean: mean, Std: std})
	}
	refIn, err := pilref.Preprocess(jobs)
	if err != nil {
		t.Fatal(err)
	}
	var nmsJobs []pilref.NMSJob
	ours := make([][]postprocess.Detection, len(paths))
	var sc postprocess.Scratch
	for i, p := range paths {
		copy(s.Input(0), refIn[i].Tensor)
		out, err := s.RunOutputs(1)
		if err != nil {
			t.Fatal(err)
		}
		nmsJobs = append(nmsJobs, pilref.NMSJob{Scores: append([]float32(nil), out[0].F32...), Boxes: append([]float32(nil), out[1].F32...),
			Classes: 2, W: refIn[i].W, H: refIn[i].H})

		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		g, err := pre.ProcessGeometry(context.Background(), data, s.Input(0))
		if err != nil {
			t.Fatal(err)
		}
		if g.Width != refIn[i].W || g.Height != refIn[i].H {
			t.Fatalf("%s: geometry %+v, PIL's image %dx%d", p, g, refIn[i].W, refIn[i].H)
		}
		if out, err = s.RunOutputs(1); err != nil {
			t.Fatal(err)
		}
		d, err := dec.Decode(nil, postprocess.Sample{Boxes: out[1].F32, Scores: out[0].F32}, params, &sc)
		if err != nil {
			t.Fatal(err)
		}
		ours[i] = frame(g).Map(d)
	}
	refs, err := pilref.HardNMS(nmsJobs, 0.7, 0.3, 100)
	if err != nil {
		t.Fatal(err)
	}
	faces := 0
	for i, p := range paths {
		name := filepath.Base(p)
		t.Logf("%-32s reference %d, ours %d: %v", name, len(refs[i]), len(ours[i]), ours[i])
		faces += len(refs[i])
		if len(ours[i]) != len(refs[i]) {
			t.Errorf("%s: %d faces, the reference finds %d (%v)", name, len(ours[i]), len(refs[i]), refs[i])
			continue
		}
		used := make([]bool, len(ours[i]))
		for _, r := range refs[i] {
			best, bi := 0.0, -1
			for k, o := range ours[i] {
				if v := iou(o.Box, r.Box); !used[k] && v > best {
					best, bi = v, k
				}
			}
			if best < 0.9 {
				t.Errorf("%s: reference face %v (%.3f) has no match at IoU >= 0.9 (best %.3f)", name, r.Box, r.Score, best)
				continue
			}
			used[bi] = true
		}
	}
	// The faces named in ../shared/images/README.md.
	for name, want := range map[string][4]float64{"skimage_astronaut.png": {180, 62, 268, 174}, "opencv_messi5.jpg": {225, 92, 257, 132}} {
		found, present := false, false
		for i, p := range paths {
			if filepath.Base(p) == name {
				present = true
				for _, o := range ours[i] {
					found = found || iou(o.Box, want) > 0.5
				}
			}
		}
		if present && !found {
			t.Errorf("%s: no face found near %v", name, want)
		}
	}
	if faces < 2 && !raceEnabled {
		t.Errorf("%d faces in all the photos", faces)
	}
}

// orientJPEG encodes the displayed image d as a JPEG stored so that EXIF orientation o shows
// d: the pixels are transformed back to the stored grid and the orientation tag written.
func orientJPEG(t *testing.T, d image.Image, o int) []byte {
	t.Helper()
	b := d.Bounds()
	W, H := b.Dx(), b.Dy()
	ws, hs := W, H
	if o >= 5 {
		ws, hs = H, W
	}
	st := image.NewRGBA(image.Rect(0, 0, ws, hs))
	f := postprocess.Frame{Width: W, Height: H, Orientation: o}
	for Y := range H {
		for X := range W {
			s := f.Stored([4]float32{float32(X) + 0.5, float32(Y) + 0.5, float32(X) + 0.5, float32(Y) + 0.5})
			st.Set(int(s[0]), int(s[1]), d.At(b.Min.X+X, b.Min.Y+Y))
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, st, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	j := buf.Bytes()
	// APP1 Exif: a little-endian TIFF header and one IFD entry, Orientation (0x0112), SHORT.
	tiff := []byte{'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, byte(o), 0, 0, 0, 0, 0, 0, 0}
	app1 := append([]byte{0xFF, 0xE1, 0, 0}, append([]byte("Exif\x00\x00"), tiff...)...)
	n := len(app1) - 2
	app1[2], app1[3] = byte(n>>8), byte(n)
	return append(append(append([]byte{}, j[:2]...), app1...), j[2:]...)
}

// redPhoto is a shared photo in gray with a pure red rectangle drawn at r (displayed pixels):
// the RedBox model's only red; transposed swaps its axes (a portrait photo).
func redPhoto(t *testing.T, name string, transposed bool, r image.Rectangle) image.Image {
	t.Helper()
	f, err := os.Open(filepath.Join(images, name))
	if err != nil {
		t.Skip("shared photo absent: ", err)
	}
	defer f.Close()
	src, _, err := image.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	if transposed {
		w, h = h, w
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			sx, sy := x, y
			if transposed {
				sx, sy = y, x
			}
			g := color.GrayModel.Convert(src.At(b.Min.X+sx, b.Min.Y+sy)).(color.Gray)
			img.Set(x, y, color.RGBA{g.Y, g.Y, g.Y, 255})
		}
	}
	draw.Draw(img, r, image.NewUniform(color.RGBA{255, 0, 0, 255}), image.Point{}, draw.Src)
	return img
}

// redDecoder is the decoder of a RedBox layout.
func redDecoder(layout string, w, h int) (postprocess.Decoder, []string) {
	d := postprocess.Decoder{InputWidth: w, InputHeight: h, Kind: postprocess.YOLO, Anchors: 3, Classes: 2}
	switch layout {
	case onnxtest.RedYOLOT:
		d.Transposed = true
	case onnxtest.RedYOLOObj:
		d.Objectness = true
	case onnxtest.RedYOLOObjT:
		d.Objectness, d.Transposed = true, true
	case onnxtest.RedBoxesScores:
		return postprocess.Decoder{Kind: postprocess.BoxesScores, Anchors: 2, Classes: 2, Normalized: true, Background: true, InputWidth: w, InputHeight: h},
			[]string{"boxes", "scores"}
	case onnxtest.RedNMS:
		return postprocess.Decoder{Kind: postprocess.NMS, Anchors: 2, InputWidth: w, InputHeight: h}, []string{"det_boxes", "det_scores", "det_classes", "num_dets"}
	case onnxtest.RedNMSPacked, onnxtest.RedNMSPackedDyn:
		return postprocess.Decoder{Kind: postprocess.NMS, Packed: true, InputWidth: w, InputHeight: h}, []string{"output"}
	}
	return d, []string{"output"}
}

// sample puts a run's outputs for image i of n in a decoder's Sample.
func sample(layout string, out []ort.Output, i, n int) postprocess.Sample {
	rows := func(o ort.Output) []float32 { lo, hi := o.Row(i, n); return o.F32[lo:hi] }
	switch layout {
	case onnxtest.RedBoxesScores:
		return postprocess.Sample{Boxes: rows(out[0]), Scores: rows(out[1]), Count: -1}
	case onnxtest.RedNMS:
		lo, hi := out[2].Row(i, n)
		return postprocess.Sample{Boxes: rows(out[0]), Scores: rows(out[1]), Classes: postprocess.Float32s(nil, out[2].I64[lo:hi]), Count: int(out[3].I64[i])}
	}
	return postprocess.Sample{Boxes: rows(out[0]), Count: -1}
}

// TestRedBoxRoundTrip: a red rectangle drawn into photos of three aspect ratios, stored under
// each of the 8 EXIF orientations, comes back where it was drawn, through the letterbox (and
// stretch and shorter-side crop), a model that finds it in input pixels (every detector
// layout), decoding, NMS and the map back: within one model-input pixel scaled back, plus a
// pixel for the JPEG's chroma.
func TestRedBoxRoundTrip(t *testing.T) {
	initORT(t)
	type photo struct {
		name       string
		transposed bool
		rect       image.Rectangle
	}
	ph := []photo{
		{"skimage_astronaut.png", false, image.Rect(150, 200, 260, 330)}, // 512x512
		{"opencv_messi5.jpg", false, image.Rect(300, 40, 420, 110)},      // 548x342
		{"skimage_rocket.jpg", true, image.Rect(60, 350, 200, 600)},      // 427x640, portrait
	}
	inputs := []struct {
		w, h int
		mode preprocess.Mode
	}{{320, 320, preprocess.ModeLetterbox}, {256, 192, preprocess.ModeLetterbox}, {160, 288, preprocess.ModeLetterbox},
		{256, 192, preprocess.ModeStretch}, {224, 224, preprocess.ModeShorterSide}}
	layouts := []string{onnxtest.RedYOLO, onnxtest.RedYOLOT, onnxtest.RedYOLOObj, onnxtest.RedYOLOObjT, onnxtest.RedBoxesScores,
		onnxtest.RedNMS, onnxtest.RedNMSPacked, onnxtest.RedNMSPackedDyn}
	ctx := context.Background()
	files := make([][8][]byte, len(ph)) // per photo, per orientation: encoded once
	for i, p := range ph {
		img := redPhoto(t, p.name, p.transposed, p.rect)
		for o := 1; o <= 8; o++ {
			files[i][o-1] = orientJPEG(t, img, o)
		}
	}
	for ii, in := range inputs {
		pre, err := preprocess.New(preprocess.Options{Width: in.w, Height: in.h, Mode: in.mode, Scale: preprocess.ScaleRaw, Pad: 114, Resize: max(in.w, in.h)})
		if err != nil {
			t.Fatal(err)
		}
		for li, layout := range layouts {
			if ii > 0 && li > 0 || raceEnabled && li%3 != 0 {
				continue // every layout on the first input, the other geometries with one
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "m.onnx")
			if err := os.WriteFile(path, onnxtest.RedBox(int64(in.h), int64(in.w), layout).Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			dec, outs := redDecoder(layout, in.w, in.h)
			s := session(t, ort.SessionConfig{ModelPath: path, InputName: "input", OutputNames: outs, InputShape: []int64{3, int64(in.h), int64(in.w)}, MaxBatchSize: 8})
			var sc postprocess.Scratch
			for pi, p := range ph {
				// A batch of the 8 orientations, as the gateway would run them.
				geoms := make([]preprocess.Geometry, 8)
				for o := 1; o <= 8; o++ {
					if geoms[o-1], err = pre.ProcessGeometry(ctx, files[pi][o-1], s.Input(o-1)); err != nil {
						t.Fatal(err)
					}
				}
				out, err := s.RunOutputs(8)
				if err != nil {
					t.Fatal(err)
				}
				for o := 1; o <= 8; o++ {
					g := geoms[o-1]
					d, err := dec.Decode(nil, sample(layout, out, o-1, 8), postprocess.DefaultParams(), &sc)
					if err != nil {
						t.Fatal(err)
					}
					d = frame(g).Map(d)
					where := fmt.Sprintf("%s %dx%d %s, %s, orientation %d", layout, in.w, in.h, in.mode, p.name, o)
					if g.Orientation != o || len(d) != 1 || d[0].Class != 1 || math.Abs(float64(d[0].Score)-0.9) > 1e-6 {
						t.Fatalf("%s: geometry %+v, detections %v", where, g, d)
					}
					want := [4]float64{float64(p.rect.Min.X), float64(p.rect.Min.Y), float64(p.rect.Max.X), float64(p.rect.Max.Y)}
					// What the input shows of the photo (a crop shows part of it).
					vis := [4]float64{-g.OffsetX / g.ScaleX, -g.OffsetY / g.ScaleY, (float64(in.w) - g.OffsetX) / g.ScaleX, (float64(in.h) - g.OffsetY) / g.ScaleY}
					want = [4]float64{max(want[0], vis[0]), max(want[1], vis[1]), min(want[2], vis[2]), min(want[3], vis[3])}
					tol := [4]float64{1/g.ScaleX + 1, 1/g.ScaleY + 1, 1/g.ScaleX + 1, 1/g.ScaleY + 1}
					for k := range 4 {
						if math.Abs(float64(d[0].Box[k])-want[k]) > tol[k] {
							t.Errorf("%s: box %v, drawn %v (tolerance %.2f)", where, d[0].Box, want, tol[k])
							break
						}
					}
					// Back to the stored pixels: the rectangle as the file holds it.
					st := frame(g).Stored(d[0].Box)
					ws := postprocess.Frame{Width: g.Width, Height: g.Height, Orientation: o}.Stored([4]float32{float32(want[0]), float32(want[1]), float32(want[2]), float32(want[3])})
					for k := range 4 {
						if math.Abs(float64(st[k]-ws[k])) > max(tol[0], tol[1]) {
							t.Errorf("%s: stored box %v, want %v", where, st, ws)
							break
						}
					}
				}
			}
		}
	}
}

// TestEmbeddingMatchesPIL measures the embed task's vectors, MobileNetV2's pooled features (the
// shared int8 model cut in this test), against PIL-exact preprocessing on every shared photo,
// with full decode and with the DCT-scaled decode, and holds full decode to cosine >= 0.99
// everywhere: the embed task's default (configs: preprocess.full_decode for embed).
func TestEmbeddingMatchesPIL(t *testing.T) {
	initORT(t)
	needPIL(t)
	needFile(t, mobilenet)
	path := filepath.Join(t.TempDir(), "features.onnx")
	if err := pilref.CutMobileNetV2(mobilenet, path); err != nil {
		t.Fatal(err)
	}
	s := session(t, ort.SessionConfig{ModelPath: path, InputName: "input", OutputNames: []string{"features"}, InputShape: []int64{3, 224, 224}})
	if sp := s.Outputs(); sp[0].Row != 1280 || !sp[0].Batched {
		t.Fatalf("output %+v", sp)
	}
	paths := photos(t)
	var jobs []pilref.Job
	for _, p := range paths {
		jobs = append(jobs, pilref.Job{Path: p, Width: 224, Height: 224, Resize: 256, Mean: preprocess.ImageNetMean, Std: preprocess.ImageNetStd})
	}
	refs, err := pilref.Preprocess(jobs)
	if err != nil {
		t.Fatal(err)
	}
	embed := func(fill func(dst []float32) error) []float32 {
		if err := fill(s.Input(0)); err != nil {
			t.Fatal(err)
		}
		out, err := s.RunOutputs(1)
		if err != nil {
			t.Fatal(err)
		}
		v := append([]float32(nil), out[0].F32...)
		if !postprocess.L2Normalize(v) {
			t.Fatal("a vector of zeros or not finite")
		}
		return v
	}
	var report strings.Builder
	minFull, minDCT := 1.0, 1.0
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ref := embed(func(dst []float32) error { copy(dst, refs[i].Tensor); return nil })
		var cos [2]float64
		for k, full := range []bool{true, false} {
			pre, err := preprocess.New(preprocess.Options{FullDecode: full})
			if err != nil {
				t.Fatal(err)
			}
			cos[k] = postprocess.Cosine(ref, embed(func(dst []float32) error { return pre.Process(data, dst) }))
		}
		minFull, minDCT = min(minFull, cos[0]), min(minDCT, cos[1])
		fmt.Fprintf(&report, "\n%-32s %4dx%-4d full %.5f  dct %.5f", filepath.Base(p), refs[i].W, refs[i].H, cos[0], cos[1])
		if cos[0] < 0.99 {
			t.Errorf("%s: cosine %.5f against PIL with full decode", filepath.Base(p), cos[0])
		}
	}
	t.Logf("cosine to PIL-exact preprocessing, per photo:%s\nminimum: full decode %.5f, DCT-scaled %.5f", report.String(), minFull, minDCT)
}
