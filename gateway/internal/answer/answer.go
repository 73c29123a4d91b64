package answer

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/postprocess"
)

// Open Inference Protocol datatypes of the tensors written here.
const (
	FP32  = "FP32"
	INT64 = "INT64"
	INT32 = "INT32"
	BYTES = "BYTES"
)

// Tensor is one output tensor of an answer: n samples stacked along its first axis.
type Tensor struct {
	Name     string
	Datatype string  // FP32, INT64, INT32 or BYTES
	Shape    []int64 // [n, ...]
	// Rows are the samples' values (FP32, INT64, INT32: an integer output's values are held
	// as float32, exact up to 2^24), one row each; a row shorter than the shape's is padded
	// with zeros (a detector's images with fewer detections than the batch's most).
	Rows [][]float32
	// Strings are a BYTES tensor's samples' elements, padded with empty strings alike.
	Strings [][]string
}

// RowLen is the values of one sample: the product of the shape after the batch axis.
func (t *Tensor) RowLen() int {
	n := 1
	for _, d := range t.Shape[1:] {
		n *= int(d)
	}
	return n
}

// AppendHeader appends the tensor's JSON description, without its closing brace:
// {"name":...,"datatype":...,"shape":[...]
func AppendHeader(b []byte, t *Tensor) []byte {
	b = append(b, `{"name":`...)
	b = wire.AppendJSONString(b, t.Name)
	b = append(b, `,"datatype":"`...)
	b = append(b, t.Datatype...)
	b = append(b, `","shape":[`...)
	for i, d := range t.Shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return append(b, ']')
}

// AppendJSONData appends the tensor's values as a JSON array, flattened in row-major order.
func AppendJSONData(b []byte, t *Tensor) []byte {
	b = append(b, '[')
	first := true
	sep := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	k := t.RowLen()
	if t.Datatype == BYTES {
		for _, row := range t.Strings {
			for j := range k {
				sep()
				if j < len(row) {
					b = wire.AppendJSONString(b, row[j])
				} else {
					b = append(b, `""`...)
				}
			}
		}
		return append(b, ']')
	}
	for _, row := range t.Rows {
		for j := range k {
			sep()
			var v float32
			if j < len(row) {
				v = row[j]
			}
			if t.Datatype == FP32 {
				b = wire.AppendJSONFloat32(b, v)
			} else {
				b = strconv.AppendInt(b, toInt(v), 10)
			}
		}
	}
	return append(b, ']')
}

// AppendBinary appends the tensor's values as binary tensor data: little-endian values of
// its datatype, or for BYTES each element's 4-byte little-endian length and its bytes (the
// framing of gRPC's raw_output_contents too).
func AppendBinary(b []byte, t *Tensor) []byte {
	k := t.RowLen()
	if t.Datatype == BYTES {
		for _, row := range t.Strings {
			for j := range k {
				var s string
				if j < len(row) {
					s = row[j]
				}
				b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
				b = append(b, s...)
			}
		}
		return b
	}
	for _, row := range t.Rows {
		for j := range k {
			var v float32
			if j < len(row) {
				v = row[j]
			}
			switch t.Datatype {
			case INT64:
				b = binary.LittleEndian.AppendUint64(b, uint64(toInt(v)))
			case INT32:
				b = binary.LittleEndian.AppendUint32(b, uint32(int32(toInt(v))))
			default:
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		}
	}
	return b
}

// toInt is an integer output's value (held as float32) as an integer; NaN reads as 0.
func toInt(v float32) int64 {
	if v != v {
		return 0
	}
	return int64(v)
}

// AppendEmbedding appends the article's API's answer for an embedding: {"embedding":[...]}.
func AppendEmbedding(b []byte, v []float32) []byte {
	b = append(b, `{"embedding":[`...)
	for i, f := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendJSONFloat32(b, f)
	}
	return append(b, "]}"...)
}

// Label names class c: labels[c], or its index where the labels do not reach it.
func Label(labels []string, c int32) string {
	if c >= 0 && int(c) < len(labels) {
		return labels[c]
	}
	return strconv.Itoa(int(c))
}

// AppendDetections appends the article's API's answer for one image's detections, highest
// score first: {"detections":[{"label":...,"score":...,"box":[x1,y1,x2,y2]},...]}, boxes in
// the original image's pixels.
func AppendDetections(b []byte, dets []postprocess.Detection, labels []string) []byte {
	b = append(b, `{"detections":[`...)
	for i, d := range dets {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"label":`...)
		b = wire.AppendJSONString(b, Label(labels, d.Class))
		b = append(b, `,"score":`...)
		b = wire.AppendJSONFloat32(b, d.Score)
		b = append(b, `,"box":[`...)
		for k, v := range d.Box {
			if k > 0 {
				b = append(b, ',')
			}
			b = wire.AppendJSONFloat32(b, v)
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...)
}
