package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/imagegate/imagegate/gateway/internal/answer"
	"github.com/imagegate/imagegate/gateway/internal/modeldesc"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/postprocess"
	"github.com/imagegate/imagegate/preprocess"
)

// A model's task (ModelOptions.Task): how its runners' outputs are read and how they are
// answered. Classification is the pipeline's own (predict.go, v2.go, grpc.go write a
// classifier's scores); embeddings and detections are post-processed here, on the request's
// goroutine once its samples ran (the batch run only copies each sample's outputs into its
// job), and written by internal/answer: the article's API answers {"embedding": [...]} and
// {"detections": [...]}, the Open Inference Protocol the model's raw outputs, or with the
// request parameter detections: true the detections' five tensors.

// modelTask is a model's task and what answering it needs.
type modelTask struct {
	task      Task
	normalize bool                // embed
	dec       postprocess.Decoder // detect
	params    postprocess.Params
	// boxes, scores, classes and count are the outputs (indices) the decoder reads; -1: none.
	boxes, scores, classes, count int
}

// newModelTask checks the runners' outputs against o's task, for a model whose input is
// inW x inH pixels.
func newModelTask(o ModelOptions, outs []Output, inW, inH int) (modelTask, error) {
	t := modelTask{task: o.Task, normalize: o.Normalize, boxes: -1, scores: -1, classes: -1, count: -1}
	dynamic := false // outputs may have a dynamic dimension (a model with NMS built in)
	switch o.Task {
	case TaskClassify:
		// Its first output is the scores, one per label.
		if s := outs[0].Size(); s > 0 && len(o.Labels) != s {
			return t, fmt.Errorf("%d labels, but the model's output has %d classes", len(o.Labels), s)
		}
	case TaskEmbed:
		if len(outs) != 1 {
			return t, fmt.Errorf("an embedding model's runners answer its one vector, these answer %d outputs", len(outs))
		}
	case TaskDetect:
		var err error
		if t, err = detectTask(t, o.Detect, outs, inW, inH); err != nil {
			return t, err
		}
		dynamic = t.dec.Kind == postprocess.NMS
	default:
		return t, fmt.Errorf("unknown task %d", o.Task)
	}
	for _, out := range outs {
		if out.Size() > 0 {
			continue
		}
		if !dynamic || !oneDynamic(out.Shape) {
			return t, fmt.Errorf("output %q has per-sample shape %v: every dimension but the batch must be known (a model with NMS built in may have one of variable size)", out.Name, out.Shape)
		}
	}
	return t, nil
}

// oneDynamic reports whether exactly one dimension of shape is unknown (the others positive).
func oneDynamic(shape []int64) bool {
	n := 0
	for _, d := range shape {
		switch {
		case d < 0:
			n++
		case d == 0:
			return false
		}
	}
	return n == 1
}

// detectTask checks a detector's decoder and outputs.
func detectTask(t modelTask, o DetectOptions, outs []Output, inW, inH int) (modelTask, error) {
	t.dec, t.params = o.Decoder, o.Params
	t.dec.InputWidth, t.dec.InputHeight = inW, inH
	if err := t.dec.Check(); err != nil {
		return t, err
	}
	if err := t.params.Check(); err != nil {
		return t, err
	}
	index := func(name string, required bool) (int, error) {
		if name == "" && !required {
			return -1, nil
		}
		i := slices.IndexFunc(outs, func(x Output) bool { return x.Name == name })
		if i < 0 {
			return -1, fmt.Errorf("the detector's output %q is not among the runners' (%s)", name, outputList(outs))
		}
		return i, nil
	}
	var err error
	if t.boxes, err = index(o.Boxes, true); err != nil {
		return t, err
	}
	if t.scores, err = index(o.Scores, t.dec.Kind == postprocess.BoxesScores || t.dec.Kind == postprocess.NMS && !t.dec.Packed); err != nil {
		return t, err
	}
	if t.classes, err = index(o.Classes, false); err != nil {
		return t, err
	}
	if t.count, err = index(o.Count, false); err != nil {
		return t, err
	}
	d := &t.dec
	size := func(i int) int { return outs[i].Size() }
	switch d.Kind {
	case postprocess.BoxesScores:
		if size(t.boxes) != 4*d.Anchors || size(t.scores) != d.Anchors*d.Classes {
			return t, fmt.Errorf("boxes_scores with %d anchors and %d classes needs boxes [%d 4] and scores [%d %d] per image, the outputs are %s and %s",
				d.Anchors, d.Classes, d.Anchors, d.Anchors, d.Classes, outs[t.boxes], outs[t.scores])
		}
	case postprocess.YOLO:
		if size(t.boxes) != d.Anchors*d.Values() {
			return t, fmt.Errorf("yolo with %d anchors of %d values needs %d values per image, the output is %s", d.Anchors, d.Values(), d.Anchors*d.Values(), outs[t.boxes])
		}
	case postprocess.NMS:
		width := int64(4)
		if d.Packed {
			width = 6
		}
		if s := outs[t.boxes].Shape; len(s) == 0 || s[len(s)-1] != width {
			return t, fmt.Errorf("nms needs boxes of rows of %d values, the output is %s", width, outs[t.boxes])
		}
		if t.count >= 0 && size(t.count) != 1 {
			return t, fmt.Errorf("nms's count must be one value per image, the output is %s", outs[t.count])
		}
	}
	return t, nil
}

func (o Output) String() string { return fmt.Sprintf("%s %v", o.Name, o.Shape) }

func outputList(outs []Output) string {
	s := make([]string, len(outs))
	for i, o := range outs {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

// taskRequest is a request's part of its model's task: the detection selection it asked for
// and its answer's working memory, pooled with the request (reset keeps the memory).
type taskRequest struct {
	params     postprocess.Params
	detections bool // the Open Inference Protocol's answer is the post-processed detections
	det        answer.Detections
	sc         postprocess.Scratch
	tensors    []answer.Tensor
	rows       [][]float32
	shapes     []int64
}

func (t *taskRequest) reset() {
	t.det.Reset()
	t.sc.Release()
	clear(t.rows) // no output of this request is reachable from the pool
	*t = taskRequest{det: t.det, sc: t.sc, tensors: t.tensors[:0], rows: t.rows[:0], shapes: t.shapes[:0]}
}

// errOutput: a model's output that cannot be answered (an embedding of zeros or NaN, a
// detector's tensors that do not add up): a 500, counted as internal, logged.
var errOutput = errors.New("gateway: the model's output cannot be answered")

// selection applies a request's detection parameter (score_threshold, iou_threshold,
// max_detections) to its selection; a model that is no detector refuses it.
func (r *request) selection(key, value string) error {
	if r.m.task.task != TaskDetect {
		return wire.Malformed("%s applies to detection models; model %s's task is %s", key, r.m.name, r.m.task.task)
	}
	p, err := r.task.params.Override(key, value)
	if err != nil {
		return wire.Malformed("%v", err)
	}
	r.task.params = p
	return nil
}

// oipParams applies an Open Inference Protocol request's parameters: detections and the
// selection's. Others (timeout, priority: the transport's; Triton's sequence parameters) are
// not the task's.
func (r *request) oipParams() error {
	for _, p := range r.v2.Params {
		switch k := string(p.Key); k {
		case "detections":
			if r.m.task.task != TaskDetect {
				return wire.Malformed("parameter detections applies to detection models; model %s's task is %s", r.m.name, r.m.task.task)
			}
			switch string(p.Value) {
			case "true":
				r.task.detections = true
			case "false":
				r.task.detections = false
			default:
				return wire.Malformed("parameter detections must be true or false, got %q", wire.Truncate(string(p.Value), 20))
			}
		case postprocess.ParamScoreThreshold, postprocess.ParamIOUThreshold, postprocess.ParamMaxDetections:
			if err := r.selection(k, string(p.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkOutputs checks the outputs an Open Inference Protocol request of a model that is no
// classifier names: its raw outputs, or the detections' with parameter detections.
func (r *request) checkOutputs() error {
	for i, o := range r.v2.Outs {
		name := string(o.Name)
		if o.Classification > 0 {
			return wire.Malformed("output %q: classification applies to a classifier's scores; model %s's task is %s", wire.Truncate(name, 60), r.m.name, r.m.task.task)
		}
		known := slices.ContainsFunc(r.m.outputs, func(x Output) bool { return x.Name == name })
		if r.task.detections {
			known = answer.IsDetectionOutput(name)
		}
		if !known {
			return wire.Malformed("unknown output %q (the outputs: %s)", wire.Truncate(name, 60), strings.Join(r.outputNames(), ", "))
		}
		for _, p := range r.v2.Outs[:i] {
			if string(p.Name) == name {
				return wire.Malformed("output %q is requested twice", wire.Truncate(name, 60))
			}
		}
	}
	return nil
}

// outputNames are the outputs the request may name.
func (r *request) outputNames() []string {
	var names []string
	if r.task.detections {
		for _, o := range answer.DetectionOutputs() {
			names = append(names, o.Name)
		}
		return names
	}
	for _, o := range r.m.outputs {
		names = append(names, o.Name)
	}
	return names
}

// postprocess turns the samples' outputs into the task's answer: each embedding checked (and
// normalized when configured), in its job's memory; each image's detections decoded, selected
// and mapped back to its pixels, into r.task.det. Nothing to do for a classifier.
func (r *request) postprocess() error {
	m, t := r.m, &r.task
	n := r.samples.len()
	switch m.task.task {
	case TaskEmbed:
		for i := range n {
			v := r.samples.output(i, 0)
			if m.task.normalize {
				if !postprocess.L2Normalize(v) {
					return fmt.Errorf("%w: sample %d's vector of %d values is all zeros or holds NaN or an infinity: it has no direction to normalize (embed.normalize)", errOutput, i, len(v))
				}
				continue
			}
			if !finite(v) {
				return fmt.Errorf("%w: sample %d's vector holds NaN or an infinity", errOutput, i)
			}
		}
	case TaskDetect:
		t.det.Reset()
		for i := range n {
			if err := r.detect(i); err != nil {
				return fmt.Errorf("%w: sample %d: %w", errOutput, i, err)
			}
		}
	}
	return nil
}

// detect appends sample i's detections to r.task.det.
func (r *request) detect(i int) error {
	mt, t := &r.m.task, &r.task
	out := func(k int) []float32 {
		if k < 0 {
			return nil
		}
		return r.samples.output(i, k)
	}
	s := postprocess.Sample{Boxes: out(mt.boxes), Scores: out(mt.scores), Classes: out(mt.classes), Count: -1}
	if mt.count >= 0 {
		c := out(mt.count)[0]
		if !(c >= 0 && c < 1<<24) {
			return fmt.Errorf("the model counts %v detections", c)
		}
		s.Count = int(c)
	}
	start := len(t.det.Dets)
	dets, err := mt.dec.Decode(t.det.Dets, s, t.params, &t.sc)
	if err != nil {
		return err
	}
	kept := frame(r.samples.geometry(i), mt.dec).Map(dets[start:]) // in place
	t.det.Dets = dets[:start+len(kept)]
	t.det.EndImage()
	return nil
}

// frame is where an image went in the model's input: its decode's geometry, or for a sample
// sent as a tensor (no geometry) the input itself.
func frame(g preprocess.Geometry, dec postprocess.Decoder) postprocess.Frame {
	if g.ScaleX == 0 {
		return postprocess.Frame{Width: dec.InputWidth, Height: dec.InputHeight, ScaleX: 1, ScaleY: 1}
	}
	return postprocess.Frame{Width: g.Width, Height: g.Height, ScaleX: g.ScaleX, ScaleY: g.ScaleY,
		OffsetX: g.OffsetX, OffsetY: g.OffsetY, Orientation: g.Orientation}
}

func finite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// appendTaskJSON appends the article's API's answer of an embedding or a detector (the first
// sample's: a predict request carries one image).
func (r *request) appendTaskJSON(b []byte) []byte {
	if r.m.task.task == TaskEmbed {
		return answer.AppendEmbedding(b, r.samples.output(0, 0))
	}
	return answer.AppendDetections(b, r.task.det.Image(0), r.m.labels)
}

// answerTensors are the Open Inference Protocol outputs of a request of a model that is no
// classifier: the detections' tensors, or the model's raw outputs (an embedding as
// post-processed), each stacked along the batch axis; a dynamic dimension is the largest of
// the samples' (shorter samples padded with zeros).
func (r *request) answerTensors() []answer.Tensor {
	t, m := &r.task, r.m
	t.tensors = t.tensors[:0]
	if t.detections {
		return t.det.Tensors(t.tensors, m.labels)
	}
	n := r.samples.len()
	for k, o := range m.outputs {
		start := len(t.rows)
		longest := 0
		for i := range n {
			row := r.samples.output(i, k)
			t.rows = append(t.rows, row)
			longest = max(longest, len(row))
		}
		s0 := len(t.shapes)
		t.shapes = append(t.shapes, int64(n))
		fixed := 1
		for _, d := range o.Shape {
			if d > 0 {
				fixed *= int(d)
			}
		}
		for _, d := range o.Shape {
			if d < 0 {
				d = int64(longest / fixed)
			}
			t.shapes = append(t.shapes, d)
		}
		dt := o.Datatype
		if dt == "" {
			dt = answer.FP32
		}
		t.tensors = append(t.tensors, answer.Tensor{Name: o.Name, Datatype: dt, Shape: t.shapes[s0:len(t.shapes):len(t.shapes)], Rows: t.rows[start:len(t.rows):len(t.rows)]})
	}
	return t.tensors
}

// describe is what the model's metadata and configuration list as its outputs: a classifier's
// scores, an embedding model's vector, a detector's raw outputs (a dynamic dimension -1).
func (t *modelTask) describe(outs []Output) []modeldesc.Tensor {
	if t.task == TaskClassify {
		outs = outs[:1]
	}
	d := make([]modeldesc.Tensor, len(outs))
	for i, o := range outs {
		d[i] = modeldesc.Tensor{Name: o.Name, Datatype: cmp.Or(o.Datatype, answer.FP32), Shape: o.Shape}
	}
	return d
}

// properties are what the metadata tells of the task: its name and, for a detector, the
// outputs a request may ask for instead of the raw ones.
func (t *modelTask) properties() map[string]string {
	p := map[string]string{"task": t.task.String()}
	switch t.task {
	case TaskEmbed:
		p["normalize"] = strconv.FormatBool(t.normalize)
	case TaskDetect:
		var outs []string
		for _, o := range answer.DetectionOutputs() {
			outs = append(outs, fmt.Sprintf("%s %s %v", o.Name, o.Datatype, o.Shape))
		}
		p["detections"] = "request parameter detections: true answers " + strings.Join(outs, ", ") +
			" (boxes x1, y1, x2, y2 in the image's pixels)"
		p[postprocess.ParamScoreThreshold] = strconv.FormatFloat(float64(t.params.ScoreThreshold), 'g', -1, 32)
		p[postprocess.ParamIOUThreshold] = strconv.FormatFloat(float64(t.params.IOUThreshold), 'g', -1, 32)
		p[postprocess.ParamMaxDetections] = strconv.Itoa(t.params.MaxDetections)
	}
	return p
}
