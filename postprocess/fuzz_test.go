package postprocess

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDecode feeds every decoder hostile tensors: arbitrary float bits (NaN, infinities,
// denormals, huge values), shapes that do not add up, counts past the rows, thresholds out of
// range. Decode must not panic; what it answers must be finite, sorted, within
// MaxDetections, and stay finite and inside the image once mapped.
func FuzzDecode(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint8(2), uint8(7), []byte{0, 0, 128, 63, 0, 0, 0, 64})
	f.Add(uint8(1), uint8(5), uint8(3), uint8(0x0f), []byte{0, 0, 192, 127, 0, 0, 128, 127, 0, 0, 128, 255})
	f.Add(uint8(2), uint8(4), uint8(1), uint8(0x33), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, kind, anchors, classes, flags uint8, data []byte) {
		vals := make([]float32, len(data)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		d := Decoder{Kind: Kind(kind % 3), Anchors: int(anchors % 32), Classes: int(classes%8) + 1, Format: BoxFormat(flags % 3),
			Normalized: flags&4 != 0, Background: flags&8 != 0, Objectness: flags&16 != 0, Transposed: flags&32 != 0,
			Packed: flags&64 != 0, InputWidth: 64, InputHeight: 48}
		if d.Check() != nil {
			return
		}
		// Split the values into the sample's tensors as the decoder expects, or not quite.
		s := Sample{Count: -1}
		switch d.Kind {
		case BoxesScores:
			nb := min(len(vals), 4*d.Anchors)
			s.Boxes, s.Scores = vals[:nb], vals[nb:]
		case YOLO:
			s.Boxes = vals
		case NMS:
			w := 4
			if d.Packed {
				w = 6
			}
			k := len(vals) / (w + 2)
			s.Boxes, s.Scores, s.Classes = vals[:k*w], vals[k*w:k*w+k], vals[k*w+k:k*w+2*k]
			if flags&128 != 0 {
				s.Count = int(anchors) - 4
			}
		}
		p := Params{ScoreThreshold: float32(classes) / 300, IOUThreshold: float32(flags) / 200, MaxDetections: int(anchors%7) + 1, ClassAgnostic: flags&1 != 0}
		var sc Scratch
		got, err := d.Decode(nil, s, p, &sc)
		if err != nil {
			return
		}
		if len(got) > p.MaxDetections {
			t.Fatalf("%d detections, max %d", len(got), p.MaxDetections)
		}
		for i, g := range got {
			if !finite(g.Box[0], g.Box[1], g.Box[2], g.Box[3], g.Score) || g.Class < 0 {
				t.Fatalf("detection %v", g)
			}
			if i > 0 && got[i-1].Score < g.Score {
				t.Fatalf("not sorted: %v", got)
			}
		}
		fr := Frame{Width: 100, Height: 80, ScaleX: 0.64, ScaleY: 0.5, OffsetX: 0, OffsetY: 4}
		for _, g := range fr.Map(got) {
			b := g.Box
			if !finite(b[0], b[1], b[2], b[3]) || b[0] < 0 || b[1] < 0 || b[2] > 100 || b[3] > 80 || b[2] <= b[0] || b[3] <= b[1] {
				t.Fatalf("mapped box %v", b)
			}
		}
	})
}
