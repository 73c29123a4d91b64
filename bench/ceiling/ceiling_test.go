// Package ceiling measures the in-process ceiling of the gateway's work on the article's
// payload (or the photo CEILING_IMAGE names): JSON body → base64 → decode + preprocess → ONNX
// Runtime, with as many workers as CPUs (each with its own single-threaded session, batch 1) and
// no HTTP. The benchmark report compares the gateway end to end against this figure.
package ceiling

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/preprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

func setup(b *testing.B) []byte {
	body, err := os.ReadFile("../../../shared/seed/rime_5868.json")
	if err != nil {
		b.Skip("../shared/seed/rime_5868.json not found (../shared must be beside the checkout):", err)
	}
	// CEILING_IMAGE: another photo, sent as the article's API sends it (bench/run.sh's tasks
	// section puts each task's photo through the ceiling and the servers alike).
	if p := os.Getenv("CEILING_IMAGE"); p != "" {
		img, err := os.ReadFile(p)
		if err != nil {
			b.Fatal("CEILING_IMAGE:", err)
		}
		body = []byte(`{"image":"` + base64.StdEncoding.EncodeToString(img) + `"}`)
	}
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		lib, _ = filepath.Abs("../../.deps/onnxruntime/libonnxruntime.so")
	}
	if _, err := os.Stat(lib); err != nil {
		b.Skip("ONNX Runtime is not installed (scripts/setup-onnxruntime.sh):", err)
	}
	if err := ort.Init(lib); err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkCeiling reports images/s for the whole per-request path without HTTP.
func BenchmarkCeiling(b *testing.B) {
	body := setup(b)
	pre, err := preprocess.New(preprocess.Options{Width: 224, Height: 224, Resize: 256})
	if err != nil {
		b.Fatal(err)
	}
	workers := runtime.NumCPU()
	sessions := make([]*ort.Session[float32], workers)
	for i := range sessions {
		s, err := ort.NewSession[float32](ort.SessionConfig{ModelPath: "../../models/mobilenet_v3_small/model.onnx", InputName: "input",
			OutputName: "output", InputShape: []int64{3, 224, 224}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1,
			// as the shipped config loads it (auto); CEILING_HARDSWISH_REWRITE=off: as it is
			RewriteHardSwish: ort.HardSwishRewritePays() && os.Getenv("CEILING_HARDSWISH_REWRITE") != "off"})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sessions[i] = s
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(s *ort.Session[float32]) {
			defer wg.Done()
			var img, scratch []byte
			for next.Add(1) <= int64(b.N) {
				var err error
				img, scratch, err = gateway.DecodeJSONImage(body, img, scratch)
				if err != nil {
					b.Error(err)
					return
				}
				if err := pre.Process(img, s.Input(0)); err != nil {
					b.Error(err)
					return
				}
				if _, err := s.Run(1); err != nil {
					b.Error(err)
					return
				}
			}
		}(sessions[w])
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "images/s")
	// CPU time per image (user + system, all threads): what the work costs, unlike images/s
	// barely moved by other processes sharing the machine. Before/after comparisons use this.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/image")
}

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
