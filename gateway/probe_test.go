package gateway

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"testing"

	"github.com/imagegate/imagegate/preprocess"
)

// TestHeavyCountsTheRowsMade: an image is heavy by the work of its decode, the RGB rows it
// makes, not by the bytes its pixels are stored in. A 35-byte GIF whose 7000x7000 screen holds
// a 1x1 frame, and a 1-bit palette PNG of 50 megapixels, were ordinary (1 byte a pixel, under
// 48 MiB) though each cost more than a 16-megapixel RGB photo, so that two clients sending them
// took every decode worker; they are heavy now. A 12-megapixel RGB photo is still ordinary.
func TestHeavyCountsTheRowsMade(t *testing.T) {
	pre, err := preprocess.New(preprocess.Options{Width: 224, Height: 224, Resize: 256, MaxPixels: 1 << 27})
	if err != nil {
		t.Fatal(err)
	}
	pal := color.Palette{color.Black, color.White}
	var screen bytes.Buffer
	if err := gif.EncodeAll(&screen, &gif.GIF{Image: []*image.Paletted{image.NewPaletted(image.Rect(0, 0, 1, 1), pal)},
		Delay: []int{0}, Config: image.Config{ColorModel: pal, Width: 5000, Height: 5000}}); err != nil {
		t.Fatal(err)
	}
	bits := func(w, h int) []byte {
		var b bytes.Buffer
		if err := png.Encode(&b, image.NewPaletted(image.Rect(0, 0, w, h), pal)); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	rgb := func(w, h int) []byte {
		var b bytes.Buffer
		if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, c := range []struct {
		name  string
		img   []byte
		heavy bool
	}{
		{"GIF, 5000x5000 screen, 1x1 frame", screen.Bytes(), true},
		{"palette PNG 5000x5000", bits(5000, 5000), true},
		{"palette PNG 2000x2000", bits(2000, 2000), false},
		{"RGBA PNG 4000x3000", rgb(4000, 3000), false},
	} {
		_, heavy, err := decodeCost(pre, c.img)
		if err != nil || heavy != c.heavy {
			t.Errorf("%s (%d bytes): heavy %v, %v; want heavy %v", c.name, len(c.img), heavy, err, c.heavy)
		}
	}
}
