package preprocess

import (
	"math"
	"os"
	"slices"
	"sync"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

// The classifier checks use ONNX Runtime (tests only; the package itself
// never imports it). Library: $ONNXRUNTIME_LIB, else
// ../.deps/onnxruntime/libonnxruntime.so relative to the repository root.

var (
	ortOnce    sync.Once
	ortSession *ort.DynamicAdvancedSession
	ortErr     string // reason to skip
)

func classifier(tb testing.TB) *ort.DynamicAdvancedSession {
	tb.Helper()
	ortOnce.Do(func() {
		lib := os.Getenv("ONNXRUNTIME_LIB")
		if lib == "" {
			lib = "../.deps/onnxruntime/libonnxruntime.so"
		}
		if _, err := os.Stat(lib); err != nil {
			ortErr = "ONNX Runtime library " + lib + " is absent (run scripts/setup-onnxruntime.sh or set ONNXRUNTIME_LIB)"
			return
		}
		if _, err := os.Stat(modelPath); err != nil {
			ortErr = "model " + modelPath + " is absent (shared test data, ../shared)"
			return
		}
		ort.SetSharedLibraryPath(lib)
		if err := ort.InitializeEnvironment(); err != nil {
			ortErr = "cannot initialize ONNX Runtime from " + lib + ": " + err.Error()
			return
		}
		so, err := ort.NewSessionOptions()
		if err != nil {
			ortErr = err.Error()
			return
		}
		defer so.Destroy()
		_ = so.SetIntraOpNumThreads(1)
		_ = so.SetInterOpNumThreads(1)
		s, err := ort.NewDynamicAdvancedSession(modelPath, []string{"input"}, []string{"output"}, so)
		if err != nil {
			ortErr = "cannot load " + modelPath + ": " + err.Error()
			return
		}
		ortSession = s
	})
	if ortSession == nil {
		tb.Skip("skipping classifier check: " + ortErr)
	}
	return ortSession
}

var ortMu sync.Mutex

// top5 runs the classifier on one NCHW normalized 224x224 slot and returns
// the five most probable classes (softmax).
func top5(tb testing.TB, slot []float32) []top5Entry {
	tb.Helper()
	s := classifier(tb)
	ortMu.Lock()
	defer ortMu.Unlock()
	in, err := ort.NewTensor(ort.NewShape(1, 3, 224, 224), slot)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Destroy()
	out, err := ort.NewEmptyTensor[float32](ort.NewShape(1, 1000))
	if err != nil {
		tb.Fatal(err)
	}
	defer out.Destroy()
	if err := s.Run([]ort.Value{in}, []ort.Value{out}); err != nil {
		tb.Fatal(err)
	}
	logits := out.GetData()
	mx := slices.Max(logits)
	var sum float64
	probs := make([]float64, len(logits))
	for i, l := range logits {
		probs[i] = math.Exp(float64(l - mx))
		sum += probs[i]
	}
	idx := make([]int, len(probs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case probs[a] > probs[b]:
			return -1
		case probs[a] < probs[b]:
			return 1
		}
		return 0
	})
	res := make([]top5Entry, 5)
	for i := range res {
		res[i] = top5Entry{Class: idx[i], Prob: math.Round(probs[idx[i]]/sum*1e5) / 1e5}
	}
	return res
}

// torchvisionSlot turns a golden uint8 HWC crop into torchvision's
// normalized NCHW tensor (ToTensor + Normalize, float32).
func torchvisionSlot(hwc []byte) []float32 {
	const plane = 224 * 224
	out := make([]float32, 3*plane)
	for i := range plane {
		for c := range 3 {
			x := float32(hwc[3*i+c]) / float32(255)
			out[c*plane+i] = (x - ImageNetMean[c]) / ImageNetStd[c]
		}
	}
	return out
}

// photoTop5 is a shared photo's top-5 from our slot and from torchvision's.
type photoTop5 struct {
	e         goldenEntry
	got, want []top5Entry
}

// sharedPhotoTop5 returns, for each shared photo with 224/256 goldens, our top-5 (with or
// without full_decode) and torchvision's, both run through the same session here.
func sharedPhotoTop5(t *testing.T, d *goldenDoc, full bool) []photoTop5 {
	p := mustNew(t, Options{FullDecode: full})
	var out []photoTop5
	for _, e := range d.Images {
		if e.Source != "shared" || e.Crop != 224 || e.Resize != 256 {
			continue
		}
		want := top5(t, torchvisionSlot(e.pixels(t)))
		slot := make([]float32, p.SlotLen())
		if err := p.Process(e.input(t), slot); err != nil {
			t.Fatal(err)
		}
		out = append(out, photoTop5{e, top5(t, slot), want})
	}
	return out
}

// TestTop1MatchesTorchvision: our slot gets the same top-1 class as
// torchvision's preprocessing on the shared photos. Torchvision's answer is
// computed here, on this machine: the same ONNX Runtime session runs the
// golden tensors (torchvision's own uint8 crops, exact integer data) and ours.
// A class stored from another machine would not do: the int8 model's kernels
// give different logits on CPUs with and without VNNI. With full_decode every
// photo must agree; with DCT scaling at least 95 % of them.
func TestTop1MatchesTorchvision(t *testing.T) {
	d := loadGoldens(t)
	for _, full := range []bool{true, false} {
		n, agree := 0, 0
		for _, ph := range sharedPhotoTop5(t, d, full) {
			e, got, want := ph.e, ph.got, ph.want
			n++
			same := got[0].Class == want[0].Class
			note := map[bool]string{false: "DIFFERENT"}[same]
			// The int8 model's coarse logits can tie exactly: when torchvision's class
			// shares our best score, the model has no preference and the image agrees
			// (the gateway names the lower index).
			if !same && !full && got[1].Class == want[0].Class && got[1].Prob == got[0].Prob {
				same, note = true, "tie"
			}
			if same {
				agree++
			}
			t.Logf("full_decode=%-5v %-30s torchvision top1 %3d p=%.3f | ours top1 %3d p=%.3f %s", full, e.Name,
				want[0].Class, want[0].Prob, got[0].Class, got[0].Prob, note)
			if full && !same {
				t.Errorf("full_decode: %s: top-1 class %d (p=%.3f), torchvision's is %d (p=%.3f)", e.Name, got[0].Class, got[0].Prob, want[0].Class, want[0].Prob)
			}
		}
		if n < 10 {
			t.Fatalf("only %d shared photos with 224/256 goldens", n)
		}
		t.Logf("full_decode=%v: same top-1 as torchvision on %d of %d photos", full, agree, n)
		if !full && float64(agree) < 0.95*float64(n) {
			t.Errorf("DCT scaling: same top-1 as torchvision on %d of %d photos, want at least 95 %%", agree, n)
		}
	}
}
