package postprocess

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrShape: an output tensor's size does not match what its decoder was built for (a model
// that answers other shapes than it declared, or a count past its tensor).
var ErrShape = errors.New("postprocess: output shape does not match the decoder")

// Detection is one detected object: its box in corner form (x1, y1, x2, y2; in model-input
// pixels after decoding, in the original image's pixels after Frame.Map), its score and the
// model's class index.
type Detection struct {
	Box   [4]float32
	Score float32
	Class int32
	// index is the anchor (or row) the detection came from: ties of score are broken by it, so
	// the order does not depend on the sort.
	index int32
}

// BoxFormat is how a model writes a box.
type BoxFormat uint8

const (
	// XYXY is corner form: x1, y1, x2, y2 (SSD exporters, ultraface, NMS-included models).
	XYXY BoxFormat = iota
	// CXCYWH is center form: center x, center y, width, height (YOLO; some SSD exports).
	CXCYWH
	// YXYX is corner form with y first: y1, x1, y2, x2 (TensorFlow's detection API).
	YXYX
)

// String is the format's configuration name.
func (f BoxFormat) String() string {
	switch f {
	case XYXY:
		return "xyxy"
	case CXCYWH:
		return "cxcywh"
	case YXYX:
		return "yxyx"
	}
	return fmt.Sprintf("BoxFormat(%d)", uint8(f))
}

// ParseBoxFormat reads a format's configuration name.
func ParseBoxFormat(s string) (BoxFormat, error) {
	switch s {
	case "xyxy":
		return XYXY, nil
	case "cxcywh":
		return CXCYWH, nil
	case "yxyx":
		return YXYX, nil
	}
	return 0, fmt.Errorf("postprocess: box format must be xyxy, cxcywh or yxyx, got %q", s)
}

// corners converts one box of format f to corner form, scaled by sx, sy.
func corners(b []float32, f BoxFormat, sx, sy float32) (x1, y1, x2, y2 float32) {
	switch f {
	case CXCYWH:
		cx, cy, hw, hh := b[0], b[1], b[2]/2, b[3]/2
		x1, y1, x2, y2 = cx-hw, cy-hh, cx+hw, cy+hh
	case YXYX:
		y1, x1, y2, x2 = b[0], b[1], b[2], b[3]
	default:
		x1, y1, x2, y2 = b[0], b[1], b[2], b[3]
	}
	return x1 * sx, y1 * sy, x2 * sx, y2 * sy
}

// finite reports whether every value is a finite number: NaN and infinities from a broken or
// hostile model are dropped, never answered (JSON cannot carry them).
func finite(v ...float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// Params are the selection's knobs, per request where the caller allows it.
type Params struct {
	// ScoreThreshold: candidates scoring at or below it are dropped (a score above it is kept).
	ScoreThreshold float32
	// IOUThreshold: a candidate overlapping a kept detection of its class (of any class with
	// ClassAgnostic) by more than this intersection over union is suppressed. 1 or more: no
	// suppression.
	IOUThreshold float32
	// MaxDetections bounds the detections answered per image (the highest scores).
	MaxDetections int
	// ClassAgnostic suppresses overlaps across classes too.
	ClassAgnostic bool
}

// Defaults of Params (DefaultParams), the values ultralytics' exporters and predictors use for
// YOLO models; the gateway's configuration documents them.
const (
	DefaultScoreThreshold = 0.25
	DefaultIOUThreshold   = 0.45
	DefaultMaxDetections  = 100
	// MaxDetectionsLimit bounds MaxDetections: NMS costs candidates x kept comparisons.
	MaxDetectionsLimit = 10000
)

// DefaultParams returns the default selection.
func DefaultParams() Params {
	return Params{ScoreThreshold: DefaultScoreThreshold, IOUThreshold: DefaultIOUThreshold, MaxDetections: DefaultMaxDetections}
}

// Check reports the first parameter out of range, naming it as the configuration does.
func (p Params) Check() error {
	switch {
	case !(p.ScoreThreshold >= 0 && p.ScoreThreshold <= 1):
		return fmt.Errorf("score_threshold must be in [0, 1], got %v", p.ScoreThreshold)
	case !(p.IOUThreshold > 0 && p.IOUThreshold <= 1):
		return fmt.Errorf("iou_threshold must be in (0, 1], got %v", p.IOUThreshold)
	case p.MaxDetections < 1 || p.MaxDetections > MaxDetectionsLimit:
		return fmt.Errorf("max_detections must be in 1..%d, got %d", MaxDetectionsLimit, p.MaxDetections)
	}
	return nil
}

// Scratch is the working memory of Decode: candidates before NMS. Reuse one per goroutine;
// the zero value is ready. It holds no meaning between calls.
type Scratch struct {
	cand []Detection
}

// maxScratchKeep bounds the candidates a Scratch keeps between calls (Release).
const maxScratchKeep = 1 << 16

// Release drops a Scratch's memory when one call made it larger than a pool should keep.
func (s *Scratch) Release() {
	if cap(s.cand) > maxScratchKeep {
		s.cand = nil
	}
}

// Request parameters: what a request may set for itself (query parameters of /predict/,
// parameters of an Open Inference Protocol request), by these names.
const (
	ParamScoreThreshold = "score_threshold"
	ParamIOUThreshold   = "iou_threshold"
	ParamMaxDetections  = "max_detections"
)

// Override returns p with one request parameter applied, its value as the request spelled it.
// The thresholds may take any value in range; max_detections may only lower p's (the bound
// on what a request costs is the configuration's). Errors name the parameter and say what it
// takes (a 400 for the request); a key that is none of the three is an error too.
func (p Params) Override(key, value string) (Params, error) {
	switch key {
	case ParamScoreThreshold, ParamIOUThreshold:
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 32)
		if err != nil || math.IsNaN(v) {
			return p, fmt.Errorf("%s must be a number, got %q", key, value)
		}
		q := p
		if key == ParamScoreThreshold {
			q.ScoreThreshold = float32(v)
		} else {
			q.IOUThreshold = float32(v)
		}
		if err := q.Check(); err != nil {
			return p, err
		}
		return q, nil
	case ParamMaxDetections:
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || n < 1 || n > p.MaxDetections {
			return p, fmt.Errorf("%s must be an integer in 1..%d, got %q", key, p.MaxDetections, value)
		}
		p.MaxDetections = n
		return p, nil
	}
	return p, fmt.Errorf("unknown detection parameter %q (%s, %s or %s)", key, ParamScoreThreshold, ParamIOUThreshold, ParamMaxDetections)
}
