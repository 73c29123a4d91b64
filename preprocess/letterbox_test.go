package preprocess

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pilLetterbox is the letterbox as a YOLO user writes it with PIL: EXIF orientation, RGB,
// scale to fit keeping the aspect ratio (rounded half to even, as ultralytics' LetterBox
// rounds), a bilinear (antialiased) resize, pasted centered on a canvas of the pad value.
// It prints, per job, the HWC bytes and where the image went.
const pilLetterbox = `
import base64, json, sys
from PIL import Image, ImageOps
out = []
for path, W, H, pad in json.load(sys.stdin):
    im = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    w, h = im.size
    r = min(W / w, H / h)
    nw, nh = min(max(round(w * r), 1), W), min(max(round(h * r), 1), H)
    canvas = Image.new("RGB", (W, H), (pad, pad, pad))
    dx, dy = (W - nw) // 2, (H - nh) // 2
    canvas.paste(im.resize((nw, nh), Image.BILINEAR), (dx, dy))
    out.append({"w": w, "h": h, "nw": nw, "nh": nh, "dx": dx, "dy": dy, "pix": base64.b64encode(canvas.tobytes()).decode()})
json.dump(out, sys.stdout)
`

type pilBox struct {
	W, H, NW, NH, DX, DY int
	Pix                  string
}

// runPIL runs a Python script with Debian's interpreter (it has PIL), jobs on its standard
// input as JSON; it skips when there is no such interpreter.
func runPIL(t *testing.T, script string, jobs any, out any) {
	t.Helper()
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no " + py + " with PIL for the reference")
	}
	in, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = strings.NewReader(string(in))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "No module named") {
			t.Skip("PIL is missing: " + stderr.String())
		}
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

// TestLetterboxMatchesPIL: with full_decode the letterboxed slot is PIL's letterbox bit for
// bit, for photos of several aspect ratios and formats (the one stored rotated included), in
// square and wide inputs and both pad values YOLO users pick; with the default DCT-scaled
// decode it is within the classifier's tolerance. The reported geometry is the one PIL used.
func TestLetterboxMatchesPIL(t *testing.T) {
	photos := []string{"opencv_messi5.jpg", "skimage_astronaut.png", "exif_landscape_orient6.jpg", "skimage_rocket.jpg",
		"skimage_camera_gray.png", "skimage_chelsea_cat.png", "go_video-001_progressive.jpeg"}
	sizes := [][3]int{{640, 640, 114}, {320, 240, 0}, {160, 320, 114}}
	var jobs [][4]any
	for _, ph := range photos {
		path := filepath.Join(imagesDir, ph)
		if _, err := os.Stat(path); err != nil {
			t.Skip("shared photos absent (../shared/images): ", err)
		}
		for _, s := range sizes {
			jobs = append(jobs, [4]any{path, s[0], s[1], s[2]})
		}
	}
	var refs []pilBox
	runPIL(t, pilLetterbox, jobs, &refs)
	for i, j := range jobs {
		ref := refs[i]
		want, err := base64.StdEncoding.DecodeString(ref.Pix)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(j[0].(string))
		if err != nil {
			t.Fatal(err)
		}
		W, H := j[1].(int), j[2].(int)
		for _, full := range []bool{true, false} {
			p := mustNew(t, Options{Width: W, Height: H, Mode: ModeLetterbox, Pad: uint8(j[3].(int)), Layout: NHWC, FullDecode: full})
			got := make([]uint8, p.SlotLen())
			g, err := p.ProcessUint8Geometry(context.Background(), data, got)
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.Base(j[0].(string))
			if g.Width != ref.W || g.Height != ref.H || g.OffsetX != float64(ref.DX) || g.OffsetY != float64(ref.DY) ||
				g.ScaleX != float64(ref.NW)/float64(ref.W) || g.ScaleY != float64(ref.NH)/float64(ref.H) {
				t.Errorf("%s %dx%d: geometry %+v, PIL's %+v", name, W, H, g, ref)
			}
			mean, mx := diff(got, want)
			if full && mx != 0 {
				t.Errorf("%s %dx%d full decode: mean|Δ| %.5f max|Δ| %.4f against PIL", name, W, H, mean, mx)
			}
			if !full && mean > 0.01 {
				t.Errorf("%s %dx%d: mean|Δ| %.5f against PIL", name, W, H, mean)
			}
		}
	}
}

// TestLetterboxLayouts: every layout and output type writes the same pixels and padding: the
// float slot is the byte slot expanded, NCHW the planes of NHWC.
func TestLetterboxLayouts(t *testing.T) {
	data := readShared(t, filepath.Join(imagesDir, "skimage_rocket.jpg")) // 640x427: padded above and below
	for _, scale := range []Scale{ScaleNormalized, ScaleRaw} {
		hwc := mustNew(t, Options{Width: 96, Height: 96, Mode: ModeLetterbox, Pad: 114, Layout: NHWC, Scale: scale})
		chw := mustNew(t, Options{Width: 96, Height: 96, Mode: ModeLetterbox, Pad: 114, Scale: scale})
		a, b := make([]uint8, hwc.SlotLen()), make([]uint8, chw.SlotLen())
		if err := hwc.ProcessUint8(data, a); err != nil {
			t.Fatal(err)
		}
		if err := chw.ProcessUint8(data, b); err != nil {
			t.Fatal(err)
		}
		for i := range 96 * 96 {
			for c := range 3 {
				if a[3*i+c] != b[c*96*96+i] {
					t.Fatalf("pixel %d channel %d: NHWC %d, NCHW %d", i, c, a[3*i+c], b[c*96*96+i])
				}
			}
		}
		if b[0] != 114 || b[96*96-1] != 114 || b[48*96+48] == 114 && b[48*96+10] == 114 {
			t.Fatalf("padding: corners %d %d", b[0], b[96*96-1])
		}
		for _, p := range []*Preprocessor{hwc, chw} {
			f := make([]float32, p.SlotLen())
			if err := p.Process(data, f); err != nil {
				t.Fatal(err)
			}
			bytes := make([]uint8, p.SlotLen())
			if err := p.ProcessUint8(data, bytes); err != nil {
				t.Fatal(err)
			}
			e := make([]float32, p.SlotLen())
			if err := p.Expand(e, bytes); err != nil {
				t.Fatal(err)
			}
			for i := range f {
				if math.Float32bits(f[i]) != math.Float32bits(e[i]) {
					t.Fatalf("%s %s: value %d: Process %v, Expand %v", p.opts.Layout, scale, i, f[i], e[i])
				}
			}
		}
	}
}

// TestGeometryOfModes: what each mode reports maps the photo's corners where the slot has
// them.
func TestGeometryOfModes(t *testing.T) {
	data := readShared(t, filepath.Join(imagesDir, "exif_landscape_orient6.jpg")) // stored 1200x1800, shown 1800x1200
	for _, c := range []struct {
		o    Options
		want Geometry
	}{
		{Options{Width: 224, Height: 224}, Geometry{1800, 1200, 6, 384.0 / 1800, 256.0 / 1200, -80, -16}},
		{Options{Width: 300, Height: 200, Mode: ModeStretch}, Geometry{1800, 1200, 6, 300.0 / 1800, 200.0 / 1200, 0, 0}},
		{Options{Width: 640, Height: 640, Mode: ModeLetterbox}, Geometry{1800, 1200, 6, 640.0 / 1800, 427.0 / 1200, 0, 106}},
	} {
		p := mustNew(t, c.o)
		g, err := p.ProcessGeometry(context.Background(), data, make([]float32, p.SlotLen()))
		if err != nil {
			t.Fatal(err)
		}
		if g != c.want {
			t.Errorf("%s: %+v, want %+v", c.o.Mode, g, c.want)
		}
	}
}

// TestLetterboxGeometryAllocs: a letterboxed decode that reports its geometry allocates
// nothing in steady state, as Process does.
func TestLetterboxGeometryAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	data := seedJPEG(t)
	p := mustNew(t, Options{Width: 320, Height: 320, Mode: ModeLetterbox, Pad: 114})
	dst := make([]uint8, p.SlotLen())
	ctx := context.Background()
	if _, err := p.ProcessUint8Geometry(ctx, data, dst); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(30, func() {
		if _, err := p.ProcessUint8Geometry(ctx, data, dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0.5 {
		t.Errorf("ProcessUint8Geometry allocates %.2f times per call in steady state", allocs)
	}
}
