package preprocess

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestExpandMatchesProcess: keeping an image as its ProcessUint8 bytes and expanding them
// later gives the bits Process writes, for every image in ../shared/images and every layout,
// scale and geometry option, with the vector kernels and without (the gateway stages image
// rows as bytes and expands them into the model's input tensor).
func TestExpandMatchesProcess(t *testing.T) {
	entries, err := os.ReadDir(imagesDir)
	if os.IsNotExist(err) {
		t.Skipf("shared test data %s is absent (expected next to the repository, ../shared): skipping", imagesDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var images [][]byte
	var names []string
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) == ".md" {
			continue
		}
		images = append(images, readShared(t, filepath.Join(imagesDir, e.Name())))
		names = append(names, e.Name())
	}
	images = append(images, seedJPEG(t))
	names = append(names, "rime_5868 (the article's payload)")
	options := map[string]Options{
		"default":     {},
		"full_decode": {FullDecode: true},
		"nhwc":        {Layout: NHWC},
		"raw":         {Scale: ScaleRaw},
		"mean/std":    {Mean: [3]float32{0.1, 0.2, 0.3}, Std: [3]float32{0.7, 0.6, 0.9}},
		"stretch":     {Mode: ModeStretch, Width: 301, Height: 97},
		"odd crop":    {Width: 37, Height: 45, Resize: 61},
	}
	kernels := []bool{true, false}
	if raceEnabled { // one goroutine: the race detector only slows it down
		kernels = kernels[:1]
		delete(options, "full_decode")
	}
	for _, vec := range kernels {
		for oname, o := range options {
			p := mustNew(t, o)
			p.scalar = !vec
			want := make([]float32, p.SlotLen())
			got := make([]float32, p.SlotLen())
			u := make([]uint8, p.SlotLen())
			for i, img := range images {
				errF := p.Process(img, want)
				errU := p.ProcessUint8(img, u)
				if (errF == nil) != (errU == nil) {
					t.Fatalf("%s, %s: Process err %v, ProcessUint8 err %v", names[i], oname, errF, errU)
				}
				if errF != nil {
					continue
				}
				for k := range got {
					got[k] = float32(math.NaN())
				}
				if err := p.Expand(got, u); err != nil {
					t.Fatal(err)
				}
				for k := range want {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("%s, %s, vector kernels %v: value %d: Expand gives %v, Process %v", names[i], oname, vec, k, got[k], want[k])
					}
				}
			}
		}
	}
	p := mustNew(t, Options{})
	if err := p.Expand(make([]float32, p.SlotLen()), make([]uint8, p.SlotLen()-1)); err == nil {
		t.Error("Expand accepted a short source")
	}
	if err := p.Expand(make([]float32, p.SlotLen()-1), make([]uint8, p.SlotLen())); err == nil {
		t.Error("Expand accepted a short destination")
	}
}
