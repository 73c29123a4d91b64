package postprocess

// Frame is where one image went in the model's input: the original image (as displayed, after
// its EXIF orientation, at full resolution) maps to input pixels by input = original*Scale +
// Offset on each axis. preprocess reports it per decode (its Geometry): a stretch has
// Offset 0 and Scale input/original per axis; a shorter-side resize and center crop a
// negative Offset (the crop); a letterbox the padding.
type Frame struct {
	// Width and Height of the original image, after EXIF orientation.
	Width, Height    int
	ScaleX, ScaleY   float64
	OffsetX, OffsetY float64
	// Orientation is the EXIF orientation (1..8) the decode applied; 0 means 1.
	Orientation int
}

// Map maps dets in place from model-input pixels to the original image's pixels, clipped to
// the image, and returns them without those left with no area (a box that lay in the
// letterbox's padding or outside a crop): the same backing array, order kept.
func (f Frame) Map(dets []Detection) []Detection {
	if !(f.ScaleX > 0 && f.ScaleY > 0) {
		return dets[:0]
	}
	w, h := float64(f.Width), float64(f.Height)
	out := dets[:0]
	for _, d := range dets {
		x1 := clip((float64(d.Box[0])-f.OffsetX)/f.ScaleX, w)
		y1 := clip((float64(d.Box[1])-f.OffsetY)/f.ScaleY, h)
		x2 := clip((float64(d.Box[2])-f.OffsetX)/f.ScaleX, w)
		y2 := clip((float64(d.Box[3])-f.OffsetY)/f.ScaleY, h)
		// Checked as answered: two corners apart in float64 can round to one float32.
		b := [4]float32{float32(x1), float32(y1), float32(x2), float32(y2)}
		if !(b[2] > b[0] && b[3] > b[1]) {
			continue
		}
		d.Box = b
		out = append(out, d)
	}
	return out
}

func clip(v, hi float64) float64 { return min(max(v, 0), hi) }

// Stored maps a box in the original image's displayed pixels (what Map answers) to the pixel
// grid the file stores, before its EXIF orientation: for a client that draws on the
// undecoded pixels. Orientation 1 (or 0) returns b.
func (f Frame) Stored(b [4]float32) [4]float32 {
	o := f.Orientation
	if o <= 1 || o > 8 {
		return b
	}
	// Stored size: the displayed one, swapped for the orientations that transpose.
	ws, hs := float32(f.Width), float32(f.Height)
	if o >= 5 {
		ws, hs = hs, ws
	}
	p := func(X, Y float32) (float32, float32) {
		switch o {
		case 2:
			return ws - X, Y
		case 3:
			return ws - X, hs - Y
		case 4:
			return X, hs - Y
		case 5:
			return Y, X
		case 6:
			return Y, hs - X
		case 7:
			return ws - Y, hs - X
		default: // 8
			return ws - Y, X
		}
	}
	ax, ay := p(b[0], b[1])
	bx, by := p(b[2], b[3])
	return [4]float32{min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)}
}
