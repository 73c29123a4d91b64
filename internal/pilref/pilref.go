// Package pilref computes test references on the machine the tests run on, with Debian's
// Python (/usr/bin/python3) and its PIL, numpy and onnx: torchvision-style preprocessing
// (EXIF orientation, RGB, Pillow's bilinear resize, crop or letterbox, normalization), the hard
// non-maximum suppression detectors' authors use, and an embedding model cut from the shared
// MobileNetV2 at its pooled features. It is imported by tests only; what it computes is never
// stored. Available says why a test must skip.
package pilref

import (
	"bytes"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
)

// Python is the interpreter with PIL, numpy and onnx (Debian's python3-pil, python3-numpy,
// python3-onnx; scripts/setup.sh test installs them).
const Python = "/usr/bin/python3"

// ErrUnavailable: no interpreter with the modules (the test skips).
var ErrUnavailable = errors.New("pilref: /usr/bin/python3 with PIL, numpy and onnx is not available")

// Available reports whether the references can be computed here.
func Available() error {
	if _, err := os.Stat(Python); err != nil {
		return ErrUnavailable
	}
	if err := exec.Command(Python, "-c", "import PIL, numpy, onnx").Run(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// run runs script with in as JSON on its standard input and decodes its JSON output into out.
func run(script string, in, out any) error {
	if err := Available(); err != nil {
		return err
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	cmd := exec.Command(Python, "-c", script)
	cmd.Stdin = bytes.NewReader(b)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pilref: %v: %s", err, stderr.String())
	}
	return json.Unmarshal(res, out)
}

// Job is one image to preprocess as torchvision (PIL) would.
type Job struct {
	Path string
	// Mode is shorter_side (resize the shorter side to Resize, center crop Width x Height),
	// stretch or letterbox (pad with Pad).
	Mode          string
	Width, Height int
	Resize        int
	Pad           int
	Mean, Std     [3]float32
	// Raw keeps 0..255 values (no division, mean or std).
	Raw bool
}

// Result is a Job's tensor and where the image went.
type Result struct {
	// Tensor is float32 NCHW, 3 x Height x Width.
	Tensor []float32
	// W and H are the image's size after EXIF orientation.
	W, H int
}

//go:embed preprocess.py
var preprocessScript string

// Preprocess computes the jobs' tensors in one Python process.
func Preprocess(jobs []Job) ([]Result, error) {
	in := make([]map[string]any, len(jobs))
	for i, j := range jobs {
		in[i] = map[string]any{"path": j.Path, "mode": j.Mode, "width": j.Width, "height": j.Height, "resize": j.Resize, "pad": j.Pad,
			"raw": j.Raw, "mean": j.Mean[:], "std": j.Std[:]}
	}
	var out []struct {
		W, H int
		T    string
	}
	if err := run(preprocessScript, in, &out); err != nil {
		return nil, err
	}
	res := make([]Result, len(out))
	for i, o := range out {
		b, err := base64.StdEncoding.DecodeString(o.T)
		if err != nil {
			return nil, err
		}
		t := make([]float32, len(b)/4)
		for k := range t {
			t[k] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:]))
		}
		if len(t) != 3*jobs[i].Width*jobs[i].Height {
			return nil, fmt.Errorf("pilref: %s: %d values", jobs[i].Path, len(t))
		}
		res[i] = Result{Tensor: t, W: o.W, H: o.H}
	}
	return res, nil
}

// Box is a reference detection: corners in the original image's pixels, and a score.
type Box struct {
	Box   [4]float64
	Score float64
}

// NMSJob is one image's SSD-style outputs (normalized corner boxes, per-anchor scores of
// Classes columns, class 0 the background) and the original image's size.
type NMSJob struct {
	Boxes, Scores []float32
	Classes, W, H int
}

//go:embed hard_nms.py
var nmsScript string

// HardNMS is the post-processing of ultraface's authors, written here with numpy: per class
// (the background left out) the anchors scoring above score, greedy suppression above iou,
// the boxes scaled to the image. Per job, detections highest score first.
func HardNMS(jobs []NMSJob, score, iou float64, maxDet int) ([][]Box, error) {
	type wj struct {
		Boxes   []float32 `json:"boxes"`
		Scores  []float32 `json:"scores"`
		Classes int       `json:"classes"`
		W       int       `json:"w"`
		H       int       `json:"h"`
	}
	in := struct {
		Jobs  []wj    `json:"jobs"`
		Score float64 `json:"score"`
		IOU   float64 `json:"iou"`
		Max   int     `json:"max"`
	}{Score: score, IOU: iou, Max: maxDet}
	for _, j := range jobs {
		in.Jobs = append(in.Jobs, wj{j.Boxes, j.Scores, j.Classes, j.W, j.H})
	}
	var out [][]Box
	if err := run(nmsScript, in, &out); err != nil {
		return nil, err
	}
	return out, nil
}

//go:embed cut_mobilenetv2.py
var cutScript string

// CutMobileNetV2 writes to dst the shared int8 MobileNetV2 (src) cut at its pooled features:
// one output "features" float32 [batch, 1280], the global average pool dequantized and
// flattened, the classifier dropped. The weights are the pretrained network's.
func CutMobileNetV2(src, dst string) error {
	var out struct{ Nodes int }
	if err := run(cutScript, map[string]string{"src": src, "dst": dst}, &out); err != nil {
		return err
	}
	if out.Nodes == 0 {
		return fmt.Errorf("pilref: the cut model has no nodes")
	}
	return nil
}
