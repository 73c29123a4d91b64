package postprocess

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestIoU(t *testing.T) {
	for _, c := range []struct {
		a, b [4]float32
		want float32
	}{
		{[4]float32{0, 0, 10, 10}, [4]float32{0, 0, 10, 10}, 1},
		{[4]float32{0, 0, 10, 10}, [4]float32{5, 0, 15, 10}, 50.0 / 150},
		{[4]float32{0, 0, 10, 10}, [4]float32{10, 0, 20, 10}, 0}, // touching
		{[4]float32{0, 0, 10, 10}, [4]float32{2, 2, 4, 4}, 4.0 / 100},
		{[4]float32{5, 5, 0, 0}, [4]float32{0, 0, 10, 10}, 0}, // inverted: empty
		{[4]float32{0, 0, float32(math.NaN()), 10}, [4]float32{0, 0, 10, 10}, 0},
	} {
		if got := IoU(c.a, c.b); math.Abs(float64(got-c.want)) > 1e-6 {
			t.Errorf("IoU(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// refNMS is textbook NMS: sort, then each kept box suppresses every later box of its class
// that overlaps it too much, in turn.
func refNMS(c []Detection, p Params) []Detection {
	c = slices.Clone(c)
	sortByScore(c)
	dead := make([]bool, len(c))
	var out []Detection
	for i := range c {
		if dead[i] || !(c[i].Score > p.ScoreThreshold) {
			continue
		}
		out = append(out, c[i])
		for j := i + 1; j < len(c); j++ {
			if (p.ClassAgnostic || c[j].Class == c[i].Class) && IoU(c[i].Box, c[j].Box) > p.IOUThreshold {
				dead[j] = true
			}
		}
	}
	return out[:min(len(out), p.MaxDetections)]
}

func randomCandidates(r *rand.Rand, n, classes int) []Detection {
	c := make([]Detection, n)
	for i := range c {
		x, y := r.Float32()*100, r.Float32()*100
		c[i] = Detection{Box: [4]float32{x, y, x + 5 + r.Float32()*30, y + 5 + r.Float32()*30},
			Score: float32(r.IntN(50)) / 50, Class: int32(r.IntN(classes)), index: int32(i)}
	}
	return c
}

func TestNMSMatchesTextbook(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		c := randomCandidates(r, 1+r.IntN(80), 1+r.IntN(3))
		p := Params{ScoreThreshold: float32(r.IntN(5)) / 10, IOUThreshold: 0.1 + r.Float32()*0.8,
			MaxDetections: 1 + r.IntN(40), ClassAgnostic: r.IntN(2) == 0}
		want := refNMS(c, p)
		got := AppendNMS(nil, slices.Clone(c), p)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d, %+v:\ngot  %v\nwant %v", trial, p, got, want)
		}
	}
}

func TestNMSPerClass(t *testing.T) {
	c := []Detection{
		{Box: [4]float32{0, 0, 10, 10}, Score: 0.9, Class: 0},
		{Box: [4]float32{1, 1, 10, 10}, Score: 0.8, Class: 1, index: 1}, // other class: kept
		{Box: [4]float32{1, 1, 10, 10}, Score: 0.7, Class: 0, index: 2}, // suppressed
	}
	p := DefaultParams()
	got := AppendNMS(nil, slices.Clone(c), p)
	if len(got) != 2 || got[0].Class != 0 || got[1].Class != 1 {
		t.Fatalf("per class: %v", got)
	}
	p.ClassAgnostic = true
	if got := AppendNMS(nil, slices.Clone(c), p); len(got) != 1 {
		t.Fatalf("class agnostic: %v", got)
	}
}

// planted is a detection a test writes into a model's output.
type planted struct {
	cx, cy, w, h float32
	class        int
	score        float32
}

// yoloTensor writes planted boxes into a YOLO output of n anchors: anchor i*7+3 holds the i-th
// one; every other anchor scores low.
func yoloTensor(n, classes int, objectness, transposed bool, ps []planted) []float32 {
	v := 4 + classes
	if objectness {
		v++
	}
	out := make([]float32, n*v)
	set := func(i, j int, x float32) {
		if transposed {
			out[i*v+j] = x
		} else {
			out[j*n+i] = x
		}
	}
	first := 4
	if objectness {
		first = 5
	}
	for i := range n {
		set(i, 0, float32(i%50)*3)
		set(i, 1, float32(i%40)*3)
		set(i, 2, 8)
		set(i, 3, 8)
		set(i, first+i%classes, 0.05)
		if objectness {
			set(i, 4, 0.5)
		}
	}
	for k, p := range ps {
		i := k*7 + 3
		set(i, 0, p.cx)
		set(i, 1, p.cy)
		set(i, 2, p.w)
		set(i, 3, p.h)
		set(i, first+i%classes, 0)
		if objectness {
			set(i, 4, 1)
		}
		set(i, first+p.class, p.score)
	}
	return out
}

func TestYOLOLayouts(t *testing.T) {
	ps := []planted{{100, 80, 40, 20, 2, 0.9}, {30, 200, 10, 60, 0, 0.6}, {102, 81, 40, 20, 2, 0.5}} // the third overlaps the first
	for _, obj := range []bool{false, true} {
		for _, tr := range []bool{false, true} {
			d := Decoder{Kind: YOLO, Anchors: 100, Classes: 3, Objectness: obj, Transposed: tr, InputWidth: 320, InputHeight: 320}
			if err := d.Check(); err != nil {
				t.Fatal(err)
			}
			got, err := d.Decode(nil, Sample{Boxes: yoloTensor(100, 3, obj, tr, ps)}, DefaultParams(), &Scratch{})
			if err != nil {
				t.Fatal(err)
			}
			want := []Detection{{Box: [4]float32{80, 70, 120, 90}, Score: 0.9, Class: 2, index: 3}, {Box: [4]float32{25, 170, 35, 230}, Score: 0.6, Class: 0, index: 10}}
			if !slices.Equal(got, want) {
				t.Errorf("objectness %v transposed %v:\ngot  %v\nwant %v", obj, tr, got, want)
			}
		}
	}
}

func TestBoxesScores(t *testing.T) {
	// Three anchors, classes background/face/hand; normalized corner boxes.
	boxes := []float32{0.125, 0.25, 0.375, 0.5, 0.5, 0.5, 0.875, 0.875, 0.13, 0.25, 0.375, 0.5}
	scores := []float32{0.1, 0.9, 0, 0.2, 0.3, 0.75, 0.05, 0.8, 0.15}
	d := Decoder{Kind: BoxesScores, Anchors: 3, Classes: 3, Normalized: true, Background: true, InputWidth: 200, InputHeight: 100}
	p := DefaultParams()
	p.IOUThreshold = 0.3
	got, err := d.Decode(nil, Sample{Boxes: boxes, Scores: scores}, p, &Scratch{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Detection{
		{Box: [4]float32{25, 25, 75, 50}, Score: 0.9, Class: 1},
		{Box: [4]float32{100, 50, 175, 87.5}, Score: 0.75, Class: 2, index: 1},
		{Box: [4]float32{100, 50, 175, 87.5}, Score: 0.3, Class: 1, index: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	// Center form, input pixels, no background: class 0 counts.
	d = Decoder{Kind: BoxesScores, Anchors: 1, Classes: 1, Format: CXCYWH, InputWidth: 10, InputHeight: 10}
	got, err = d.Decode(got[:0], Sample{Boxes: []float32{5, 5, 4, 2}, Scores: []float32{0.5}}, p, &Scratch{})
	if err != nil || len(got) != 1 || got[0].Box != [4]float32{3, 4, 7, 6} || got[0].Class != 0 {
		t.Fatalf("center form: %v %v", got, err)
	}
	if _, err := d.Decode(nil, Sample{Boxes: []float32{1, 2, 3}, Scores: []float32{0.5}}, p, &Scratch{}); !errors.Is(err, ErrShape) {
		t.Fatalf("short boxes: %v", err)
	}
}

func TestNMSModels(t *testing.T) {
	p := DefaultParams()
	p.MaxDetections = 2
	// Separate outputs with a count: the rows past it are padding, whatever they hold.
	d := Decoder{Kind: NMS, InputWidth: 64, InputHeight: 64}
	s := Sample{Boxes: []float32{1, 1, 5, 5, 2, 2, 6, 6, 3, 3, 7, 7, 9, 9, 9, 9}, Scores: []float32{0.5, 0.9, 0.1, 0.99},
		Classes: Float32s(nil, []int64{4, 7, 1, 3}), Count: 3}
	got, err := d.Decode(nil, s, p, &Scratch{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Class != 7 || got[1].Class != 4 || got[0].Box != [4]float32{2, 2, 6, 6} {
		t.Fatalf("separate: %v", got)
	}
	s.Count = 5
	if _, err := d.Decode(nil, s, p, &Scratch{}); !errors.Is(err, ErrShape) {
		t.Fatalf("count past the rows: %v", err)
	}
	// Packed rows, normalized; a negative or fractional class is dropped.
	d = Decoder{Kind: NMS, Packed: true, Normalized: true, Anchors: 3, InputWidth: 100, InputHeight: 50}
	s = Sample{Boxes: []float32{0.1, 0.1, 0.2, 0.2, 0.8, 2, 0, 0, 1, 1, 0.9, -1, 0, 0, 1, 1, 0.9, 1.5}, Count: -1}
	got, err = d.Decode(nil, s, p, &Scratch{})
	if err != nil || len(got) != 1 || got[0].Box != [4]float32{10, 5, 20, 10} || got[0].Class != 2 {
		t.Fatalf("packed: %v %v", got, err)
	}
}

func TestHostileValuesSkipped(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	d := Decoder{Kind: BoxesScores, Anchors: 4, Classes: 1, InputWidth: 10, InputHeight: 10}
	s := Sample{Boxes: []float32{0, 0, 1, 1, nan, 0, 1, 1, 0, 0, inf, 1, 2, 2, 3, 3}, Scores: []float32{nan, 0.9, 0.9, inf}}
	got, err := d.Decode(nil, s, DefaultParams(), &Scratch{})
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v %v, want nothing", got, err)
	}
}

func TestFrameMapLetterbox(t *testing.T) {
	// A 1000x500 photo letterboxed into 640x640: scale 0.64, 320 rows of image, 160 of pad above.
	f := Frame{Width: 1000, Height: 500, ScaleX: 0.64, ScaleY: 0.64, OffsetY: 160}
	dets := []Detection{
		{Box: [4]float32{64, 160 + 32, 128, 160 + 64}}, // inside
		{Box: [4]float32{0, 0, 640, 100}},              // in the top padding: dropped
		{Box: [4]float32{600, 400, 700, 500}},          // clipped to the photo's corner
	}
	got := f.Map(dets)
	want := [][4]float32{{100, 50, 200, 100}, {937.5, 375, 1000, 500}}
	if len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	for i := range got {
		for j := range 4 {
			if math.Abs(float64(got[i].Box[j]-want[i][j])) > 1e-3 {
				t.Fatalf("box %d: got %v, want %v", i, got[i].Box, want[i])
			}
		}
	}
}

// displayed applies EXIF orientation o to a stored point of a ws x hs image: the forward map,
// written from the orientations' definitions (the 0th row and column's places).
func displayed(o int, ws, hs, x, y float32) (float32, float32) {
	switch o {
	case 2:
		return ws - x, y
	case 3:
		return ws - x, hs - y
	case 4:
		return x, hs - y
	case 5:
		return y, x
	case 6: // rotate 90° clockwise
		return hs - y, x
	case 7:
		return hs - y, ws - x
	case 8: // rotate 90° counter-clockwise
		return y, ws - x
	}
	return x, y
}

func TestStoredInvertsOrientation(t *testing.T) {
	const ws, hs = 300, 200
	b := [4]float32{10, 20, 50, 120} // stored
	for o := 1; o <= 8; o++ {
		ax, ay := displayed(o, ws, hs, b[0], b[1])
		bx, by := displayed(o, ws, hs, b[2], b[3])
		d := [4]float32{min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)}
		w, h := ws, hs
		if o >= 5 {
			w, h = hs, ws
		}
		if got := (Frame{Width: w, Height: h, Orientation: o}).Stored(d); got != b {
			t.Errorf("orientation %d: displayed %v back to %v, want %v", o, d, got, b)
		}
	}
}

func TestL2Normalize(t *testing.T) {
	v := []float32{3, 4}
	if !L2Normalize(v) || v[0] != 0.6 || v[1] != 0.8 {
		t.Fatalf("got %v", v)
	}
	z := []float32{0, 0}
	if L2Normalize(z) || z[0] != 0 {
		t.Fatal("zeros")
	}
	if L2Normalize([]float32{1, float32(math.NaN())}) || L2Normalize([]float32{float32(math.Inf(-1))}) {
		t.Fatal("not finite")
	}
	if c := Cosine([]float32{1, 0}, []float32{1, 1}); math.Abs(c-math.Sqrt2/2) > 1e-12 {
		t.Fatal(c)
	}
}

// TestDecodeAllocs: once dst and the scratch have grown, decoding, suppressing and mapping
// allocate nothing.
func TestDecodeAllocs(t *testing.T) {
	ps := []planted{{100, 80, 40, 20, 2, 0.9}, {30, 200, 10, 60, 0, 0.6}}
	d := Decoder{Kind: YOLO, Anchors: 8400, Classes: 80, InputWidth: 640, InputHeight: 640}
	out := yoloTensor(8400, 80, false, false, ps)
	var sc Scratch
	p := DefaultParams()
	p.ScoreThreshold = 0.01 // every anchor a candidate: the sort and NMS run in full
	dst := make([]Detection, 0, 256)
	f := Frame{Width: 1280, Height: 720, ScaleX: 0.5, ScaleY: 0.5, OffsetY: 140}
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		dst, err = d.Decode(dst[:0], Sample{Boxes: out}, p, &sc)
		if err != nil {
			t.Fatal(err)
		}
		dst = f.Map(dst)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decode", allocs)
	}
	if len(dst) == 0 {
		t.Fatal("nothing decoded")
	}
}

func BenchmarkDecodeYOLO(b *testing.B) {
	d := Decoder{Kind: YOLO, Anchors: 8400, Classes: 80, InputWidth: 640, InputHeight: 640}
	out := yoloTensor(8400, 80, false, false, []planted{{100, 80, 40, 20, 2, 0.9}})
	var sc Scratch
	dst := make([]Detection, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = d.Decode(dst[:0], Sample{Boxes: out}, DefaultParams(), &sc)
	}
}

func TestParamsOverride(t *testing.T) {
	base := DefaultParams()
	p, err := base.Override(ParamScoreThreshold, "0.5")
	if err != nil || p.ScoreThreshold != 0.5 || p.IOUThreshold != base.IOUThreshold {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err = p.Override(ParamIOUThreshold, " 0.7 "); err != nil || p.IOUThreshold != 0.7 {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err = p.Override(ParamMaxDetections, "10"); err != nil || p.MaxDetections != 10 {
		t.Fatalf("%+v %v", p, err)
	}
	for _, c := range []struct{ k, v, want string }{
		{ParamScoreThreshold, "NaN", "score_threshold must be a number"},
		{ParamScoreThreshold, "1.5", "score_threshold must be in [0, 1]"},
		{ParamIOUThreshold, "0", "iou_threshold must be in (0, 1]"},
		{ParamIOUThreshold, "x", "iou_threshold must be a number"},
		{ParamMaxDetections, "101", "max_detections must be an integer in 1..100"},
		{ParamMaxDetections, "0", "max_detections must be an integer in 1..100"},
		{"topk", "3", `unknown detection parameter "topk"`},
	} {
		got, err := base.Override(c.k, c.v)
		if err == nil || !strings.Contains(err.Error(), c.want) || got != base {
			t.Errorf("%s=%s: %+v %v, want %q", c.k, c.v, got, err, c.want)
		}
	}
}
