package postprocess

import (
	"cmp"
	"fmt"
	"slices"
)

// Kind is a family of detector outputs.
type Kind uint8

const (
	// BoxesScores is SSD-style: boxes [N, 4] and scores [N, classes] per image, decoded
	// already (no anchors to apply), with or without a background class.
	BoxesScores Kind = iota
	// YOLO is one output per image holding 4 box values (center form, input pixels), an
	// objectness column or not, and class scores for N anchors: [4(+1)+classes, N] as
	// ultralytics v8/v11 export it, or transposed [N, 4(+1)+classes] as YOLOv5's does.
	YOLO
	// NMS is a model with non-maximum suppression built in: boxes [K, 4], scores [K] and
	// classes [K] (optionally a count of the valid rows), or one [K, 6] output of rows
	// x1, y1, x2, y2, score, class (ultralytics' nms=True and end-to-end exports).
	NMS
)

// String is the kind's configuration name.
func (k Kind) String() string {
	switch k {
	case BoxesScores:
		return "boxes_scores"
	case YOLO:
		return "yolo"
	case NMS:
		return "nms"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind reads a kind's configuration name.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "boxes_scores":
		return BoxesScores, nil
	case "yolo":
		return YOLO, nil
	case "nms":
		return NMS, nil
	}
	return 0, fmt.Errorf("postprocess: decoder must be boxes_scores, yolo or nms, got %q", s)
}

// Decoder decodes one detector's outputs. Build it once per model (Check it), use it from any
// number of goroutines.
type Decoder struct {
	Kind Kind
	// Anchors is N, the boxes a BoxesScores or YOLO model scores per image; for NMS the rows
	// per image K, or 0 when the model's output size is dynamic (taken from each run).
	Anchors int
	// Classes is the scores per box: BoxesScores' score columns (the background included),
	// YOLO's class columns (objectness and box not included). NMS: unused.
	Classes int
	// Format is how boxes are written (YOLO: always CXCYWH).
	Format BoxFormat
	// Normalized: boxes are fractions of the input's width and height, not input pixels.
	Normalized bool
	// Background: BoxesScores' class 0 is the background, never answered.
	Background bool
	// Objectness: YOLO's fifth row (or column) is the objectness, multiplied into the class
	// scores (YOLOv5); without it the class scores are final (v8, v11).
	Objectness bool
	// Transposed: YOLO's output is [N, values] (one row per anchor), else [values, N].
	Transposed bool
	// Packed: NMS's one output of [K, 6] rows (x1, y1, x2, y2, score, class).
	Packed bool
	// InputWidth and InputHeight are the model input's size in pixels (Normalized boxes are
	// scaled by them).
	InputWidth, InputHeight int
}

// Check reports what makes the decoder unusable.
func (d *Decoder) Check() error {
	if d.InputWidth < 1 || d.InputHeight < 1 {
		return fmt.Errorf("postprocess: input size %dx%d", d.InputWidth, d.InputHeight)
	}
	switch d.Kind {
	case BoxesScores:
		if d.Anchors < 1 || d.Classes < 1 || d.Background && d.Classes < 2 {
			return fmt.Errorf("postprocess: boxes_scores needs anchors and classes (background %v), got %d and %d", d.Background, d.Anchors, d.Classes)
		}
	case YOLO:
		if d.Anchors < 1 || d.Classes < 1 {
			return fmt.Errorf("postprocess: yolo needs anchors and classes, got %d and %d", d.Anchors, d.Classes)
		}
	case NMS:
		if d.Anchors < 0 {
			return fmt.Errorf("postprocess: nms rows %d", d.Anchors)
		}
	default:
		return fmt.Errorf("postprocess: unknown decoder kind %d", d.Kind)
	}
	return nil
}

// Values is YOLO's values per anchor: 4 box values, the objectness, the class scores.
func (d *Decoder) Values() int {
	if d.Objectness {
		return 5 + d.Classes
	}
	return 4 + d.Classes
}

// Sample is one image's outputs, as the model wrote them (row-major, batch axis removed).
type Sample struct {
	// Boxes: BoxesScores' [N, 4]; YOLO's whole output; NMS' [K, 4], or [K, 6] when Packed.
	Boxes []float32
	// Scores: BoxesScores' [N, Classes]; NMS' [K] (nil when Packed).
	Scores []float32
	// Classes: NMS' [K] class indices as float32 (Float32s converts integer outputs); nil:
	// class 0 for every row (a single-class model), or Packed.
	Classes []float32
	// Count is NMS' number of valid rows; -1: every row.
	Count int
}

// Float32s appends src converted to float32 to dst: integer class outputs (int64, int32) for
// Sample.Classes.
func Float32s[T int64 | int32 | float32 | float64](dst []float32, src []T) []float32 {
	for _, v := range src {
		dst = append(dst, float32(v))
	}
	return dst
}

// Decode appends to dst the detections of one image, in model-input pixels, highest score
// first: candidates above p.ScoreThreshold, per-class non-maximum suppression at
// p.IOUThreshold (not for NMS models: they did it), at most p.MaxDetections. sc is working
// memory (one per goroutine). Shapes that do not match d are errors wrapping ErrShape.
func (d *Decoder) Decode(dst []Detection, s Sample, p Params, sc *Scratch) ([]Detection, error) {
	sc.cand = sc.cand[:0]
	var err error
	switch d.Kind {
	case BoxesScores:
		sc.cand, err = d.boxesScores(sc.cand, s, p.ScoreThreshold)
	case YOLO:
		sc.cand, err = d.yolo(sc.cand, s, p.ScoreThreshold)
	case NMS:
		sc.cand, err = d.nms(sc.cand, s, p.ScoreThreshold)
	default:
		err = fmt.Errorf("postprocess: unknown decoder kind %d", d.Kind)
	}
	if err != nil {
		return dst, err
	}
	if d.Kind == NMS {
		sortByScore(sc.cand)
		return append(dst, sc.cand[:min(len(sc.cand), max(p.MaxDetections, 0))]...), nil
	}
	return AppendNMS(dst, sc.cand, p), nil
}

// scale is what multiplies a box's values into input pixels.
func (d *Decoder) scale() (float32, float32) {
	if d.Normalized {
		return float32(d.InputWidth), float32(d.InputHeight)
	}
	return 1, 1
}

// boxesScores appends SSD-style candidates: every (box, class) whose score is above min, the
// background class left out (as torchvision's and ultraface's post-processing, one candidate
// per class).
func (d *Decoder) boxesScores(c []Detection, s Sample, minScore float32) ([]Detection, error) {
	n, k := d.Anchors, d.Classes
	if len(s.Boxes) != 4*n || len(s.Scores) != n*k {
		return c, fmt.Errorf("%w: boxes_scores expects %d box values and %d scores (%d anchors, %d classes), got %d and %d",
			ErrShape, 4*n, n*k, n, k, len(s.Boxes), len(s.Scores))
	}
	first := 0
	if d.Background {
		first = 1
	}
	sx, sy := d.scale()
	for i := range n {
		row := s.Scores[i*k : (i+1)*k]
		for cl := first; cl < k; cl++ {
			sc := row[cl]
			if !(sc > minScore) || !finite(sc) {
				continue
			}
			x1, y1, x2, y2 := corners(s.Boxes[4*i:4*i+4], d.Format, sx, sy)
			if !finite(x1, y1, x2, y2) {
				continue
			}
			c = append(c, Detection{Box: [4]float32{x1, y1, x2, y2}, Score: sc, Class: int32(cl), index: int32(i)})
		}
	}
	return c, nil
}

// yolo appends YOLO candidates: per anchor its best class (ultralytics' single-label
// selection), scored by the class score, times the objectness for v5.
func (d *Decoder) yolo(c []Detection, s Sample, minScore float32) ([]Detection, error) {
	n, v := d.Anchors, d.Values()
	if len(s.Boxes) != n*v {
		return c, fmt.Errorf("%w: yolo expects %d values (%d anchors x %d), got %d", ErrShape, n*v, n, v, len(s.Boxes))
	}
	// at(i, j): value j of anchor i, in either layout.
	rowStride, colStride := n, 1 // [values, N]: value j of anchor i at j*n+i
	if d.Transposed {
		rowStride, colStride = 1, v // [N, values]: at i*v+j
	}
	first := 4
	if d.Objectness {
		first = 5
	}
	sx, sy := d.scale()
	out := s.Boxes
	for i := range n {
		base := i * colStride
		obj := float32(1)
		if d.Objectness {
			obj = out[base+4*rowStride]
			if !(obj > minScore) { // v5 drops low objectness first
				continue
			}
		}
		best, bestC := float32(0), -1
		for j := first; j < v; j++ {
			if sc := out[base+j*rowStride]; sc > best || bestC < 0 && sc == sc {
				best, bestC = sc, j-first
			}
		}
		score := best * obj
		if bestC < 0 || !(score > minScore) || !finite(score) {
			continue
		}
		b := [4]float32{out[base], out[base+rowStride], out[base+2*rowStride], out[base+3*rowStride]}
		x1, y1, x2, y2 := corners(b[:], CXCYWH, sx, sy)
		if !finite(x1, y1, x2, y2) {
			continue
		}
		c = append(c, Detection{Box: [4]float32{x1, y1, x2, y2}, Score: score, Class: int32(bestC), index: int32(i)})
	}
	return c, nil
}

// nms appends the rows of an NMS model above min.
func (d *Decoder) nms(c []Detection, s Sample, minScore float32) ([]Detection, error) {
	width := 4
	if d.Packed {
		width = 6
	}
	if len(s.Boxes)%width != 0 {
		return c, fmt.Errorf("%w: nms boxes hold %d values, not rows of %d", ErrShape, len(s.Boxes), width)
	}
	k := len(s.Boxes) / width
	if d.Anchors > 0 && k != d.Anchors {
		return c, fmt.Errorf("%w: nms expects %d rows, got %d", ErrShape, d.Anchors, k)
	}
	if !d.Packed && (len(s.Scores) != k || s.Classes != nil && len(s.Classes) != k) {
		return c, fmt.Errorf("%w: nms has %d boxes, %d scores and %d classes", ErrShape, k, len(s.Scores), len(s.Classes))
	}
	n := k
	if s.Count >= 0 {
		if s.Count > k {
			return c, fmt.Errorf("%w: nms counts %d detections in %d rows", ErrShape, s.Count, k)
		}
		n = s.Count
	}
	sx, sy := d.scale()
	for i := range n {
		var sc, cl float32
		if d.Packed {
			sc, cl = s.Boxes[6*i+4], s.Boxes[6*i+5]
		} else {
			sc = s.Scores[i]
			if s.Classes != nil {
				cl = s.Classes[i]
			}
		}
		// A class must be a small non-negative integer (labels are indexed by it).
		if !(sc > minScore) || !finite(sc) || !(cl >= 0 && cl < 1<<24) || cl != float32(int32(cl)) {
			continue
		}
		x1, y1, x2, y2 := corners(s.Boxes[width*i:width*i+4], d.Format, sx, sy)
		if !finite(x1, y1, x2, y2) {
			continue
		}
		c = append(c, Detection{Box: [4]float32{x1, y1, x2, y2}, Score: sc, Class: int32(cl), index: int32(i)})
	}
	return c, nil
}

// sortByScore orders detections by score, highest first, ties by their anchor.
func sortByScore(d []Detection) {
	slices.SortFunc(d, func(a, b Detection) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.index, b.index)
	})
}
