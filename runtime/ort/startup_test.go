package ort

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartupSteps times one model start-up step by step, as the gateway makes it (the
// shipped model, batch 2, the rewrite where it pays): loading ONNX Runtime, NewSession's steps
// (scan, cache, rewrite, session, cache write) and the first run. Each step reports its wall
// time (ms) and its minor page faults: on virtual machines a fresh page costs tens of µs, and
// fresh memory is much of a start's cost. The figures mean a cold process only when the
// benchmark runs alone in a fresh one, once:
//
//	go test -c -o ort.test ./runtime/ort
//	for i in $(seq 10); do ./ort.test -test.run '^$' -test.bench 'StartupSteps/cold' -test.benchtime 1x; done
//
// Sub-benchmarks: off (no cache), cold (an empty cache: the entry is written), warm (the
// entry the last cold run wrote, in $TMPDIR/imagegate-startup-bench). docs/startup.md has the
// figures.
func BenchmarkStartupSteps(b *testing.B) {
	dir := filepath.Join(os.TempDir(), "imagegate-startup-bench")
	for _, mode := range []string{"off", "cold", "warm"} {
		b.Run(mode, func(b *testing.B) {
			cacheDir := "off"
			switch mode {
			case "cold":
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
				cacheDir = dir
			case "warm":
				if m, _ := filepath.Glob(filepath.Join(dir, "*.ort")); len(m) == 0 {
					b.Fatalf("no entry in %s: run StartupSteps/cold first", dir)
				}
				cacheDir = dir
			}
			for b.Loop() {
				startupSteps(b, cacheDir, mode)
			}
		})
	}
}

func startupSteps(b *testing.B, cacheDir, mode string) {
	var ru syscall.Rusage
	mark := func() (time.Time, int64) {
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Now(), ru.Minflt
	}
	t0, f0 := mark()
	took := map[string]float64{}
	faults := map[string]float64{}
	step := func(name string) {
		t1, f1 := mark()
		took[name] += float64(t1.Sub(t0).Microseconds()) / 1000
		faults[name] += float64(f1 - f0)
		t0, f0 = t1, f1
	}
	initORT(b)
	step("init")
	s, err := NewSession[float32](SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, MaxBatchSize: 2, IntraOp: 1, InterOp: 1, RewriteHardSwish: HardSwishRewritePays(),
		CacheDir: cacheDir, Logger: slog.New(slog.DiscardHandler), trace: step})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if want := map[string]string{"off": cacheOff, "cold": cacheWritten, "warm": cacheHit}[mode]; s.core.cache != want {
		b.Fatalf("the session was %q, want %q", s.core.cache, want)
	}
	if _, err := s.Run(2); err != nil {
		b.Fatal(err)
	}
	step("run")
	total := 0.0
	for name, ms := range took {
		unit := strings.ReplaceAll(name, " ", "-")
		b.ReportMetric(ms, unit+"-ms")
		b.ReportMetric(faults[name], unit+"-faults")
		total += ms
	}
	b.ReportMetric(total, "total-ms")
}
