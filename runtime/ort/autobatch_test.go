package ort

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/imagegate/imagegate/internal/onnxtest"
)

// autoConfig is the shipped model's session as the gateway makes it, the caches in dir.
func autoConfig(dir string, log *bytes.Buffer) SessionConfig {
	return SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, IntraOp: 1, InterOp: 1, RewriteHardSwish: HardSwishRewritePays(),
		CacheDir: dir, Logger: slog.New(slog.NewTextHandler(log, nil))}
}

// testCurve bounds the measurement's time in tests.
var testCurve = CurveOptions{Ceiling: 8, Budget: 200 * time.Millisecond}

func newAuto(t *testing.T, cfg SessionConfig, o CurveOptions, choose func(BatchCurve) int) (*Session[float32], BatchCurve) {
	t.Helper()
	s, c, err := NewSessionAuto[float32](cfg, o, choose)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

func curveEntries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.curve.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The first session measures the curve and writes it beside the model cache's entry, the
// next one reads it; each gets the rows its choice asks for, bounded by the ceiling, and
// computes what a session of a fixed size computes, to the bit.
func TestNewSessionAutoMeasuresThenReads(t *testing.T) {
	initORT(t)
	dir := t.TempDir()
	var log bytes.Buffer
	cfg := autoConfig(dir, &log)
	var seen BatchCurve
	s1, c1 := newAuto(t, cfg, testCurve, func(c BatchCurve) int { seen = c; return 4 })
	if c1.Cached || len(c1.Points) == 0 || c1.Points[0].Batch != 1 || c1.Took <= 0 || !reflect.DeepEqual(seen, c1) {
		t.Fatalf("first session: %+v (choose saw %+v)", c1, seen)
	}
	if want := ClockWall; runtime.GOOS == "linux" {
		if want = ClockThreadCPU; c1.Clock != want {
			t.Errorf("clock %q, want %q", c1.Clock, want)
		}
	}
	for i, p := range c1.Points {
		if p.Run <= 0 || p.Samples < 1 || p.Batch > testCurve.Ceiling || i > 0 && p.Batch != 2*c1.Points[i-1].Batch {
			t.Errorf("point %d: %+v", i, p)
		}
	}
	if s1.MaxBatchSize() != 4 {
		t.Errorf("session of %d rows, choose said 4", s1.MaxBatchSize())
	}
	if len(curveEntries(t, dir)) != 1 || len(entries(t, dir)) != 1 {
		t.Fatalf("cache folder holds %v and %v", curveEntries(t, dir), entries(t, dir))
	}
	log.Reset()
	s2, c2 := newAuto(t, cfg, testCurve, func(c BatchCurve) int { return 100 })
	if !c2.Cached || !reflect.DeepEqual(c2.Points, c1.Points) || c2.Stop != c1.Stop || c2.Clock != c1.Clock || log.Len() != 0 {
		t.Fatalf("second session: %+v, first %+v; logged %q", c2, c1, log.String())
	}
	if s2.MaxBatchSize() != testCurve.Ceiling {
		t.Errorf("choose said 100: session of %d rows, want the ceiling %d", s2.MaxBatchSize(), testCurve.Ceiling)
	}
	if s3, _ := newAuto(t, cfg, testCurve, func(BatchCurve) int { return 0 }); s3.MaxBatchSize() != 1 {
		t.Errorf("choose said 0: session of %d rows", s3.MaxBatchSize())
	}

	ref := newDefaultCfg(t, cfg, 4)
	rng := rand.New(rand.NewSource(5))
	for i := range 4 {
		for j := range s1.Input(i) {
			v := float32((rng.Float64() - 0.45) / 0.225)
			s1.Input(i)[j], ref.Input(i)[j] = v, v
		}
	}
	got, err := s1.Run(4)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Run(4)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "auto session", got, want)
}

func newDefaultCfg(t *testing.T, cfg SessionConfig, n int) *Session[float32] {
	t.Helper()
	cfg.MaxBatchSize = n
	s, err := NewSession[float32](cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Another setting, bound or model is another curve: measured again, with an entry of its own.
func TestCurveKey(t *testing.T) {
	initORT(t)
	scan, err := scanModel(defaultModel, true)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	base := autoConfig("", &log)
	shape := []int64{3, 224, 224}
	key := func(c SessionConfig, o CurveOptions, elem string, shape []int64, s *modelScan) string {
		k := curveKey(c, s, o, elem, shape)
		return hex.EncodeToString(k[:])
	}
	seen := map[string]string{key(base, testCurve, "float32", shape, scan): "base"}
	with := func(f func(*SessionConfig)) SessionConfig { c := base; f(&c); return c }
	other := *scan
	other.sum[3] ^= 1
	for name, k := range map[string]string{
		"intra_op_threads 2": key(with(func(c *SessionConfig) { c.IntraOp = 2 }), testCurve, "float32", shape, scan),
		"inter_op_threads 2": key(with(func(c *SessionConfig) { c.InterOp = 2 }), testCurve, "float32", shape, scan),
		"graph_optimization": key(with(func(c *SessionConfig) { c.GraphOptimization = "basic" }), testCurve, "float32", shape, scan),
		"cpu_mem_arena off":  key(with(func(c *SessionConfig) { c.NoCPUMemArena = true }), testCurve, "float32", shape, scan),
		"rewrite":            key(with(func(c *SessionConfig) { c.RewriteHardSwish = !c.RewriteHardSwish }), testCurve, "float32", shape, scan),
		"provider cuda":      key(with(func(c *SessionConfig) { c.Provider = "cuda" }), testCurve, "float32", shape, scan),
		"another model":      key(base, testCurve, "float32", shape, &other),
		"another input size": key(base, testCurve, "float32", []int64{3, 256, 256}, scan),
		"uint8 input":        key(base, testCurve, "uint8", shape, scan),
		"ceiling":            key(base, CurveOptions{Ceiling: 16, Budget: testCurve.Budget}, "float32", shape, scan),
		"run limit":          key(base, CurveOptions{Ceiling: 8, RunLimit: time.Second, Budget: testCurve.Budget}, "float32", shape, scan),
		"memory bound":       key(base, CurveOptions{Ceiling: 8, Memory: 1 << 30, Budget: testCurve.Budget}, "float32", shape, scan),
	} {
		if prev, ok := seen[k]; ok && runtime.GOARCH == "amd64" || ok && name != "rewrite" {
			t.Errorf("%s: the same key as %s", name, prev)
		}
		seen[k] = name
	}
	if key(base, CurveOptions{Ceiling: 8, Budget: time.Minute}, "float32", shape, scan) != key(base, testCurve, "float32", shape, scan) {
		t.Error("the time budget changed the key")
	}
	if base.CacheDir = "/elsewhere"; key(base, testCurve, "float32", shape, scan) != key(autoConfig("", &log), testCurve, "float32", shape, scan) {
		t.Error("the cache folder changed the key")
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" && !strings.Contains(cpuModel(), "model name=") {
		t.Errorf("cpuModel() = %q", cpuModel())
	}
	if deviceModel("cpu") != "" || deviceModel("cuda") == "" {
		t.Errorf("device: cpu %q, cuda %q", deviceModel("cpu"), deviceModel("cuda"))
	}
}

// A damaged entry, or one that could not have been measured with these bounds, is refused
// with a warning, removed, and the curve measured and written again.
func TestCurveCacheRefusesDamagedEntry(t *testing.T) {
	initORT(t)
	dir := t.TempDir()
	var log bytes.Buffer
	cfg := autoConfig(dir, &log)
	_, first := newAuto(t, cfg, testCurve, func(c BatchCurve) int { return c.Choose(0) })
	path := curveEntries(t, dir)[0]
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(e map[string]any)) []byte {
		var e map[string]any
		if err := json.Unmarshal(good, &e); err != nil {
			t.Fatal(err)
		}
		f(e)
		b, _ := json.Marshal(e)
		return b
	}
	for name, data := range map[string][]byte{
		"not json":       []byte("{\"format\": "),
		"empty":          nil,
		"too large":      bytes.Repeat([]byte(" "), maxCurveEntry+1),
		"another format": edit(func(e map[string]any) { e["format"] = "imagegate batch curve 0" }),
		"another key":    edit(func(e map[string]any) { e["key"] = strings.Repeat("0", 64) }),
		"no points":      edit(func(e map[string]any) { e["points"] = []any{} }),
		"over the ceiling": edit(func(e map[string]any) {
			e["points"] = []any{map[string]any{"batch": 1, "run_ns": 1e6, "samples": 3}, map[string]any{"batch": 16, "run_ns": 1e6, "samples": 3}}
		}),
		"out of order": edit(func(e map[string]any) {
			e["points"] = []any{map[string]any{"batch": 1, "run_ns": 1e6, "samples": 3}, map[string]any{"batch": 1, "run_ns": 1e6, "samples": 3}}
		}),
		"zero run":      edit(func(e map[string]any) { e["points"] = []any{map[string]any{"batch": 1, "run_ns": 0, "samples": 3}} }),
		"unknown clock": edit(func(e map[string]any) { e["clock"] = "sundial" }),
		"unknown stop":  edit(func(e map[string]any) { e["stop"] = "tired" }),
	} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		log.Reset()
		_, c := newAuto(t, cfg, testCurve, func(c BatchCurve) int { return c.Choose(0) })
		if c.Cached || len(c.Points) == 0 {
			t.Errorf("%s: served %+v", name, c)
		}
		if strings.Count(log.String(), "\n") != 1 || !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "entry refused") {
			t.Errorf("%s: logged %q, want one warning", name, log.String())
		}
		if now, err := os.ReadFile(path); err != nil || !json.Valid(now) || bytes.Equal(now, data) {
			t.Errorf("%s: the entry was not written again (%v)", name, err)
		}
	}
	_ = first
}

// A folder that cannot be written costs a warning, and the model is served with the choice
// measured; a model whose batch axis is fixed at 1 gets 1, unmeasured; cache_dir off measures
// every time and writes nothing.
func TestNewSessionAutoWithoutCache(t *testing.T) {
	initORT(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	s, c := newAuto(t, autoConfig(filepath.Join(file, "cache"), &log), testCurve, func(c BatchCurve) int { return 2 })
	if c.Cached || len(c.Points) == 0 || s.MaxBatchSize() != 2 {
		t.Errorf("below a file: %+v, %d rows", c, s.MaxBatchSize())
	}
	if !strings.Contains(log.String(), "batch curve cache: cannot write") || !strings.Contains(log.String(), "runtime.cache_dir") {
		t.Errorf("logged %q", log.String())
	}

	off := t.TempDir()
	log.Reset()
	cfg := autoConfig("off", &log)
	for range 2 {
		if _, c := newAuto(t, cfg, testCurve, func(c BatchCurve) int { return 1 }); c.Cached || len(c.Points) == 0 {
			t.Errorf("cache_dir off: %+v", c)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(off, "*")); len(m) != 0 || log.Len() != 0 {
		t.Errorf("cache_dir off wrote %v, logged %q", m, log.String())
	}

	g := onnxtest.Means("float32", "NCHW", int64(32), int64(32), false)
	g.Inputs[0].Shape[0], g.Outputs[0].Shape[0] = int64(1), int64(1)
	model := filepath.Join(t.TempDir(), "fixed.onnx")
	if err := os.WriteFile(model, g.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	called := false
	fixed, fc, err := NewSessionAuto[float32](SessionConfig{ModelPath: model, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 32, 32}, IntraOp: 1, InterOp: 1, CacheDir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))}, testCurve, func(BatchCurve) int { called = true; return 8 })
	if err != nil {
		t.Fatal(err)
	}
	defer fixed.Close()
	if called || len(fc.Points) != 0 || fixed.MaxBatchSize() != 1 || len(curveEntries(t, dir)) != 0 {
		t.Errorf("batch axis fixed at 1: choose called %v, curve %+v, %d rows, entries %v", called, fc, fixed.MaxBatchSize(), curveEntries(t, dir))
	}
	g.Inputs[0].Shape[0] = int64(4)
	if err := os.WriteFile(model, g.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewSessionAuto[float32](SessionConfig{ModelPath: model, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 32, 32}, IntraOp: 1, InterOp: 1}, testCurve, func(BatchCurve) int { return 1 }); err == nil || !strings.Contains(err.Error(), "fixed batch axis of 4") {
		t.Errorf("batch axis fixed at 4: err = %v", err)
	}
}

// The measurement's session and its working memory go once it is measured: the process does
// not keep what ONNX Runtime allocated for the largest batch measured.
func TestNewSessionAutoReleasesMeasurementMemory(t *testing.T) {
	initORT(t)
	var log bytes.Buffer
	cfg := autoConfig("off", &log)
	// A first session, so that what ONNX Runtime allocates once per process is allocated.
	newAuto(t, cfg, CurveOptions{Ceiling: 1}, func(BatchCurve) int { return 1 })
	before := statusKB(t, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil { // resets VmHWM
		t.Skip("cannot reset the peak resident memory here:", err)
	}
	_, c := newAuto(t, cfg, CurveOptions{Ceiling: 16, Budget: 300 * time.Millisecond}, func(c BatchCurve) int { return 1 })
	peak, after := statusKB(t, "VmHWM"), statusKB(t, "VmRSS")
	if c.Points[len(c.Points)-1].Batch < 4 {
		t.Skipf("measured up to %d only (%s): too little to see", c.Points[len(c.Points)-1].Batch, c)
	}
	// This model's working memory is some 7 MB per row: 28 MB or more at the peak.
	if peak-before < 16<<10 || after-before > (peak-before)/2 {
		t.Errorf("resident memory: %d MB before, %d MB at the peak, %d MB after (%s)", before>>10, peak>>10, after>>10, c)
	}
}

// statusKB reads a field of /proc/self/status in kB, or skips.
func statusKB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb); err == nil {
				return kb
			}
		}
	}
	t.Skipf("no %s in /proc/self/status", field)
	return 0
}
