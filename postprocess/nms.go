package postprocess

// AppendNMS appends to dst the detections of cand that survive greedy non-maximum suppression,
// highest score first: a candidate is kept unless it overlaps an already kept detection of its
// class (any class with p.ClassAgnostic) by an intersection over union above p.IOUThreshold;
// at most p.MaxDetections are kept. cand is reordered (sorted by score). Comparing each
// candidate with the kept ones only is the same as suppressing from every kept box in turn,
// and costs at most len(cand) x MaxDetections box comparisons, whatever the scores.
func AppendNMS(dst, cand []Detection, p Params) []Detection {
	sortByScore(cand)
	start := len(dst)
	limit := max(p.MaxDetections, 0)
	for i := range cand {
		if len(dst)-start >= limit {
			break
		}
		c := &cand[i]
		if !(c.Score > p.ScoreThreshold) {
			break // sorted: the rest score no higher
		}
		keep := true
		if p.IOUThreshold < 1 {
			for j := start; j < len(dst); j++ {
				k := &dst[j]
				if (p.ClassAgnostic || k.Class == c.Class) && IoU(k.Box, c.Box) > p.IOUThreshold {
					keep = false
					break
				}
			}
		}
		if keep {
			dst = append(dst, *c)
		}
	}
	return dst
}

// IoU is the intersection over union of two corner-form boxes; 0 when either has no area.
// Boxes given with x2 < x1 (or y2 < y1) count as empty.
func IoU(a, b [4]float32) float32 {
	aw, ah := a[2]-a[0], a[3]-a[1]
	bw, bh := b[2]-b[0], b[3]-b[1]
	if !(aw > 0 && ah > 0 && bw > 0 && bh > 0) {
		return 0
	}
	iw := min(a[2], b[2]) - max(a[0], b[0])
	ih := min(a[3], b[3]) - max(a[1], b[1])
	if !(iw > 0 && ih > 0) {
		return 0
	}
	inter := iw * ih
	return inter / (aw*ah + bw*bh - inter)
}
