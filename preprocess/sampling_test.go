package preprocess

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/imagegate/imagegate/preprocess/internal/jpegenc"
)

// samplingJPEGs are JPEGs written with every sampling libjpeg accepts for the
// luma (and K) component up to 4x2, baseline and progressive, at two sizes, plus
// arithmetic coding with restarts and four-component files.
func samplingJPEGs(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(p jpegenc.Params) {
		b, err := jpegenc.Encode(p, 1)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		out[fmt.Sprintf("cs%d_%dx%d_prog%v_arith%v_rst%d_%dx%d", p.ColorSpace, p.HS, p.VS, p.Progressive, p.Arithmetic, p.Restart, p.W, p.H)] = b
	}
	sizes := [][2]int{{1013, 677}, {611, 1231}}
	samplings := [][2]int{{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 1}, {1, 3}, {3, 2}, {4, 1}, {1, 4}, {4, 2}, {2, 4}}
	if raceEnabled {
		sizes = sizes[:1]
	}
	for _, sz := range sizes {
		for _, s := range samplings {
			for _, prog := range []bool{false, true} {
				add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.YCbCr, HS: s[0], VS: s[1], Progressive: prog})
			}
		}
		add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.YCbCr, HS: 2, VS: 2, Arithmetic: true, Restart: 3})
		add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.YCbCr, HS: 2, VS: 4, Progressive: true, Arithmetic: true})
		add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.CMYK, HS: 2, VS: 2, Progressive: true})
		add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.YCCK, HS: 2, VS: 2})
		add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.Gray, HS: 2, VS: 2})
		add(jpegenc.Params{W: sz[0], H: sz[1], ColorSpace: jpegenc.RGB, HS: 1, VS: 1, Progressive: true})
	}
	return out
}

// TestUnusualSamplingJPEG: every sampling decodes, within a time bound, to
// exactly what the whole decode gives, the same bytes each time even with other
// images decoded in between. libjpeg-turbo 2.1.5's crop and skip calls fail
// three ways on 4x2 and 2x4 sampling at scaled sizes: the chroma rows cropped
// too short (the colour conversion reads stale heap bytes: outputs change from
// one decode to the next), a progressive 2x4 file's skip looping forever, a
// baseline one refused as truncated; such files decode whole.
func TestUnusualSamplingJPEG(t *testing.T) {
	files := samplingJPEGs(t)
	other, err := jpegenc.Encode(jpegenc.Params{W: 900, H: 700, HS: 2, VS: 2}, 2) // decoded in between
	if err != nil {
		t.Fatal(err)
	}
	opts := []struct {
		o          Options
		oversample float64
	}{{Options{}, 1}, {Options{Width: 100, Height: 30, Resize: 120}, 2}, {Options{FullDecode: true}, 0}}
	n := 0
	for name, jpg := range files {
		for _, o := range []int{1, 6} {
			data := withOrientation(jpg, o)
			for _, c := range opts {
				c.o.Layout = NHWC
				win, whole := mustNew(t, c.o), mustNew(t, c.o)
				if c.oversample > 0 {
					win.oversample, whole.oversample = c.oversample, c.oversample
				}
				whole.noWindow = true
				want := make([]byte, win.SlotLen())
				if err := decodeWithin(t, whole, data, want); err != nil {
					t.Fatalf("%s orientation %d %+v (whole): %v", name, o, c, err)
				}
				for rep := range 2 {
					if err := win.ProcessUint8(other, make([]byte, win.SlotLen())); err != nil {
						t.Fatal(err)
					}
					got := make([]byte, win.SlotLen())
					if err := decodeWithin(t, win, data, got); err != nil {
						t.Fatalf("%s orientation %d %+v: %v", name, o, c, err)
					}
					if !bytes.Equal(got, want) {
						m, x := diff(got, want)
						t.Fatalf("%s orientation %d %+v x%.1f, decode %d: differs from the whole decode: mean %.5f max %.4f",
							name, o, c.o, c.oversample, rep+1, m, x)
					}
					n++
				}
			}
		}
	}
	t.Logf("%d files, %d decodes compared", len(files), n)
}

// decodeWithin decodes data with p into dst, failing the test if it does not
// return within a minute (a decoder stuck in C cannot be stopped: the test
// ends instead of hanging until the package's timeout).
func decodeWithin(t *testing.T, p *Preprocessor, data, dst []byte) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.ProcessUint8(data, dst) }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("decode of a %d-byte JPEG did not return within a minute", len(data))
		return nil
	}
}
