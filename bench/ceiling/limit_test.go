package ceiling

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/preprocess"
	"github.com/imagegate/imagegate/runtime/ort"
)

// BenchmarkModelAlone: the model's run alone, at the batch size LIMIT_BATCH (default 1; `make
// bench` passes the one the shipped configuration chose), on the article's photo as the
// gateway preprocesses it, with the session the shipped configuration makes (one intra-op
// thread, the HardSwish rewrite where it pays, the model cache of runtime.cache_dir auto). The
// model's part of the physical limit (bench/run.sh, "The limit"; preprocess's
// BenchmarkJPEGDecodeAlone is the decode's): cpu-µs/image is the calling thread's CPU time per
// image, on which ONNX Runtime runs the whole model.
func BenchmarkModelAlone(b *testing.B) {
	body := setup(b)
	n := 1
	if v := os.Getenv("LIMIT_BATCH"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("LIMIT_BATCH=%q: want a batch size", v)
		}
	}
	s, err := ort.NewSession[float32](ort.SessionConfig{ModelPath: "../../models/mobilenet_v3_small/model.onnx", InputName: "input",
		OutputName: "output", InputShape: []int64{3, 224, 224}, MaxBatchSize: n, IntraOp: 1, InterOp: 1,
		RewriteHardSwish: ort.HardSwishRewritePays(), CacheDir: "auto"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pre, err := preprocess.New(preprocess.Options{Width: 224, Height: 224, Resize: 256})
	if err != nil {
		b.Fatal(err)
	}
	img, _, err := gateway.DecodeJSONImage(body, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if err := pre.Process(img, s.Input(i)); err != nil {
			b.Fatal(err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range 3 { // ONNX Runtime's first runs of a shape allocate its memory
		if _, err := s.Run(n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cpu0 := threadCPU()
	for b.Loop() {
		if _, err := s.Run(n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/image")
	b.ReportMetric(float64((threadCPU()-cpu0).Microseconds())/float64(b.N*n), "cpu-µs/image")
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
