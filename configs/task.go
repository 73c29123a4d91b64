package configs

import (
	"slices"
	"strings"
)

// Tasks: what a model answers.
const (
	TaskClassify = "classify"
	TaskEmbed    = "embed"
	TaskDetect   = "detect"
)

// Decoders of the detect task.
const (
	DecoderBoxesScores = "boxes_scores"
	DecoderYOLO        = "yolo"
	DecoderNMS         = "nms"
)

// maxNMSRows: a [batch, K, 6] output with at most this many rows is taken for an NMS model's
// detections (ultralytics' end-to-end exports answer 300), more for YOLO anchors (a 640x640
// YOLO has 8400).
const maxNMSRows = 1000

// DetectFacts is what Complete learned of a detector's outputs, beside the keys it filled:
// what building its decoder needs.
type DetectFacts struct {
	// Anchors is the boxes per image (N) of boxes_scores and yolo, the rows (K) of nms; 0 for
	// nms rows of a dynamic count.
	Anchors int
	// Classes is the score columns of boxes_scores (the background included) and yolo (the
	// objectness not included); 0 for nms (the labels' count, where known, bounds it).
	Classes int
	// Transposed: a yolo output is [batch, N, values] rather than [batch, values, N].
	Transposed bool
	// Packed: an nms model's one output of [batch, K, 6] rows.
	Packed bool
}

// EmbedFacts is what Complete learned of an embedding model's output.
type EmbedFacts struct {
	// Dim is the vector's length.
	Dim int
}

func (m *Model) validateTask(p *problems, complete bool) {
	f, d := m.field, &m.Detect
	oneOf := func(key, v string, allowed ...string) {
		if v != "" && !slices.Contains(allowed, v) {
			p.add(f+"."+key, "must be %s, got %q", strings.Join(allowed, ", "), v)
		}
	}
	oneOf("task", m.Task, TaskClassify, TaskEmbed, TaskDetect)
	if complete && m.Task == "" {
		p.add(f+".task", "must be classify, embed or detect")
	}
	oneOf("detect.decoder", d.Decoder, DecoderBoxesScores, DecoderYOLO, DecoderNMS)
	oneOf("detect.box_format", d.BoxFormat, "xyxy", "cxcywh", "yxyx")
	oneOf("detect.box_units", d.BoxUnits, "normalized", "pixels")
	oneOf("detect.background", d.Background, "auto", "on", "off")
	oneOf("detect.objectness", d.Objectness, "auto", "on", "off")
	if !(d.ScoreThreshold >= 0 && d.ScoreThreshold <= 1) {
		p.add(f+".detect.score_threshold", "must be in [0, 1], got %g", d.ScoreThreshold)
	}
	if !(d.IOUThreshold > 0 && d.IOUThreshold <= 1) {
		p.add(f+".detect.iou_threshold", "must be in (0, 1] (1: no suppression), got %g", d.IOUThreshold)
	}
	if d.MaxDetections < 1 || d.MaxDetections > 10000 {
		p.add(f+".detect.max_detections", "must be in [1, 10000], got %d", d.MaxDetections)
	}
	if d.Decoder == DecoderYOLO && d.BoxFormat != "" && d.BoxFormat != "cxcywh" {
		p.add(f+".detect.box_format", "a YOLO output's boxes are cxcywh, got %q", d.BoxFormat)
	}
}

// embedNames are the words an embedding's output is recognized by.
var embedNames = []string{"embed", "feature", "pool", "vector", "descriptor"}

func embedLike(name string) bool {
	n := strings.ToLower(name)
	return slices.ContainsFunc(embedNames, func(w string) bool { return strings.Contains(n, w) })
}

// task fills task: the configuration's, else the metadata's (an Ultralytics export says its
// task), else what the outputs leave no doubt about, else classify (today's default: output
// then explains what does not fit a classifier, and names task). A classifier's task is
// noted among the settings only when the configuration set it, so that a classifier's
// settings read as before tasks existed.
func (c *completer) task(p *problems) string {
	m := c.m
	if m.Task != "" {
		c.note("task", m.Task, c.configured())
		return m.Task
	}
	if key, v, ok := c.meta.first([]string{"task"}); ok && strings.EqualFold(strings.TrimSpace(v), TaskDetect) {
		m.Task = TaskDetect
		c.note("task", TaskDetect, "metadata "+key)
		return m.Task
	}
	task, why := inferTask(c.f.Outputs)
	if task == "" || task == TaskClassify {
		m.Task = TaskClassify
		return m.Task
	}
	m.Task = task
	c.note("task", task, "model: "+why)
	return task
}

// inferTask says which task the outputs leave no doubt about, and why; "" and a hint when
// they leave it open.
func inferTask(outs []TensorFacts) (task, why string) {
	if len(outs) == 1 {
		o := outs[0]
		switch {
		case (len(o.Shape) == 2 || len(o.Shape) == 4 && o.Shape[2] == 1 && o.Shape[3] == 1) && embedLike(o.Name):
			return TaskEmbed, "its one output " + o.Name + " is a vector named like an embedding"
		case len(o.Shape) == 2:
			return TaskClassify, "its one output is [batch, classes]"
		case len(o.Shape) == 3:
			return TaskDetect, "its one output is [batch, rows, values], a detector's"
		}
		return "", ""
	}
	if dec, _ := inferDecoder(outs); dec != "" {
		return TaskDetect, "its outputs are a detector's (" + dec + ")"
	}
	var vectors []TensorFacts
	for _, o := range outs {
		if len(o.Shape) == 2 {
			vectors = append(vectors, o)
		}
	}
	if len(vectors) == 1 {
		return TaskClassify, "its only [batch, classes] output"
	}
	return "", ""
}

// named returns the output whose name contains one of words (ignoring case), when exactly one
// does.
func named(outs []TensorFacts, words ...string) (TensorFacts, bool) {
	var hit []TensorFacts
	for _, o := range outs {
		n := strings.ToLower(o.Name)
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(n, w) }) {
			hit = append(hit, o)
		}
	}
	if len(hit) == 1 {
		return hit[0], true
	}
	return TensorFacts{}, false
}

// inferDecoder says which decoder the outputs fit without doubt ("" when none).
func inferDecoder(outs []TensorFacts) (string, string) {
	if len(outs) == 1 && len(outs[0].Shape) == 3 {
		rows, vals := outs[0].Shape[1], outs[0].Shape[2]
		if vals == 6 && rows > 0 && rows <= maxNMSRows || vals == 6 && rows < 0 {
			return DecoderNMS, "one [batch, K, 6] output: an NMS model's rows"
		}
		return DecoderYOLO, "one [batch, values, anchors] output"
	}
	_, hasBoxes := named(outs, "box")
	_, hasScores := named(outs, "score", "conf")
	_, hasClasses := named(outs, "class", "label")
	_, hasCount := named(outs, "num", "count")
	switch {
	case hasBoxes && hasScores && (hasClasses || hasCount):
		return DecoderNMS, "outputs named boxes, scores and classes or a count"
	case hasBoxes && hasScores && len(outs) == 2:
		return DecoderBoxesScores, "outputs named boxes and scores"
	}
	return "", ""
}

// embed picks the embedding's output.
func (c *completer) embed(p *problems) {
	m, outs, f := c.m, c.f.Outputs, c.m.field+".embed.output"
	var out TensorFacts
	switch {
	case m.Embed.Output != "":
		var ok bool
		if out, ok = find(outs, m.Embed.Output); !ok {
			p.add(f, "the model has no output %q (its outputs: %s)", m.Embed.Output, list(outs))
			return
		}
		c.note("embed.output", out.Name, c.configured())
	case len(outs) == 1:
		out = outs[0]
		m.Embed.Output = out.Name
		c.note("embed.output", out.Name, "model")
	default:
		var ok bool
		if out, ok = named(outs, embedNames...); !ok {
			p.add(f, "the model has %d outputs (%s): set embed.output to the vector's", len(outs), list(outs))
			return
		}
		m.Embed.Output = out.Name
		c.note("embed.output", out.Name, "model: named like an embedding")
	}
	d := out.Shape
	if out.Type != "float32" || !(len(d) == 2 || len(d) == 4 && d[2] == 1 && d[3] == 1) || d[1] < 1 {
		p.add(f, "the model's output %s is not a float32 vector per image ([batch, D] or [batch, D, 1, 1])", out)
		return
	}
	c.res.Embed.Dim = int(d[1])
	c.note("embed.dim", d[1], "model")
}

// detect fills the detector's keys from its outputs: the decoder, which output is which, and
// their layout.
func (c *completer) detect(p *problems) {
	outs, d, f := c.f.Outputs, &c.m.Detect, c.m.field+".detect"
	if d.Decoder == "" {
		dec, why := inferDecoder(outs)
		if dec == "" {
			p.add(f+".decoder", "the model's outputs (%s) fit no detector layout it knows: set detect.decoder (boxes_scores, yolo or nms) and detect.boxes/scores", list(outs))
			return
		}
		d.Decoder = dec
		c.note("detect.decoder", dec, "model: "+why)
	} else {
		c.note("detect.decoder", d.Decoder, c.configured())
	}
	pick := func(key string, v *string, required bool, ranks []int, words ...string) (TensorFacts, bool) {
		if *v != "" {
			o, ok := find(outs, *v)
			if !ok {
				p.add(f+"."+key, "the model has no output %q (its outputs: %s)", *v, list(outs))
				return o, false
			}
			c.note("detect."+key, o.Name, c.configured())
			return c.checkRank(p, key, o, ranks)
		}
		o, ok := named(outs, words...)
		if !ok && len(outs) == 1 && key == "boxes" {
			o, ok = outs[0], true
		}
		if !ok {
			if required {
				p.add(f+"."+key, "no output of %s is named like it: set detect.%s", list(outs), key)
			}
			return o, false
		}
		*v = o.Name
		c.note("detect."+key, o.Name, "model")
		return c.checkRank(p, key, o, ranks)
	}
	switch d.Decoder {
	case DecoderYOLO:
		c.yolo(p, pick)
	case DecoderBoxesScores:
		boxes, ok1 := pick("boxes", &d.Boxes, true, []int{3}, "box")
		scores, ok2 := pick("scores", &d.Scores, true, []int{3}, "score", "conf")
		if !ok1 || !ok2 {
			return
		}
		if boxes.Shape[2] != 4 || scores.Shape[2] < 1 || boxes.Shape[1] < 1 || boxes.Shape[1] != scores.Shape[1] {
			p.add(f, "boxes_scores needs boxes [batch, N, 4] and scores [batch, N, classes] of fixed N, got %s and %s", boxes, scores)
			return
		}
		c.res.Detect.Anchors, c.res.Detect.Classes = int(boxes.Shape[1]), int(scores.Shape[2])
		c.res.Classes = c.res.Detect.Classes
	case DecoderNMS:
		c.nms(p, pick)
	}
	c.detectUnits()
}

type picker func(key string, v *string, required bool, ranks []int, words ...string) (TensorFacts, bool)

// checkRank checks an output's element type and rank.
func (c *completer) checkRank(p *problems, key string, o TensorFacts, ranks []int) (TensorFacts, bool) {
	types := []string{"float32"}
	if key == "classes" || key == "count" {
		types = []string{"float32", "int64", "int32"}
	}
	if !slices.Contains(types, o.Type) || !slices.Contains(ranks, len(o.Shape)) {
		p.add(c.m.field+".detect."+key, "the model's output %s is not a %s output of rank %v for %s", o, strings.Join(types, "/"), ranks, c.m.Detect.Decoder)
		return o, false
	}
	return o, true
}

func (c *completer) yolo(p *problems, pick picker) {
	d, f := &c.m.Detect, c.m.field+".detect"
	out, ok := pick("boxes", &d.Boxes, true, []int{3}, "output", "pred")
	if !ok {
		return
	}
	a, b := out.Shape[1], out.Shape[2]
	if a < 5 || b < 5 || a == b {
		p.add(f+".boxes", "the model's output %s is not YOLO's [batch, 4+classes, anchors] or [batch, anchors, 4+classes] with fixed sizes", out)
		return
	}
	values, anchors := a, b
	c.res.Detect.Transposed = a > b
	if c.res.Detect.Transposed {
		values, anchors = b, a
	}
	obj := d.Objectness == "on"
	if d.Objectness == "auto" {
		switch n := c.labelCount(); {
		case n > 0 && int64(n) == values-5:
			obj = true
		case n > 0 && int64(n) == values-4:
		default:
			obj = c.res.Detect.Transposed
		}
		state := map[bool]string{true: "on", false: "off"}[obj]
		c.note("detect.objectness", state, "model: the output's layout and the labels' count")
	}
	c.res.Detect.Anchors = int(anchors)
	c.res.Detect.Classes = int(values) - 4
	if obj {
		c.res.Detect.Classes--
	}
	c.res.Classes = c.res.Detect.Classes
	d.Objectness = map[bool]string{true: "on", false: "off"}[obj]
	if d.BoxFormat == "" {
		d.BoxFormat = "cxcywh"
	}
}

func (c *completer) nms(p *problems, pick picker) {
	d, f := &c.m.Detect, c.m.field+".detect"
	if len(c.f.Outputs) == 1 || d.Scores == "" && len(c.f.Outputs) == 1 {
		out, ok := pick("boxes", &d.Boxes, true, []int{3})
		if !ok {
			return
		}
		if out.Shape[2] != 6 {
			p.add(f+".boxes", "the model's output %s is not an NMS model's [batch, K, 6] rows (x1, y1, x2, y2, score, class)", out)
			return
		}
		c.res.Detect.Packed, c.res.Detect.Anchors = true, int(max(out.Shape[1], 0))
		return
	}
	boxes, ok1 := pick("boxes", &d.Boxes, true, []int{3}, "box")
	scores, ok2 := pick("scores", &d.Scores, true, []int{2}, "score", "conf")
	_, _ = pick("classes", &d.Classes, false, []int{2}, "class", "label")
	_, _ = pick("count", &d.Count, false, []int{1, 2}, "num", "count")
	if !ok1 || !ok2 {
		return
	}
	if boxes.Shape[2] != 4 || boxes.Shape[1] != scores.Shape[1] {
		p.add(f, "nms needs boxes [batch, K, 4] and scores [batch, K] of the same K, got %s and %s", boxes, scores)
		return
	}
	c.res.Detect.Anchors = int(max(boxes.Shape[1], 0))
}

// detectUnits fills box_format and box_units from the decoder's conventions.
func (c *completer) detectUnits() {
	d := &c.m.Detect
	if d.BoxFormat == "" {
		d.BoxFormat = "xyxy"
		c.note("detect.box_format", "xyxy", "default")
	}
	if d.BoxUnits == "" {
		d.BoxUnits = "pixels"
		if d.Decoder == DecoderBoxesScores {
			d.BoxUnits = "normalized"
		}
		c.note("detect.box_units", d.BoxUnits, "default: "+d.Decoder)
	}
	if d.Background == "auto" {
		d.Background = "off"
		if d.Decoder == DecoderBoxesScores && c.res.Detect.Classes >= 2 {
			d.Background = "on"
		}
		c.note("detect.background", d.Background, "default: "+d.Decoder)
	}
}

// labelCount is the number of labels the model's label file or metadata give, 0 when
// unknown or unreadable (reading them later reports why).
func (c *completer) labelCount() int {
	if c.m.Labels != "" {
		if l, err := LoadLabels(c.m.Labels); err == nil {
			return len(l)
		}
		return 0
	}
	if _, v, ok := c.meta.first(metadataFor("labels")); ok {
		if l, err := parseLabelList(v); err == nil {
			return len(l)
		}
	}
	return 0
}

// OutputNames are the outputs a session of the completed model runs, in the order its task
// reads them: classify, the scores; embed, the vector; detect, boxes (a YOLO's or a packed NMS
// model's one output), then scores, classes and count where the decoder has them.
func (m *Model) OutputNames() []string {
	switch m.Task {
	case TaskEmbed:
		return []string{m.Embed.Output}
	case TaskDetect:
		d := m.Detect
		names := []string{d.Boxes}
		for _, n := range []string{d.Scores, d.Classes, d.Count} {
			if n != "" {
				names = append(names, n)
			}
		}
		return names
	}
	return []string{m.Output.Name}
}
