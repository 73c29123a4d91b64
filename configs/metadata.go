package configs

import (
	"fmt"
	"strconv"
	"strings"
)

// MetadataKey is a group of metadata_props keys Complete reads (the first present wins) and
// what they fill.
type MetadataKey struct {
	Keys []string
	// Sets is the YAML key (under the model) the value fills where the configuration leaves
	// it empty.
	Sets string
	// Reads says what the value may be.
	Reads string
}

// MetadataKeys lists the metadata_props keys Complete reads (matched ignoring case), for
// docs/configuration.md and Complete itself. ONNX defines the Image.* keys
// (onnx/docs/MetadataProps.md); the others are what exporters commonly write: there is no
// standard key for a classifier's labels or normalization.
func MetadataKeys() []MetadataKey {
	return []MetadataKey{
		{[]string{"labels", "classes", "class_names", "names"}, "labels",
			"a JSON array of names; a JSON object or a Python dict from class index to name (`{0: 'tench', 1: 'goldfish'}`, as Ultralytics writes `names`); or one name per line. Ignored, with a warning, unless it names every class"},
		{[]string{"mean", "preprocess.mean"}, "preprocess.mean",
			"3 numbers (R, G, B) as a JSON or Python list, or separated by commas or spaces; values above 1 are 0..255 units and are divided by 255"},
		{[]string{"std", "preprocess.std"}, "preprocess.std", "as mean"},
		{[]string{"resize", "resize_size", "preprocess.resize"}, "preprocess.resize", "a positive integer"},
		{[]string{"crop", "crop_size", "preprocess.crop"}, "preprocess.crop", "a positive integer"},
		{[]string{"Image.NominalPixelRange"}, "preprocess.scale, preprocess.mean, preprocess.std",
			"ONNX's image metadata: NominalRange_0_255 gives scale raw; Normalized_0_1 mean 0 and std 1; Normalized_1_1 mean 0.5 and std 0.5. NominalRange_16_235 is not served (a warning)"},
		{[]string{"Image.BitmapPixelFormat"}, "(checked)",
			"ONNX's image metadata: the gateway feeds Rgb8; any other format is logged as a warning"},
		{[]string{"imgsz"}, "input.width, input.height",
			"Ultralytics' [height, width], or one number: read when the model's input has a dynamic size"},
		{[]string{"author", "task"}, "preprocess.mean, preprocess.std, preprocess.resize",
			"an Ultralytics classifier (author mentions Ultralytics, task is classify): mean 0 and std 1 (x/255), and resize equal to the crop, as its classify transforms do"},
	}
}

// metadataFor returns the keys that fill sets.
func metadataFor(sets string) []string {
	for _, k := range MetadataKeys() {
		if k.Sets == sets {
			return k.Keys
		}
	}
	panic("configs: no metadata key fills " + sets)
}

// metadata is a model's metadata_props.
type metadata map[string]string

// first returns the first of keys present (ignoring case), with the key as the model spells
// it.
func (md metadata) first(keys []string) (key, value string, ok bool) {
	for _, want := range keys {
		for k, v := range md {
			if strings.EqualFold(k, want) {
				return k, v, true
			}
		}
	}
	return "", "", false
}

// size is the input size the metadata gives (Ultralytics' imgsz), 0 when none.
func (md metadata) size() (h, w int64, key string) {
	key, v, ok := md.first([]string{"imgsz"})
	if !ok {
		return 0, 0, ""
	}
	fs, err := parseFloats(v)
	if err != nil || len(fs) == 0 || len(fs) > 2 {
		return 0, 0, ""
	}
	h, w = int64(fs[0]), int64(fs[len(fs)-1])
	if float64(h) != fs[0] || float64(w) != fs[len(fs)-1] || h < 1 || w < 1 {
		return 0, 0, ""
	}
	return h, w, key
}

// pixelRange reads ONNX's Image.NominalPixelRange and Image.BitmapPixelFormat: the scale,
// mean and std the range implies ("" and nil where it implies none).
func (md metadata) pixelRange(c *completer) (scale string, mean, std []float32, key string) {
	if k, v, ok := md.first([]string{"Image.BitmapPixelFormat"}); ok && !strings.EqualFold(v, "Rgb8") {
		c.warn("metadata %s is %s: the gateway feeds the model RGB pixels", k, v)
	}
	key, v, ok := md.first([]string{"Image.NominalPixelRange"})
	if !ok {
		return "", nil, nil, ""
	}
	switch strings.ToLower(v) {
	case "nominalrange_0_255":
		return "raw", nil, nil, key
	case "normalized_0_1":
		return "", []float32{0, 0, 0}, []float32{1, 1, 1}, key
	case "normalized_1_1":
		return "", []float32{0.5, 0.5, 0.5}, []float32{0.5, 0.5, 0.5}, key
	}
	c.warn("metadata %s is %s: not served, ignored", key, v)
	return "", nil, nil, ""
}

// ultralyticsClassifier reports whether the metadata is an Ultralytics classifier's, whose
// preprocessing is x/255 after a shorter-side resize to the crop size.
func (md metadata) ultralyticsClassifier() (bool, string) {
	_, author, ok1 := md.first([]string{"author"})
	_, task, ok2 := md.first([]string{"task"})
	if ok1 && ok2 && strings.Contains(strings.ToLower(author), "ultralytics") && strings.EqualFold(strings.TrimSpace(task), "classify") {
		return true, "author/task: an Ultralytics classifier"
	}
	return false, ""
}

// parseFloats reads numbers written as a JSON or Python list or tuple, or separated by commas
// or spaces: "[0.485, 0.456, 0.406]", "(0.5, 0.5, 0.5)", "123.675 116.28 103.53".
func parseFloats(v string) ([]float64, error) {
	t := strings.TrimSpace(v)
	if len(t) >= 2 && (t[0] == '[' && t[len(t)-1] == ']' || t[0] == '(' && t[len(t)-1] == ')') {
		t = t[1 : len(t)-1]
	}
	var out []float64
	for _, f := range strings.FieldsFunc(t, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, x)
	}
	return out, nil
}
