package onnxtest

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
)

// Photos for RedBox: a photo turned gray with a pure red rectangle drawn in it (the model's
// only red), stored as a JPEG under any EXIF orientation.

// RedPhoto is src in gray with a pure red rectangle drawn at r (in the returned image's
// pixels); transposed swaps src's axes first (a landscape photo becomes a portrait one).
func RedPhoto(src image.Image, transposed bool, r image.Rectangle) image.Image {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	if transposed {
		w, h = h, w
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			sx, sy := x, y
			if transposed {
				sx, sy = y, x
			}
			g := color.GrayModel.Convert(src.At(b.Min.X+sx, b.Min.Y+sy)).(color.Gray)
			img.Set(x, y, color.RGBA{g.Y, g.Y, g.Y, 255})
		}
	}
	draw.Draw(img, r, image.NewUniform(color.RGBA{255, 0, 0, 255}), image.Point{}, draw.Src)
	return img
}

// StoredPixel is where displayed pixel (x, y) of a w x h image (as displayed) lies in the pixel
// grid a file stores under EXIF orientation o (1..8).
func StoredPixel(x, y, w, h, o int) (int, int) {
	ws, hs := w, h
	if o >= 5 {
		ws, hs = h, w
	}
	switch o {
	case 2:
		return ws - 1 - x, y
	case 3:
		return ws - 1 - x, hs - 1 - y
	case 4:
		return x, hs - 1 - y
	case 5:
		return y, x
	case 6:
		return y, hs - 1 - x
	case 7:
		return ws - 1 - y, hs - 1 - x
	case 8:
		return ws - 1 - y, x
	}
	return x, y
}

// OrientJPEG encodes the displayed image d as a JPEG (quality 95) stored so that EXIF
// orientation o shows d: the pixels are moved to the stored grid and the orientation tag is
// written in an APP1 segment.
func OrientJPEG(d image.Image, o int) ([]byte, error) {
	b := d.Bounds()
	w, h := b.Dx(), b.Dy()
	ws, hs := w, h
	if o >= 5 {
		ws, hs = h, w
	}
	st := image.NewRGBA(image.Rect(0, 0, ws, hs))
	for y := range h {
		for x := range w {
			sx, sy := StoredPixel(x, y, w, h, o)
			st.Set(sx, sy, d.At(b.Min.X+x, b.Min.Y+y))
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, st, &jpeg.Options{Quality: 95}); err != nil {
		return nil, err
	}
	j := buf.Bytes()
	// APP1 Exif: a little-endian TIFF header and one IFD entry, Orientation (0x0112), SHORT.
	tiff := []byte{'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, byte(o), 0, 0, 0, 0, 0, 0, 0}
	app1 := append([]byte{0xFF, 0xE1, 0, 0}, append([]byte("Exif\x00\x00"), tiff...)...)
	n := len(app1) - 2
	app1[2], app1[3] = byte(n>>8), byte(n)
	return append(append(append([]byte{}, j[:2]...), app1...), j[2:]...), nil
}
