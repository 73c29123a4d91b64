package ceiling

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/internal/pilref"
	"github.com/imagegate/imagegate/postprocess"
	"github.com/imagegate/imagegate/preprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

// The ceilings of the detect and embed tasks, for `make bench` to put beside the gateway
// serving them: the same per-request work as BenchmarkCeiling's, with the task's model and
// post-processing, as many workers as CPUs, each with its own session and batches of one. Their
// names leave out "Ceiling" so that `-bench Ceiling` still runs the classifier's alone:
// `-bench '^BenchmarkDetect$'`, `-bench '^BenchmarkEmbed$'`.

const (
	ultrafaceModel = "../../../shared/models/ultraface-rfb-320/version-RFB-320.onnx"
	mobilenetModel = "../../../shared/models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx"
)

// work runs fn for image i of b.N on workers goroutines and reports images/s and CPU per image.
func work(b *testing.B, workers int, fn func(w int) error) {
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := fn(w); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "images/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/image")
}

func needModel(b *testing.B, path string) {
	if _, err := os.Stat(path); err != nil {
		b.Skip("shared model absent: ", err)
	}
}

// BenchmarkDetect is the detect task's ceiling: JSON body → base64 → decode and stretch to
// 320x240 → ultraface (its batch axis is fixed at 1) → boxes+scores decoding, NMS at its
// authors' 0.7/0.3, boxes mapped to the photo.
func BenchmarkDetect(b *testing.B) {
	body := setup(b)
	needModel(b, ultrafaceModel)
	pre, err := preprocess.New(preprocess.Options{Width: 320, Height: 240, Mode: preprocess.ModeStretch,
		Mean: [3]float32{127.0 / 255, 127.0 / 255, 127.0 / 255}, Std: [3]float32{128.0 / 255, 128.0 / 255, 128.0 / 255}})
	if err != nil {
		b.Fatal(err)
	}
	dec := postprocess.Decoder{Kind: postprocess.BoxesScores, Anchors: 4420, Classes: 2, Normalized: true, Background: true, InputWidth: 320, InputHeight: 240}
	params := postprocess.Params{ScoreThreshold: 0.7, IOUThreshold: 0.3, MaxDetections: 100}
	type worker struct {
		s            *ort.Session[float32]
		img, tmp, px []byte
		dets         []postprocess.Detection
		sc           postprocess.Scratch
	}
	ws := make([]*worker, runtime.NumCPU())
	for i := range ws {
		s, err := ort.NewSession[float32](ort.SessionConfig{ModelPath: ultrafaceModel, InputName: "input", OutputNames: []string{"scores", "boxes"},
			InputShape: []int64{3, 240, 320}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		ws[i] = &worker{s: s, px: make([]byte, pre.SlotLen())}
	}
	ctx := context.Background()
	work(b, len(ws), func(i int) error {
		w := ws[i]
		var err error
		if w.img, w.tmp, err = gateway.DecodeJSONImage(body, w.img, w.tmp); err != nil {
			return err
		}
		// As the gateway does for a float32 model: the image as bytes, expanded into the input.
		g, err := pre.ProcessUint8Geometry(ctx, w.img, w.px)
		if err != nil {
			return err
		}
		if err := pre.Expand(w.s.Input(0), w.px); err != nil {
			return err
		}
		out, err := w.s.RunOutputs(1)
		if err != nil {
			return err
		}
		if w.dets, err = dec.Decode(w.dets[:0], postprocess.Sample{Scores: out[0].F32, Boxes: out[1].F32}, params, &w.sc); err != nil {
			return err
		}
		w.dets = postprocess.Frame{Width: g.Width, Height: g.Height, ScaleX: g.ScaleX, ScaleY: g.ScaleY, OffsetX: g.OffsetX, OffsetY: g.OffsetY}.Map(w.dets)
		return nil
	})
}

// BenchmarkEmbed is the embed task's ceiling: JSON body → base64 → full decode (the embed
// task's default), shorter side 256 and center crop 224 → MobileNetV2's pooled features (the
// shared int8 model cut here, internal/pilref) → L2 normalization.
func BenchmarkEmbed(b *testing.B) {
	body := setup(b)
	needModel(b, mobilenetModel)
	if err := pilref.Available(); err != nil {
		b.Skip(err)
	}
	path := filepath.Join(b.TempDir(), "features.onnx")
	if err := pilref.CutMobileNetV2(mobilenetModel, path); err != nil {
		b.Fatal(err)
	}
	pre, err := preprocess.New(preprocess.Options{FullDecode: true})
	if err != nil {
		b.Fatal(err)
	}
	type worker struct {
		s            *ort.Session[float32]
		img, tmp, px []byte
	}
	ws := make([]*worker, runtime.NumCPU())
	for i := range ws {
		s, err := ort.NewSession[float32](ort.SessionConfig{ModelPath: path, InputName: "input", OutputNames: []string{"features"},
			InputShape: []int64{3, 224, 224}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		ws[i] = &worker{s: s, px: make([]byte, pre.SlotLen())}
	}
	work(b, len(ws), func(i int) error {
		w := ws[i]
		var err error
		if w.img, w.tmp, err = gateway.DecodeJSONImage(body, w.img, w.tmp); err != nil {
			return err
		}
		// As the gateway does for a float32 model: the image as bytes, expanded into the input.
		if err := pre.ProcessUint8(w.img, w.px); err != nil {
			return err
		}
		if err := pre.Expand(w.s.Input(0), w.px); err != nil {
			return err
		}
		out, err := w.s.RunOutputs(1)
		if err != nil {
			return err
		}
		postprocess.L2Normalize(out[0].F32)
		return nil
	})
}
