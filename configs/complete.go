package configs

import (
	"fmt"
	"strconv"
	"strings"
)

// ModelFacts is what a model file says about itself, as ONNX Runtime reads it: its inputs and
// outputs, and its metadata_props. cmd/gateway fills it from runtime/ort; this package knows
// nothing of ONNX Runtime.
type ModelFacts struct {
	Inputs, Outputs []TensorFacts
	// Metadata is the model's metadata_props.
	Metadata map[string]string
}

// TensorFacts describes one input or output of a model.
type TensorFacts struct {
	Name  string
	Type  string  // "float32", "uint8", "int64", ...
	Shape []int64 // -1: a dynamic dimension
}

func (t TensorFacts) String() string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = "?"
		if d >= 0 {
			dims[i] = strconv.FormatInt(d, 10)
		}
	}
	return fmt.Sprintf("%s %s [%s]", t.Name, t.Type, strings.Join(dims, " "))
}

// Setting is one model setting as it is served, and where its value came from.
type Setting struct {
	Key   string // the YAML key under the model: "input.width"
	Value string
	// Source is yaml or flag (the configuration), model (its inputs and outputs), metadata
	// KEY (its metadata_props), file (a label file found beside it) or default, then
	// possibly ": " and how.
	Source string
}

// Completion is what Complete found.
type Completion struct {
	// Settings lists the keys a model file may tell, in a fixed order, with their sources.
	Settings []Setting
	// Labels name the classes when no label file does: the model's metadata's, else the class
	// indices ("0", "1", ...). nil when Model.Labels names the file to read.
	Labels []string
	// Classes is the number of scores the model gives an image (a detector: its classes, 0
	// when an NMS model does not say).
	Classes int
	// Embed and Detect are what the model's outputs told of the embed and detect tasks
	// (Model.Task says which applies).
	Embed  EmbedFacts
	Detect DetectFacts
	// Warnings are what the model's metadata asks that the gateway does not do, and missing
	// labels.
	Warnings []string
}

// Complete fills the keys of m the configuration left empty from what the model file says
// (f), else their defaults, checks what the configuration set against the model, and
// validates the result with the server section s. Every error names the key to set. This is
// Triton's auto-complete of a model's configuration, plus the preprocessing contract when an
// exporter wrote it in the metadata (MetadataKeys).
func (m *Model) Complete(f ModelFacts, s Server) (Completion, error) {
	c := &completer{m: m, f: f, meta: metadata(f.Metadata)}
	var p problems
	in, inOK := c.input(&p)
	if inOK {
		c.inputShape(&p, in)
	}
	switch c.task(&p) {
	case TaskClassify:
		if out, ok := c.output(&p); ok {
			c.res.Classes = int(out.Shape[1])
			c.labels()
		}
	case TaskEmbed:
		c.embed(&p)
	case TaskDetect:
		c.detect(&p)
		c.labels()
	}
	c.preprocess(&p)
	if len(p.errs) == 0 {
		m.validate(&p, s, true)
	}
	return c.res, p.err()
}

type completer struct {
	m    *Model
	f    ModelFacts
	meta metadata
	res  Completion
}

// configured is the source of a value the configuration set.
func (c *completer) configured() string {
	if c.m.origin == "" {
		return "yaml"
	}
	return c.m.origin
}

func (c *completer) note(key string, value any, source string) {
	var v string
	switch x := value.(type) {
	case []float32:
		parts := make([]string, len(x))
		for i, f := range x {
			parts[i] = strconv.FormatFloat(float64(f), 'g', -1, 32)
		}
		v = "[" + strings.Join(parts, ", ") + "]"
	default:
		v = fmt.Sprint(x)
	}
	c.res.Settings = append(c.res.Settings, Setting{Key: key, Value: v, Source: source})
}

func (c *completer) warn(format string, args ...any) {
	c.res.Warnings = append(c.res.Warnings, fmt.Sprintf(format, args...))
}

func list(ts []TensorFacts) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

func find(ts []TensorFacts, name string) (TensorFacts, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return TensorFacts{}, false
}

// input picks the image input: the configured one or the model's only one.
func (c *completer) input(p *problems) (TensorFacts, bool) {
	m, ins, f := c.m, c.f.Inputs, c.m.field+".input"
	if len(ins) == 0 {
		p.add(f, "the model has no inputs")
		return TensorFacts{}, false
	}
	if len(ins) > 1 {
		// ONNX Runtime runs a model with every input fed; the gateway feeds one image.
		p.add(f+".name", "the model has %d inputs (%s); the gateway serves models with a single image input", len(ins), list(ins))
		return TensorFacts{}, false
	}
	if m.Input.Name != "" {
		in, ok := find(ins, m.Input.Name)
		if !ok {
			p.add(f+".name", "the model has no input %q (its input: %s): omit input.name to take the model's", m.Input.Name, list(ins))
			return TensorFacts{}, false
		}
		c.note("input.name", in.Name, c.configured())
		return in, true
	}
	m.Input.Name = ins[0].Name
	c.note("input.name", m.Input.Name, "model")
	return ins[0], true
}

// inputShape takes the element type, layout, size and batch axis from the input's shape.
func (c *completer) inputShape(p *problems, in TensorFacts) {
	m, f := c.m, c.m.field+".input"
	switch {
	case m.Input.Type == "":
		if in.Type != "float32" && in.Type != "uint8" {
			p.add(f, "the model's input %s is %s; float32 and uint8 image inputs are served", in.Name, in.Type)
			return
		}
		m.Input.Type = in.Type
		c.note("input.type", in.Type, "model")
	case m.Input.Type != in.Type:
		p.add(f+".type", "input.type is %s, but the model's input %s is %s: omit input.type to take the model's", m.Input.Type, in.Name, in.Type)
		return
	default:
		c.note("input.type", in.Type, c.configured())
	}
	d := in.Shape
	if len(d) != 4 {
		p.add(f, "the model's input %s has %d dimensions; an image input is [batch, 3, height, width] (NCHW) or [batch, height, width, 3] (NHWC)", in, len(d))
		return
	}
	switch m.Input.Layout {
	case "":
		switch {
		case d[1] == 3 && d[3] == 3:
			p.add(f+".layout", "the model's input %s may be NCHW or NHWC: set input.layout", in)
			return
		case d[1] == 3:
			m.Input.Layout = "NCHW"
			c.note("input.layout", "NCHW", "model")
		case d[3] == 3:
			m.Input.Layout = "NHWC"
			c.note("input.layout", "NHWC", "model")
		case d[1] > 0 && d[3] > 0:
			p.add(f, "the model's input %s has no axis of 3 channels; the gateway feeds RGB images", in)
			return
		default:
			m.Input.Layout = defaultLayout
			c.note("input.layout", defaultLayout, "default")
		}
	case "NCHW", "NHWC":
		ch := map[string]int64{"NCHW": d[1], "NHWC": d[3]}[m.Input.Layout]
		if ch != 3 && ch != -1 {
			p.add(f+".layout", "is %s, but the model's input %s has %d channels there: omit input.layout to take the model's", m.Input.Layout, in, ch)
			return
		}
		c.note("input.layout", m.Input.Layout, c.configured())
	default:
		return // Validate reported it
	}
	h, w := d[2], d[3]
	if m.Input.Layout == "NHWC" {
		h, w = d[1], d[2]
	}
	metaH, metaW, metaKey := c.meta.size()
	c.dim(p, "width", &m.Input.Width, w, metaW, metaKey, 0, in)
	c.dim(p, "height", &m.Input.Height, h, metaH, metaKey, m.Input.Width, in)
	c.batchAxis(p, in)
}

// dim fills input.width or input.height: the configuration's (checked against the model),
// the model's, the metadata's when the model's is dynamic, else fallback (height: the
// width) or an error naming the key.
func (c *completer) dim(p *problems, key string, v *int, model, meta int64, metaKey string, fallback int, in TensorFacts) {
	f := c.m.field + ".input." + key
	switch {
	case *v != 0:
		if model > 0 && int64(*v) != model {
			p.add(f, "is %d, but the model's input %s has %s %d: omit input.%s to take the model's", *v, in, key, model, key)
			return
		}
		c.note("input."+key, *v, c.configured())
	case model > 0:
		*v = int(model)
		c.note("input."+key, *v, "model")
	case meta > 0:
		*v = int(meta)
		c.note("input."+key, *v, "metadata "+metaKey)
	case fallback > 0:
		*v = fallback
		c.note("input."+key, *v, "default: input.width")
	default:
		p.add(f, "the model's input %s has a dynamic %s: set input.width and input.height", in, key)
	}
}

// batchAxis checks the input's batch axis against batching.max_batch_size, and takes 1 from a
// model whose batch axis is fixed at 1.
func (c *completer) batchAxis(p *problems, in TensorFacts) {
	m, f := c.m, c.m.field+".batching.max_batch_size"
	b := in.Shape[0]
	switch {
	case b == -1:
		c.noteBatch("default")
	case b == 1 && (!m.set["batching.max_batch_size"] || m.Batching.MaxBatchSize.Auto()):
		m.Batching.MaxBatchSize = 1 // auto: nothing to measure
		c.note("batching.max_batch_size", 1, "model")
	case b == 1 && m.Batching.MaxBatchSize > 1:
		p.add(f, "is %d, but the model's input %s has a batch axis fixed at 1: set 1, or export the model with a dynamic batch axis", m.Batching.MaxBatchSize, in)
	case b == 1:
		c.noteBatch("default")
	default:
		p.add(c.m.field+".input", "the model's input %s has a batch axis fixed at %d: export the model with a dynamic batch axis (or a batch of 1)", in, b)
	}
}

func (c *completer) noteBatch(otherwise string) {
	src := otherwise
	if c.m.set["batching.max_batch_size"] {
		src = c.configured()
	}
	c.note("batching.max_batch_size", c.m.Batching.MaxBatchSize, src)
}

// output picks the score output: the configured one, the model's only one, or its only one
// shaped [batch, classes].
func (c *completer) output(p *problems) (TensorFacts, bool) {
	m, outs, f := c.m, c.f.Outputs, c.m.field+".output"
	var out TensorFacts
	switch {
	case len(outs) == 0:
		p.add(f, "the model has no outputs")
		return out, false
	case m.Output.Name != "":
		var ok bool
		if out, ok = find(outs, m.Output.Name); !ok {
			p.add(f+".name", "the model has no output %q (its outputs: %s)", m.Output.Name, list(outs))
			return out, false
		}
		c.note("output.name", out.Name, c.configured())
	case len(outs) == 1:
		out = outs[0]
		m.Output.Name = out.Name
		c.note("output.name", out.Name, "model")
	default:
		var scores []TensorFacts
		for _, o := range outs {
			if len(o.Shape) == 2 {
				scores = append(scores, o)
			}
		}
		if len(scores) != 1 {
			p.add(f+".name", "the model has %d outputs (%s): set output.name to its scores, shaped [batch, classes] (or task: embed or detect for another kind of model)", len(outs), list(outs))
			return out, false
		}
		out = scores[0]
		m.Output.Name = out.Name
		c.note("output.name", out.Name, "model: its only [batch, classes] output")
	}
	if out.Type != "float32" {
		p.add(f, "the model's output %s is %s; float32 scores are served", out, out.Type)
		return out, false
	}
	if len(out.Shape) != 2 || out.Shape[1] < 1 {
		p.add(f, "the model's output %s is not [batch, classes] with a fixed class count: the gateway serves classifiers' scores (set task: embed for a feature vector, detect for a detector)", out)
		return out, false
	}
	c.note("classes", out.Shape[1], "model")
	return out, true
}

// labels chooses where the class names come from: a label file, the metadata, or indices.
func (c *completer) labels() {
	m := c.m
	if m.Labels != "" {
		src := c.configured()
		if m.labelsFound {
			src = "file"
		}
		c.note("labels", m.Labels, src)
		return
	}
	if key, v, ok := c.meta.first(metadataFor("labels")); ok {
		labels, err := parseLabelList(v)
		switch {
		case err != nil:
			c.warn("metadata %s ignored: cannot read labels from it: %v", key, err)
		case len(labels) != c.res.Classes && c.res.Classes > 0:
			c.warn("metadata %s ignored: %d labels for %d classes", key, len(labels), c.res.Classes)
		default:
			c.res.Labels = labels
			c.note("labels", fmt.Sprintf("%d labels", len(labels)), "metadata "+key)
			return
		}
	}
	if c.res.Classes == 0 { // an NMS model that does not say how many classes it has
		c.note("labels", "class indices", "default")
		c.warn("no labels: answers name classes by index (set labels, or put %s beside the model)", oneOf(labelFiles()))
		return
	}
	c.res.Labels = make([]string, c.res.Classes)
	for i := range c.res.Labels {
		c.res.Labels[i] = strconv.Itoa(i)
	}
	c.note("labels", "class indices", "default")
	c.warn("no labels: answers name classes by index (set labels, or put %s beside the model)", oneOf(labelFiles()))
}

// preprocess fills the preprocessing contract: the configuration's, else the metadata's,
// else torchvision's ImageNet convention.
func (c *completer) preprocess(p *problems) {
	pp, meta := &c.m.Preprocess, c.meta
	ultra, ultraKey := meta.ultralyticsClassifier()
	if pp.Mode == "" {
		pp.Mode = defaultMode
		src := "default"
		if dec := c.m.Detect.Decoder; c.m.Task == TaskDetect && dec != "" {
			pp.Mode, src = "letterbox", "default: "+dec
			if dec == DecoderBoxesScores {
				pp.Mode = "stretch"
			}
		}
		c.note("preprocess.mode", pp.Mode, src)
	} else {
		c.note("preprocess.mode", pp.Mode, c.configured())
	}
	// crop, then resize (which follows the crop)
	switch {
	case pp.Crop != 0:
		c.note("preprocess.crop", pp.Crop, c.configured())
	case c.metaInt(p, "preprocess.crop", &pp.Crop):
	default:
		pp.Crop = c.m.Input.Width
		c.note("preprocess.crop", pp.Crop, "default: input.width")
	}
	switch {
	case pp.Resize != 0:
		c.note("preprocess.resize", pp.Resize, c.configured())
	case c.metaInt(p, "preprocess.resize", &pp.Resize):
	case ultra && pp.Crop > 0:
		pp.Resize = pp.Crop
		c.note("preprocess.resize", pp.Resize, "metadata "+ultraKey)
	default:
		pp.Resize = defaultResize(pp.Crop)
		c.note("preprocess.resize", pp.Resize, "default: crop x 256/224")
	}
	// Embeddings are compared with each other: a DCT-scaled decode moves a large photo's vector
	// (docs/preprocessing.md, "Embeddings"), so the embed task decodes at full size unless told.
	if c.m.Task == TaskEmbed && !pp.FullDecode && !c.m.set["preprocess.full_decode"] {
		pp.FullDecode = true
		c.note("preprocess.full_decode", true, "default: embed")
	}
	scale, mean, std, rangeKey := meta.pixelRange(c)
	switch {
	case pp.Scale != "":
		c.note("preprocess.scale", pp.Scale, c.configured())
	case scale != "":
		pp.Scale = scale
		c.note("preprocess.scale", pp.Scale, "metadata "+rangeKey)
	default:
		pp.Scale = defaultScale
		c.note("preprocess.scale", pp.Scale, "default")
	}
	for _, v := range []struct {
		key    string
		dst    *[]float32
		rng    []float32
		ultra  float32
		imagen func() []float32
	}{{"preprocess.mean", &pp.Mean, mean, 0, imagenetMean}, {"preprocess.std", &pp.Std, std, 1, imagenetStd}} {
		switch {
		case len(*v.dst) != 0:
			c.note(v.key, *v.dst, c.configured())
		case c.metaFloats(v.key, v.dst):
		case v.rng != nil:
			*v.dst = v.rng
			c.note(v.key, *v.dst, "metadata "+rangeKey)
		case ultra:
			*v.dst = []float32{v.ultra, v.ultra, v.ultra}
			c.note(v.key, *v.dst, "metadata "+ultraKey)
		case c.m.Task == TaskDetect && c.m.Detect.Decoder == DecoderYOLO:
			// Every YOLO exporter's models take x/255.
			*v.dst = []float32{v.ultra, v.ultra, v.ultra}
			c.note(v.key, *v.dst, "default: yolo")
		default:
			*v.dst = v.imagen()
			c.note(v.key, *v.dst, "default")
		}
	}
}

// metaInt fills key from the metadata when it holds it; a value it cannot read is an error
// naming both.
func (c *completer) metaInt(p *problems, key string, dst *int) bool {
	k, v, ok := c.meta.first(metadataFor(key))
	if !ok {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		p.add(c.m.field+"."+key, "the model's metadata %s is %q, not a positive integer: set %s", k, v, key)
		return true
	}
	*dst = n
	c.note(key, n, "metadata "+k)
	return true
}

// metaFloats fills key (mean or std) from the metadata when it holds three numbers; values
// above 1 are in 0..255 units.
func (c *completer) metaFloats(key string, dst *[]float32) bool {
	k, v, ok := c.meta.first(metadataFor(key))
	if !ok {
		return false
	}
	fs, err := parseFloats(v)
	if err != nil || len(fs) != 3 {
		c.warn("metadata %s ignored: want 3 numbers, got %q", k, v)
		return false
	}
	div := 1.0
	if fs[0] > 1 || fs[1] > 1 || fs[2] > 1 {
		div = 255
	}
	*dst = []float32{float32(fs[0] / div), float32(fs[1] / div), float32(fs[2] / div)}
	c.note(key, *dst, "metadata "+k)
	return true
}
