package answer

import "github.com/imagegate/imagegate/postprocess"

// The post-processed detections as Open Inference Protocol outputs, answered when a request
// asks for them (parameter detections: true) instead of the model's raw outputs. For B images
// and K the most detections any of them has: boxes in the original image's pixels, rows past
// an image's count zero (labels empty).
const (
	DetectionBoxes   = "detection_boxes"   // FP32 [B, K, 4]: x1, y1, x2, y2
	DetectionScores  = "detection_scores"  // FP32 [B, K]
	DetectionClasses = "detection_classes" // INT64 [B, K]: the model's class indices
	DetectionLabels  = "detection_labels"  // BYTES [B, K]: the classes' labels
	NumDetections    = "num_detections"    // INT64 [B]
)

// TensorInfo is an output as metadata describes it: -1 for a dimension of variable size.
type TensorInfo struct {
	Name     string
	Datatype string
	Shape    []int64 // the batch axis included
}

// DetectionOutputs describes the detections' tensors, in the order Detections.Tensors gives them.
func DetectionOutputs() []TensorInfo {
	return []TensorInfo{
		{DetectionBoxes, FP32, []int64{-1, -1, 4}},
		{DetectionScores, FP32, []int64{-1, -1}},
		{DetectionClasses, INT64, []int64{-1, -1}},
		{DetectionLabels, BYTES, []int64{-1, -1}},
		{NumDetections, INT64, []int64{-1}},
	}
}

// IsDetectionOutput reports whether name is one of the detections' tensors.
func IsDetectionOutput(name string) bool {
	for _, o := range DetectionOutputs() {
		if o.Name == name {
			return true
		}
	}
	return false
}

// Detections are one request's detections, image by image, and the memory their tensors are
// built in. Reset it for each request; it is not safe for concurrent use.
type Detections struct {
	// Dets holds every image's detections, one image after another.
	Dets []postprocess.Detection
	ends []int

	vals    []float32 // the tensors' rows
	rows    [][]float32
	strs    []string
	strRows [][]string
	shapes  []int64
}

// maxKeep bounds the detections a Detections keeps between requests.
const maxKeep = 1 << 14

// Reset empties d for a request, keeping its memory unless one request made it large.
func (d *Detections) Reset() {
	if cap(d.Dets) > maxKeep || cap(d.vals) > 8*maxKeep || cap(d.strs) > maxKeep {
		*d = Detections{}
		return
	}
	clear(d.strs) // no label outlives its request
	d.Dets, d.ends, d.vals, d.rows, d.strs, d.strRows, d.shapes = d.Dets[:0], d.ends[:0], d.vals[:0], d.rows[:0], d.strs[:0], d.strRows[:0], d.shapes[:0]
}

// EndImage closes the current image: the detections appended to Dets since the last call are
// its.
func (d *Detections) EndImage() { d.ends = append(d.ends, len(d.Dets)) }

// Images is the number of images closed.
func (d *Detections) Images() int { return len(d.ends) }

// Image returns image i's detections.
func (d *Detections) Image(i int) []postprocess.Detection {
	start := 0
	if i > 0 {
		start = d.ends[i-1]
	}
	return d.Dets[start:d.ends[i]]
}

// Tensors appends the detections' five tensors to dst, in DetectionOutputs' order, labels
// naming the classes (Label). They hold d's memory: valid until d's next Reset.
func (d *Detections) Tensors(dst []Tensor, labels []string) []Tensor {
	b := len(d.ends)
	k := 0
	for i := range b {
		k = max(k, len(d.Image(i)))
	}
	// Boxes, scores, classes and counts as float32 rows, one flat buffer.
	total := len(d.Dets)*6 + b
	if cap(d.vals) < total {
		d.vals = make([]float32, 0, total)
	}
	vals := d.vals[:0]
	rows := d.rows[:0]
	strs := d.strs[:0]
	strRows := d.strRows[:0]
	for _, part := range []int{0, 1, 2, 3} { // boxes, scores, classes, counts
		for i := range b {
			img := d.Image(i)
			start := len(vals)
			switch part {
			case 0:
				for _, x := range img {
					vals = append(vals, x.Box[:]...)
				}
			case 1:
				for _, x := range img {
					vals = append(vals, x.Score)
				}
			case 2:
				for _, x := range img {
					vals = append(vals, float32(x.Class))
				}
			case 3:
				vals = append(vals, float32(len(img)))
			}
			rows = append(rows, vals[start:len(vals):len(vals)])
		}
	}
	for i := range b {
		start := len(strs)
		for _, x := range d.Image(i) {
			strs = append(strs, Label(labels, x.Class))
		}
		strRows = append(strRows, strs[start:len(strs):len(strs)])
	}
	shapes := append(d.shapes[:0], int64(b), int64(k), 4, int64(b), int64(k), int64(b), int64(k), int64(b), int64(k), int64(b))
	d.vals, d.rows, d.strs, d.strRows, d.shapes = vals, rows, strs, strRows, shapes
	return append(dst,
		Tensor{Name: DetectionBoxes, Datatype: FP32, Shape: shapes[0:3], Rows: rows[0:b]},
		Tensor{Name: DetectionScores, Datatype: FP32, Shape: shapes[3:5], Rows: rows[b : 2*b]},
		Tensor{Name: DetectionClasses, Datatype: INT64, Shape: shapes[5:7], Rows: rows[2*b : 3*b]},
		Tensor{Name: DetectionLabels, Datatype: BYTES, Shape: shapes[7:9], Strings: strRows},
		Tensor{Name: NumDetections, Datatype: INT64, Shape: shapes[9:10], Rows: rows[3*b : 4*b]},
	)
}
