package ort

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Batch curves kept between starts, beside the model cache's entries (runtime.cache_dir).
//
// An entry is <dir>/<key>.curve.json, the key a SHA-256 of everything that moves a model's run
// times: the model file's contents, the ONNX Runtime version, the session's settings (the
// rewrite, optimization level, threads, arena, execution provider), the input one row holds,
// the machine (the CPU's model name and features, its CPU count; a GPU's model for the GPU
// providers) and the measurement's bounds (ceiling, run limit, memory). Unlike the model
// cache it applies to every execution provider: the curve is a few hundred bytes of JSON,
// whatever the device. An entry that does not parse, names another key or holds a curve that
// could not have been measured is removed and measured anew; entries are written to a
// temporary file and renamed into place, so a reader sees a whole entry or none. As for the
// model cache, whoever can write the folder decides what is read from it.

// curveFormat names the entry's layout and what the key covers; change it when either
// changes, or when the measurement changes what it finds.
const curveFormat = "imagegate batch curve 1"

// maxCurveEntry bounds an entry's size (a curve of every power of two up to 4096 is ~1 KB).
const maxCurveEntry = 64 << 10

type curveCache struct {
	dir  string
	key  [sha256.Size]byte
	path string
	mode fs.FileMode
	log  *slog.Logger
}

// curveEntry is an entry's JSON.
type curveEntry struct {
	Format   string    `json:"format"`
	Key      string    `json:"key"`
	Model    string    `json:"model"` // the path it was measured for (for people; the key has its contents)
	Measured time.Time `json:"measured"`
	BatchCurve
}

// openCurveCache returns the curve cache cfg asks for (its CacheDir), or nil: none asked for,
// no user cache folder (logged), a model whose contents were not hashed or whose data lives
// in other files (which the key would not cover).
func openCurveCache(cfg SessionConfig, scan *modelScan, o CurveOptions, elem string, inShape []int64) *curveCache {
	if scan == nil || scan.sum == [sha256.Size]byte{} || scan.externalData {
		return nil
	}
	log := logger(cfg)
	dir, err := cacheFolder(cfg.CacheDir)
	if err != nil {
		log.Warn("batch curve cache off: no user cache folder (set runtime.cache_dir to a writable folder, or off)", "model", cfg.ModelPath, "err", err)
		return nil
	}
	if dir == "" {
		return nil
	}
	c := &curveCache{dir: dir, mode: scan.mode.Perm() &^ 0o111, log: log}
	c.key = curveKey(cfg, scan, o, elem, inShape)
	c.path = filepath.Join(dir, hex.EncodeToString(c.key[:])+".curve.json")
	return c
}

// cacheFolder resolves runtime.cache_dir: "" for off, the user's cache folder's imagegate for
// auto.
func cacheFolder(dir string) (string, error) {
	switch dir {
	case "", "off":
		return "", nil
	case "auto":
		d, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(d, "imagegate"), nil
	}
	return dir, nil
}

func logger(cfg SessionConfig) *slog.Logger {
	if cfg.Logger != nil {
		return cfg.Logger
	}
	return slog.Default()
}

// curveKey covers what moves cfg's model's run times on this machine, and the measurement's
// bounds.
func curveKey(cfg SessionConfig, scan *modelScan, o CurveOptions, elem string, inShape []int64) [sha256.Size]byte {
	level := cmpOr(cfg.GraphOptimization, "all")
	provider := cmpOr(cfg.Provider, "cpu")
	h := sha256.New()
	fmt.Fprintf(h, "%s\nmodel %x %d\nonnxruntime %s\nhardswish rewrite %d %v\noptimization %s\nthreads %d %d\narena off %v\nprovider %s\n",
		curveFormat, scan.sum, scan.size, Version(), rewriteVersion, rewriteApplies(cfg), level, cfg.IntraOp, cfg.InterOp, cfg.NoCPUMemArena, provider)
	fmt.Fprintf(h, "input %s %v\n%s/%s cpus %d\ncpu %s\nfeatures %s\ndevice %s\n",
		elem, inShape, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), cpuFeatures(), deviceModel(provider))
	fmt.Fprintf(h, "ceiling %d\nrun limit %d\nmemory %d\n", o.Ceiling, o.RunLimit, o.Memory)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// cpuModel is the CPU's model as /proc/cpuinfo names it (its first CPU's "model name", or an
// arm64 CPU's implementer, part and variant): two CPUs with the same features can run a model
// at different speeds per batch size. "" where there is no /proc/cpuinfo.
func cpuModel() string {
	return firstFields("/proc/cpuinfo", "model name", "CPU implementer", "CPU part", "CPU variant")
}

// deviceModel names the GPU the CUDA and TensorRT providers run on: the first NVIDIA GPU the
// driver lists (/proc/driver/nvidia/gpus/*/information); "" for the CPU provider.
func deviceModel(provider string) string {
	if provider == "cpu" {
		return ""
	}
	infos, _ := filepath.Glob("/proc/driver/nvidia/gpus/*/information")
	slices.Sort(infos)
	for _, p := range infos {
		if m := firstFields(p, "Model"); m != "" {
			return m
		}
	}
	return "unknown"
}

// firstFields returns, for each of keys, the first "key: value" line of the file at path,
// joined by ";" (at most 1 MiB of it is read).
func firstFields(path string, keys ...string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	found := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() && len(found) < len(keys) {
		k, v, ok := strings.Cut(sc.Text(), ":")
		k = strings.TrimSpace(k)
		if ok && slices.Contains(keys, k) && found[k] == "" {
			found[k] = strings.TrimSpace(v)
		}
	}
	var out []string
	for _, k := range keys {
		if v := found[k]; v != "" {
			out = append(out, k+"="+v)
		}
	}
	return strings.Join(out, ";")
}

// load returns the cached curve, or false: none, or one refused (logged and removed).
func (c *curveCache) load(ceiling int) (BatchCurve, bool) {
	f, err := os.Open(c.path)
	if err != nil {
		return BatchCurve{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCurveEntry+1))
	if err == nil && len(data) > maxCurveEntry {
		err = fmt.Errorf("over %d bytes", maxCurveEntry)
	}
	var e curveEntry
	if err == nil {
		err = json.Unmarshal(data, &e)
	}
	if err == nil {
		err = e.check(c.key, ceiling)
	}
	if err != nil {
		c.log.Warn("batch curve cache: entry refused and removed; the model's batch sizes are measured again", "entry", c.path, "reason", err)
		if rerr := os.Remove(c.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			c.log.Warn("batch curve cache: cannot remove a refused entry", "entry", c.path, "err", rerr)
		}
		return BatchCurve{}, false
	}
	e.Cached = true
	return e.BatchCurve, true
}

// check refuses an entry that is not one this key's measurement could have written.
func (e *curveEntry) check(key [sha256.Size]byte, ceiling int) error {
	switch {
	case e.Format != curveFormat:
		return fmt.Errorf("format %q, not %q", e.Format, curveFormat)
	case e.Key != hex.EncodeToString(key[:]):
		return errors.New("written for another key")
	case len(e.Points) == 0 || e.Points[0].Batch != 1:
		return errors.New("no measurement of batch 1")
	case e.Clock != ClockThreadCPU && e.Clock != ClockWall:
		return fmt.Errorf("unknown clock %q", e.Clock)
	}
	switch e.Stop {
	case StopCeiling, StopRunLimit, StopMemory, StopRising, StopFlat, StopBudget, StopRunFailed:
	default:
		return fmt.Errorf("unknown stop %q", e.Stop)
	}
	for i, p := range e.Points {
		if p.Batch > ceiling || p.Run <= 0 || p.Samples < 1 || i > 0 && p.Batch <= e.Points[i-1].Batch {
			return fmt.Errorf("point %d (batch %d, run %s, %d samples) out of order or out of range", i, p.Batch, p.Run, p.Samples)
		}
	}
	return nil
}

// store writes the curve as this key's entry; a folder that cannot be written costs a warning.
func (c *curveCache) store(curve BatchCurve, model string) {
	e := curveEntry{Format: curveFormat, Key: hex.EncodeToString(c.key[:]), Model: model, Measured: time.Now().UTC().Truncate(time.Second), BatchCurve: curve}
	data, err := json.MarshalIndent(e, "", "  ")
	if err == nil {
		err = os.MkdirAll(c.dir, 0o755)
	}
	if err == nil {
		c.removeStale()
		err = c.write(append(data, '\n'))
	}
	if err != nil {
		c.log.Warn("batch curve cache: cannot write; the next start measures the model's batch sizes again (set runtime.cache_dir to a writable folder, or off)",
			"dir", c.dir, "err", err)
		return
	}
	c.log.Debug("batch curve cache: written", "entry", c.path)
}

func (c *curveCache) write(data []byte) error {
	f, err := os.CreateTemp(c.dir, hex.EncodeToString(c.key[:])+".*.tmp.curve")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(c.mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// removeStale removes this key's temporary entries left by processes that died writing them.
func (c *curveCache) removeStale() {
	old, _ := filepath.Glob(filepath.Join(c.dir, hex.EncodeToString(c.key[:])+".*.tmp.curve"))
	for _, p := range old {
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > staleTemp {
			os.Remove(p)
		}
	}
}
