package ort

import (
	"bytes"
	"encoding/hex"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// cached makes a session of the shipped model (or model) with the cache in dir, runs it on
// a fixed random batch of 2 and returns the scores, how the session was made and what it
// logged.
func cached(t *testing.T, model, dir string, rewrite bool) (out []float32, how string, sites int, logged string) {
	t.Helper()
	var log bytes.Buffer
	s, err := NewSession[float32](SessionConfig{ModelPath: model, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, MaxBatchSize: 2, IntraOp: 1, InterOp: 1, RewriteHardSwish: rewrite,
		CacheDir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewSource(11))
	for i := range 2 {
		in := s.Input(i)
		for j := range in {
			in[j] = float32((rng.Float64() - 0.45) / 0.225)
		}
	}
	o, err := s.Run(2)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), o...), s.core.cache, s.HardSwishRewrites(), log.String()
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d scores, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: score %d is %v, %v without the cache (max |Δ| %g)", what, i, got[i], want[i], maxAbsDiff(got, want))
		}
	}
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.ort"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The first session writes the entry, the next one loads it, and both compute the very
// scores of a session made without the cache (computed here, on this CPU), to the bit, with
// the rewrite and without it; each setting has its own entry.
func TestCacheMissThenHit(t *testing.T) {
	initORT(t)
	dir := t.TempDir()
	for _, rewrite := range []bool{true, false} {
		want, how, wantSites, _ := cached(t, defaultModel, "off", rewrite)
		if how != cacheOff {
			t.Fatalf("cache off: %q", how)
		}
		miss, how, sites, log := cached(t, defaultModel, dir, rewrite)
		if how != cacheWritten || strings.Count(log, "\n") != 1 || !strings.Contains(log, "level=INFO") || !strings.Contains(log, dir) {
			t.Fatalf("rewrite %v, first session: %q, log %q", rewrite, how, log)
		}
		sameBits(t, "written", miss, want)
		hit, how, hitSites, log := cached(t, defaultModel, dir, rewrite)
		if how != cacheHit || log != "" {
			t.Fatalf("rewrite %v, second session: %q, log %q", rewrite, how, log)
		}
		sameBits(t, "loaded", hit, want)
		if sites != wantSites || hitSites != wantSites {
			t.Errorf("rewrite %v: HardSwishRewrites %d written, %d loaded, %d without the cache", rewrite, sites, hitSites, wantSites)
		}
	}
	if n := len(entries(t, dir)); n != 2 {
		t.Errorf("%d entries for two settings", n)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp.ort")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

// A damaged entry (a flipped bit, truncated, empty, another key's, not an entry at all) is
// refused with a warning, never loaded: the session is made from the model, computes the
// scores it computes without the cache, and writes a good entry in its place.
func TestCacheRefusesDamagedEntry(t *testing.T) {
	initORT(t)
	dir := t.TempDir()
	want, _, _, _ := cached(t, defaultModel, "off", true)
	if _, how, _, _ := cached(t, defaultModel, dir, true); how != cacheWritten {
		t.Fatalf("first session: %q", how)
	}
	es := entries(t, dir)
	if len(es) != 1 {
		t.Fatalf("entries %v", es)
	}
	good, err := os.ReadFile(es[0])
	if err != nil {
		t.Fatal(err)
	}
	// another key's entry: the same bytes, sealed for a key of zeros
	other := bytes.Clone(good)
	copy(other[len(other)-trailerLen+16:], make([]byte, 32))
	for name, b := range map[string][]byte{
		"bit flipped in the graph": func() []byte { b := bytes.Clone(good); b[len(b)/3] ^= 4; return b }(),
		"truncated":                good[:len(good)-trailerLen/2],
		"payload cut":              append(bytes.Clone(good[:len(good)/2]), good[len(good)-trailerLen:]...),
		"empty":                    {},
		"another key's":            other,
		"not an entry":             bytes.Repeat([]byte("imagegate"), 100),
	} {
		if err := os.WriteFile(es[0], b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, how, _, log := cached(t, defaultModel, dir, true)
		if how != cacheWritten {
			t.Errorf("%s: the session was %q", name, how)
		}
		if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "entry refused") || strings.Count(log, "level=WARN") != 1 {
			t.Errorf("%s: logged %q", name, log)
		}
		sameBits(t, name, out, want)
		if _, how, _, _ := cached(t, defaultModel, dir, true); how != cacheHit {
			t.Errorf("%s: the entry written in its place was not loaded: %q", name, how)
		}
	}
}

// A cache folder that cannot be written costs one warning that names the setting, and the
// session is made as without the cache; one that can be read still serves its entries.
func TestCacheUnwritableFolder(t *testing.T) {
	initORT(t)
	want, _, _, _ := cached(t, defaultModel, "off", true)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(file, "cache")} // below a file: no folder can be made
	if os.Geteuid() != 0 {                         // permissions bind: a read-only folder too
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, ro)
	} else {
		t.Log("running as root: folder permissions do not bind, only the folder below a file is tried")
	}
	for _, dir := range dirs {
		out, how, _, log := cached(t, defaultModel, dir, true)
		if how != cacheMiss {
			t.Errorf("%s: the session was %q", dir, how)
		}
		if strings.Count(log, "\n") != 1 || !strings.Contains(log, "level=WARN") || !strings.Contains(log, "runtime.cache_dir") {
			t.Errorf("%s: logged %q, want one warning naming runtime.cache_dir", dir, log)
		}
		sameBits(t, dir, out, want)
	}

	// A folder with an entry, made read-only (as a cache shipped in a read-only image is).
	dir := t.TempDir()
	if _, how, _, _ := cached(t, defaultModel, dir, true); how != cacheWritten {
		t.Fatalf("first session: %q", how)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	out, how, _, log := cached(t, defaultModel, dir, true)
	if how != cacheHit || log != "" {
		t.Errorf("read-only folder with an entry: %q, logged %q", how, log)
	}
	sameBits(t, "read-only folder", out, want)
}

// Another model file (here the shipped one with one unknown field appended, which ONNX
// Runtime ignores) is another key: a miss, and an entry of its own.
func TestCacheKeyFollowsModelContents(t *testing.T) {
	initORT(t)
	dir, models := t.TempDir(), t.TempDir()
	data, err := os.ReadFile(defaultModel)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(models, "model.onnx")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, how, _, _ := cached(t, model, dir, true); how != cacheWritten {
		t.Fatalf("first session: %q", how)
	}
	if _, how, _, _ := cached(t, model, dir, true); how != cacheHit {
		t.Fatalf("same model: %q", how)
	}
	changed := protowire.AppendTag(bytes.Clone(data), 1000, protowire.VarintType)
	changed = protowire.AppendVarint(changed, 1)
	if err := os.WriteFile(model, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, how, _, _ := cached(t, model, dir, true); how != cacheWritten {
		t.Errorf("changed model: %q", how)
	}
	if n := len(entries(t, dir)); n != 2 {
		t.Errorf("%d entries, want one per model file", n)
	}
}

// The key covers the CPU's features, ONNX Runtime's version and the options that shape the
// optimized graph, and nothing that does not (the batch size).
func TestCacheKey(t *testing.T) {
	initORT(t)
	scan, err := scanModel(defaultModel, true)
	if err != nil {
		t.Fatal(err)
	}
	base := SessionConfig{ModelPath: defaultModel, MaxBatchSize: 2, IntraOp: 1, InterOp: 1, RewriteHardSwish: true}
	key := func(c SessionConfig) string { k := cacheKey(c, scan); return hex.EncodeToString(k[:]) }
	seen := map[string]string{key(base): "base"}
	for name, c := range map[string]SessionConfig{
		"intra_op_threads 2":  {ModelPath: defaultModel, MaxBatchSize: 2, IntraOp: 2, InterOp: 1, RewriteHardSwish: true},
		"graph_optimization":  {ModelPath: defaultModel, MaxBatchSize: 2, IntraOp: 1, InterOp: 1, RewriteHardSwish: true, GraphOptimization: "basic"},
		"cpu_mem_arena off":   {ModelPath: defaultModel, MaxBatchSize: 2, IntraOp: 1, InterOp: 1, RewriteHardSwish: true, NoCPUMemArena: true},
		"inter_op_threads 2":  {ModelPath: defaultModel, MaxBatchSize: 2, IntraOp: 1, InterOp: 2, RewriteHardSwish: true},
		"another model (key)": base,
	} {
		s := *scan
		if name == "another model (key)" {
			s.sum[0] ^= 1
		}
		k := cacheKey(c, &s)
		if prev, ok := seen[hex.EncodeToString(k[:])]; ok {
			t.Errorf("%s: the same key as %s", name, prev)
		}
		seen[hex.EncodeToString(k[:])] = name
	}
	b := base
	b.MaxBatchSize = 32
	if key(b) != key(base) {
		t.Error("the batch size changed the key")
	}
	if f := cpuFeatures(); runtime.GOARCH == "amd64" && !strings.Contains(" "+f+" ", " SSE2 ") {
		t.Errorf("CPU features %q: every x86-64 CPU has SSE2", f)
	}
}

// A model file replaced while the session is made (after it was hashed, before ONNX Runtime
// read it) leaves no entry: the entry would hold the new model under the old one's key.
func TestCacheModelChangedWhileLoading(t *testing.T) {
	initORT(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the test changes the model from the HardSwish rewrite, which runs on x86-64 only")
	}
	dir, models := t.TempDir(), t.TempDir()
	data, err := os.ReadFile(defaultModel)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(models, "model.onnx")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() { rewriteModel = rewriteHardSwish }()
	rewriteModel = func(m []byte) ([]byte, int, error) { // runs between the hash and the session
		changed := protowire.AppendTag(bytes.Clone(data), 1000, protowire.VarintType)
		if err := os.WriteFile(model, protowire.AppendVarint(changed, 1), 0o644); err != nil {
			t.Fatal(err)
		}
		return rewriteHardSwish(m)
	}
	_, how, _, log := cached(t, model, dir, true)
	if how != cacheMiss || !strings.Contains(log, "changed") {
		t.Errorf("the session was %q, logged %q", how, log)
	}
	if m := entries(t, dir); len(m) != 0 {
		t.Errorf("entries written: %v", m)
	}
}
