// Package pilref computes test references on the machine the tests run on, with Debian's
// Python (/usr/bin/python3) and its PIL, numpy and onnx: torchvision-style preprocessing
// (EXIF orientation, RGB, Pillow's bilinear resize, crop or letterbox, normalization), the hard
// non-maximum suppression detectors' authors use, and an embedding model cut from the shared
// MobileNetV2 at its pooled features. It is imported by tests only; what it computes is never
// stored. Available says why a test must skip.
package pilref

import (
	"bytes"
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

const preprocessScript = `
import base64, json, sys
import numpy as np
from PIL import Image, ImageOps
out = []
for j in json.load(sys.stdin):
    im = ImageOps.exif_transpose(Image.open(j["path"])).convert("RGB")
    w, h = im.size
    W, H = j["width"], j["height"]
    if j["mode"] == "stretch":
        im = im.resize((W, H), Image.BILINEAR)
    elif j["mode"] == "letterbox":
        r = min(W / w, H / h)
        nw, nh = min(max(round(w * r), 1), W), min(max(round(h * r), 1), H)
        canvas = Image.new("RGB", (W, H), (j["pad"],) * 3)
        canvas.paste(im.resize((nw, nh), Image.BILINEAR), ((W - nw) // 2, (H - nh) // 2))
        im = canvas
    else:  # torchvision Resize(int) + CenterCrop
        s = j["resize"]
        nw, nh = (s, int(s * h / w)) if w <= h else (int(s * w / h), s)
        im = im.resize((nw, nh), Image.BILINEAR)
        left, top = int(round((nw - W) / 2.0)), int(round((nh - H) / 2.0))
        im = im.crop((left, top, left + W, top + H))
    x = np.asarray(im, dtype=np.uint8).astype(np.float32)
    if not j["raw"]:
        x = x / np.float32(255)
        x = (x - np.array(j["mean"], dtype=np.float32)) / np.array(j["std"], dtype=np.float32)
    x = np.ascontiguousarray(x.astype(np.float32).transpose(2, 0, 1))
    out.append({"w": w, "h": h, "t": base64.b64encode(x.astype("<f4").tobytes()).decode()})
json.dump(out, sys.stdout)
`

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

const nmsScript = `
import json, sys
import numpy as np
def iou(a, b):
    x1 = np.maximum(a[0], b[:, 0]); y1 = np.maximum(a[1], b[:, 1])
    x2 = np.minimum(a[2], b[:, 2]); y2 = np.minimum(a[3], b[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda r: np.clip(r[..., 2] - r[..., 0], 0, None) * np.clip(r[..., 3] - r[..., 1], 0, None)
    return inter / (area(a) + area(b) - inter + 1e-12)
req = json.load(sys.stdin)
out = []
for j in req["jobs"]:
    boxes = np.array(j["boxes"], dtype=np.float32).reshape(-1, 4)
    scores = np.array(j["scores"], dtype=np.float32).reshape(-1, j["classes"])
    found = []
    for c in range(1, j["classes"]):  # per class, the background left out
        keep = scores[:, c] > req["score"]
        b, s = boxes[keep], scores[keep, c]
        order = np.argsort(-s, kind="stable")
        b, s = b[order], s[order]
        picked = []
        while len(s) > 0 and len(picked) < req["max"]:
            picked.append((b[0], s[0]))
            if len(s) == 1:
                break
            rest = iou(b[0], b[1:]) <= req["iou"]
            b, s = b[1:][rest], s[1:][rest]
        for bb, ss in picked:
            found.append({"box": [float(bb[0]) * j["w"], float(bb[1]) * j["h"], float(bb[2]) * j["w"], float(bb[3]) * j["h"]], "score": float(ss)})
    out.append(sorted(found, key=lambda d: -d["score"]))
json.dump(out, sys.stdout)
`

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

const cutScript = `
import json, sys
import onnx
from onnx import helper, TensorProto
req = json.load(sys.stdin)
m = onnx.load(req["src"])
g = m.graph
pool = [n for n in g.node if n.op_type == "QLinearGlobalAveragePool"]
if len(pool) != 1:
    raise SystemExit("expected one QLinearGlobalAveragePool, found %d" % len(pool))
q, _, _, scale, zero = pool[0].input[0], pool[0].input[1], pool[0].input[2], pool[0].input[3], pool[0].input[4]
g.node.append(helper.make_node("DequantizeLinear", [pool[0].output[0], scale, zero], ["features_4d"]))
g.node.append(helper.make_node("Flatten", ["features_4d"], ["features"], axis=1))
# Keep only the nodes the features need.
needed, keep = {"features"}, []
for n in reversed(list(g.node)):
    if any(o in needed for o in n.output):
        keep.append(n)
        needed.update(n.input)
del g.node[:]
g.node.extend(reversed(keep))
inits = [t for t in g.initializer if t.name in needed]
del g.initializer[:]
g.initializer.extend(inits)
del g.output[:]
g.output.append(helper.make_tensor_value_info("features", TensorProto.FLOAT, [g.input[0].type.tensor_type.shape.dim[0].dim_param or "N", 1280]))
onnx.save(m, req["dst"])
json.dump({"nodes": len(g.node)}, sys.stdout)
`

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
