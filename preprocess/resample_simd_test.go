//go:build goexperiment.simd && amd64

package preprocess

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/imagegate/imagegate/preprocess/internal/resample"
)

// TestSIMDMatchesPortable: the AVX2 kernels and the portable ones give the
// same bytes, and the same float32 bits, on random images and geometries
// (run with GOEXPERIMENT=simd; TestResamplerMatchesReference also checks
// each against the original loops).
func TestSIMDMatchesPortable(t *testing.T) {
	if !resample.Vector() {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 5))
	cases := 300
	if raceEnabled { // one goroutine: the race detector only slows it down
		cases = 60
	}
	for i := range cases {
		w, h := 1+r.IntN(900), 1+r.IntN(900)
		bpp := []int{3, 4}[i%2]
		pix := make([]uint8, w*h*bpp+r.IntN(3))
		for k := range pix {
			pix[k] = uint8(r.Uint32())
		}
		o := Options{Width: 1 + r.IntN(300), Height: 1 + r.IntN(300), Layout: NCHW}
		o.Resize = max(o.Width, o.Height) + r.IntN(500)
		if i%6 == 0 {
			o.Mode, o.Resize = ModeStretch, 0
		}
		if i%5 == 0 {
			o.Scale = ScaleRaw
		}
		if i%7 == 0 {
			o.Mean, o.Std = [3]float32{0.1, 0.2, 0.3}, [3]float32{0.7, 0.6, 0.9}
		}
		p := mustNew(t, o)
		src := source{pix: pix, stride: w * bpp, bpp: bpp, ch: 3, w: w, h: h, x1: float64(w), y1: float64(h), dispW: w, dispH: h}
		var got [2]sink
		for v, on := range []bool{true, false} {
			p.scalar = !on
			got[v] = sink{f32: make([]float32, p.SlotLen())}
			if err := p.resample(&src, &scratch{fresh: true}, got[v]); err != nil {
				t.Fatal(err)
			}
		}
		for k := range got[0].f32 {
			if math.Float32bits(got[0].f32[k]) != math.Float32bits(got[1].f32[k]) {
				t.Fatalf("case %d: %dx%d bpp %d -> %+v: value %d: vector %v, portable %v", i, w, h, bpp, o, k, got[0].f32[k], got[1].f32[k])
			}
		}
		// Into bytes (VRowU8Vec against VRow).
		var u [2][]byte
		for v, on := range []bool{true, false} {
			p.scalar = !on
			u[v] = make([]byte, p.SlotLen())
			if err := p.resample(&src, &scratch{fresh: true}, sink{u8: u[v]}); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(u[0], u[1]) {
			t.Fatalf("case %d: uint8 output differs", i)
		}
	}
}
