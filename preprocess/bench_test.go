package preprocess

import (
	"bytes"
	"fmt"
	"image"
	"image/color/palette"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/image/draw"
	"golang.org/x/image/tiff"
)

// Benchmarks run on the article's payload (the JPEG inside
// ../shared/seed/rime_5868.json, 1200x727), default options
// (shorter side 256, crop 224, ImageNet normalization, NCHW float32).

// BenchmarkJPEGDecompressorNew: creating and destroying the libjpeg
// decompressor each image gets (none is reused: see jpeg.go).
func BenchmarkJPEGDecompressorNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		newAndFreeDecompressor()
	}
}

// BenchmarkJPEGDecodeScaled: libjpeg header + DCT-scaled decode of the
// window the crop reads (and the resize, which cannot be separated: rows go
// to the resampler as they are decoded; BenchmarkResizeCropNormalize is that
// part alone).
func BenchmarkJPEGDecodeScaled(b *testing.B) {
	data := seedJPEG(b)
	p := mustNew(b, Options{})
	dst := make([]uint8, p.SlotLen())
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s := getScratch()
		if err := p.decodeJPEG(data, s, sink{u8: dst}); err != nil {
			b.Fatal(err)
		}
		putScratch(s)
	}
}

// BenchmarkResizeCropNormalize: resample the decoded (scaled) image to the
// crop window and write the normalized float32 slot.
func BenchmarkResizeCropNormalize(b *testing.B) {
	data := seedJPEG(b)
	p := mustNew(b, Options{})
	src := decodedJPEG(b, p, data)
	b.Logf("decoded at %dx%d for a %dx%d image", src.w, src.h, src.dispW, src.dispH)
	dst := make([]float32, p.SlotLen())
	work := new(scratch)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.resample(&src, work, sink{f32: dst}); err != nil {
			b.Fatal(err)
		}
	}
}

// decodedJPEG decodes a JPEG (EXIF orientation 1) whole at p's DCT scale,
// as the resampler reads it.
func decodedJPEG(tb testing.TB, p *Preprocessor, data []byte) source {
	tb.Helper()
	d := new(jpegDecoder)
	if err := d.open(data); err != nil {
		tb.Fatal(err)
	}
	defer d.close()
	pl, err := p.jpegHeader(d, data)
	if err != nil || pl.orient != 1 {
		tb.Fatal("decodedJPEG: ", err)
	}
	p.noWindow = true
	win := p.jpegWindow(&pl)
	p.noWindow = false
	region, err := p.decodeJPEGWindow(d, &pl, &win, &scratch{fresh: true})
	if err != nil {
		tb.Fatal(err)
	}
	src := win.full
	src.pix, src.stride, src.bpp = region.pix, region.stride, region.bpp
	return src
}

// BenchmarkProcess: the whole path, JPEG bytes to normalized slot. "rotated"
// is a photo stored 1200x1800 and shown 1800x1200 (EXIF orientation 6): the
// crop reads about 58 % of its stored rows, and the 21 % below them are not
// decoded.
func BenchmarkProcess(b *testing.B) {
	data := seedJPEG(b)
	rotated := readShared(b, filepath.Join(imagesDir, "exif_landscape_orient6.jpg"))
	for _, c := range []struct {
		name string
		data []byte
		full bool
	}{{"dct_scaled", data, false}, {"full_decode", data, true}, {"rotated", rotated, false}} {
		b.Run(c.name, func(b *testing.B) {
			data := c.data
			p := mustNew(b, Options{FullDecode: c.full})
			dst := make([]float32, p.SlotLen())
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Process(data, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProcessParallel: the whole path on all Ps.
func BenchmarkProcessParallel(b *testing.B) {
	data := seedJPEG(b)
	p := mustNew(b, Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]float32, p.SlotLen())
		for pb.Next() {
			if err := p.Process(data, dst); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkStdlibPath is the "before" column: image/jpeg full decode, a
// plain Go bilinear resize (x/image/draw), center crop and normalization
// through the image.Image interface.
func BenchmarkStdlibPath(b *testing.B) {
	data := seedJPEG(b)
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	for b.Loop() {
		if err := stdlibPath(data, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func stdlibPath(data []byte, dst []float32) error {
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return err
	}
	r := img.Bounds()
	w, h := r.Dx(), r.Dy()
	rw, rh := 256, 256
	if w <= h {
		rh = 256 * h / w
	} else {
		rw = 256 * w / h
	}
	rs := image.NewRGBA(image.Rect(0, 0, rw, rh))
	draw.BiLinear.Scale(rs, rs.Bounds(), img, r, draw.Src, nil)
	left, top := (rw-224)/2, (rh-224)/2
	const plane = 224 * 224
	for y := range 224 {
		for x := range 224 {
			c := rs.RGBAAt(left+x, top+y)
			dst[y*224+x] = (float32(c.R)/255 - ImageNetMean[0]) / ImageNetStd[0]
			dst[plane+y*224+x] = (float32(c.G)/255 - ImageNetMean[1]) / ImageNetStd[1]
			dst[2*plane+y*224+x] = (float32(c.B)/255 - ImageNetMean[2]) / ImageNetStd[2]
		}
	}
	if w == 0 {
		return fmt.Errorf("empty")
	}
	return nil
}

// BenchmarkPNG: PNG photos and the bomb (7000x7000 RGBA16 of zeros,
// 381 KB) through the whole path, default options.
func BenchmarkPNG(b *testing.B) {
	cases := map[string][]byte{"bomb_7000x7000_rgba16": pngBomb(b)}
	for _, n := range []string{"skimage_coffee.png", "skimage_astronaut.png"} {
		cases[n] = readShared(b, filepath.Join(imagesDir, n))
	}
	for name, data := range cases {
		b.Run(name, func(b *testing.B) {
			p := mustNew(b, Options{})
			dst := make([]float32, p.SlotLen())
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Process(data, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFormats: the article's photo (1200x727) in every format this
// package decodes, through the whole path with default options; PeakBytes
// (Probe) is reported beside the time. WebP has no Go encoder: the testdata
// WebPs (300x200) stand in.
func BenchmarkFormats(b *testing.B) {
	src, err := jpeg.Decode(bytes.NewReader(seedJPEG(b)))
	if err != nil {
		b.Fatal(err)
	}
	rgb := image.NewRGBA(src.Bounds())
	draw.Draw(rgb, rgb.Bounds(), src, image.Point{}, draw.Src)
	pal := image.NewPaletted(rgb.Bounds(), palette.Plan9)
	draw.FloydSteinberg.Draw(pal, pal.Bounds(), rgb, image.Point{})
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, rgb); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"jpeg", seedJPEG(b)},
		{"png_rgb8", pngBuf.Bytes()},
		{"gif", encodeGIF(b, pal)},
		{"bmp_24bit", encodeBMP(b, rgb)},
		{"tiff_none", encodeTIFF(b, rgb, tiff.Uncompressed)},
		{"tiff_deflate", encodeTIFF(b, rgb, tiff.Deflate)},
	}
	for _, f := range []string{"chelsea_lossy", "chelsea_lossless"} {
		d, err := os.ReadFile("testdata/webp/" + f + ".webp")
		if err != nil {
			b.Fatal(err)
		}
		cases = append(cases, struct {
			name string
			data []byte
		}{"webp_" + f[8:] + "_300x200", d})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := mustNew(b, Options{})
			info, err := p.Probe(c.data)
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, p.SlotLen())
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Process(c.data, dst); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(info.PeakBytes)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(len(c.data))/1024, "file-KiB")
		})
	}
}
