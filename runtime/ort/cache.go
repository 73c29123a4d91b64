package ort

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"time"

	onnx "github.com/yalue/onnxruntime_go"
	"golang.org/x/sys/cpu"
)

// The model cache.
//
// A session made from the model file pays, at every start, for the HardSwish rewrite and
// for ONNX Runtime's graph optimization, and for the fresh memory both touch. The cache keeps
// the result: ONNX Runtime writes the optimized graph of the first session in its own format
// (.ort, a flatbuffer), and later starts map that file and load it as it is, with
// optimization off and the weights read in place (session.use_ort_model_bytes_directly and
// use_ort_model_bytes_for_initializers), which ONNX Runtime supports for this format only.
// docs/startup.md has the figures.
//
// An entry is <dir>/<key>.ort, the key a SHA-256 of everything that shapes the optimized
// graph: the model file's contents, the ONNX Runtime version, the rewrite's version and
// whether it applies, the optimization level and session options, and the CPU's features
// (ONNX Runtime's blocked layout is 8 or 16 channels wide by AVX2 or AVX-512, and the optimized
// graph is only valid on CPUs like the one that made it). A trailer holds the payload's
// length and CRC-32C (damage, not forgery, is what it detects: whoever can write the folder
// could write a matching hash of any kind), the key and the rewrite's site count; an entry
// whose trailer or checksum does not match is never loaded: it is removed and written anew.
// Entries are written to a temporary file and renamed into place, so a reader sees a whole
// entry or none, and are never modified in place (they are mapped while their session
// lives). A folder that cannot be written costs one warning and the session is made as
// without the cache.

// cacheFormat names the entry layout and what the key covers; change it when either changes.
const cacheFormat = "imagegate model cache 1"

// entryMagic ends every entry.
const entryMagic = "igcache1"

// trailer layout: payload length u64, rewrite sites u32, payload CRC-32C u32, key [32],
// magic [8].
const trailerLen = 8 + 4 + 4 + sha256.Size + len(entryMagic)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// How a session was made (sessionCore.cache), for tests and BenchmarkStartupSteps.
const (
	cacheOff     = "" // no cache, or not applicable
	cacheHit     = "hit"
	cacheWritten = "miss, written"
	cacheMiss    = "miss, not written"
)

// staleTemp: a temporary entry older than this is left from a process that died writing it.
const staleTemp = time.Hour

type modelCache struct {
	dir  string
	key  [sha256.Size]byte
	path string
	mode fs.FileMode // the model file's permissions: an entry is as readable as its model
	log  *slog.Logger
}

// cacheWanted reports whether cfg asks for the cache and it can apply to cfg's options: not
// with another provider than the CPU (its graph depends on the device), nor with an optimized
// model path asked for (ONNX Runtime writes one file per session).
func cacheWanted(cfg SessionConfig) bool {
	return cfg.CacheDir != "" && cfg.CacheDir != "off" && cfg.OptimizedModelPath == "" &&
		(cfg.Provider == "" || cfg.Provider == "cpu")
}

// openCache returns cfg's cache, or nil when cfg asks for none or it does not apply
// (cacheWanted; a model with data in other files, which the key would not cover, or larger
// than an entry may be).
func openCache(cfg SessionConfig, scan *modelScan) *modelCache {
	if !cacheWanted(cfg) || scan == nil || scan.sum == [sha256.Size]byte{} || scan.externalData || scan.size > maxRewriteBytes {
		return nil
	}
	log := logger(cfg)
	dir, err := cacheFolder(cfg.CacheDir)
	if err != nil {
		log.Warn("model cache off: no user cache folder (set runtime.cache_dir to a writable folder, or off)", "model", cfg.ModelPath, "err", err)
		return nil
	}
	c := &modelCache{dir: dir, mode: scan.mode.Perm() &^ 0o111, log: log}
	c.key = cacheKey(cfg, scan)
	c.path = filepath.Join(dir, hex.EncodeToString(c.key[:])+".ort")
	return c
}

// cacheKey covers everything that shapes ONNX Runtime's optimized graph of cfg's model.
func cacheKey(cfg SessionConfig, scan *modelScan) [sha256.Size]byte {
	level := cfg.GraphOptimization
	if level == "" {
		level = "all"
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\nmodel %x %d\nonnxruntime %s\nhardswish rewrite %d %v\n%s/%s %s\noptimization %s\nthreads %d %d\narena off %v\n",
		cacheFormat, scan.sum, scan.size, Version(), rewriteVersion, rewriteApplies(cfg),
		runtime.GOOS, runtime.GOARCH, cpuFeatures(), level, cfg.IntraOp, cfg.InterOp, cfg.NoCPUMemArena)
	if scan.initInputs > 0 { // the graph optimized is the one without them (initinputs.go)
		fmt.Fprintf(h, "initializer inputs dropped %d\n", scan.initInputs)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// cpuFeatures lists the instruction set extensions Go detects on this CPU ("AVX2 AVX512F …").
func cpuFeatures() string {
	var v reflect.Value
	switch runtime.GOARCH {
	case "amd64", "386":
		v = reflect.ValueOf(cpu.X86)
	case "arm64":
		v = reflect.ValueOf(cpu.ARM64)
	default:
		return ""
	}
	var fs []string
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; strings.HasPrefix(name, "Has") && v.Field(i).Kind() == reflect.Bool && v.Field(i).Bool() {
			fs = append(fs, name[3:])
		}
	}
	return strings.Join(fs, " ")
}

// load makes a session from the cache's entry, or returns nil: none, or one refused (logged
// and removed).
func (c *modelCache) load(cfg SessionConfig) *sessionCore {
	f, err := os.Open(c.path)
	if err != nil { // none, or a folder that cannot be used: begin says so when it writes
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		c.reject(err)
		return nil
	}
	if fi.Size() < int64(trailerLen+1) || fi.Size() > maxRewriteBytes {
		c.reject(fmt.Errorf("%d bytes", fi.Size()))
		return nil
	}
	data, err := mapFile(f, int(fi.Size()))
	if err != nil {
		c.reject(err)
		return nil
	}
	payload, sites, err := verifyEntry(data, c.key)
	if err != nil {
		unmapFile(data)
		c.reject(err)
		return nil
	}
	lc := cfg
	lc.GraphOptimization = "disabled" // the entry is the optimized graph
	opts, err := sessionOptions(lc)
	if err != nil {
		unmapFile(data)
		return nil
	}
	defer opts.Destroy()
	for _, kv := range [][2]string{
		{"session.load_model_format", "ORT"},
		{"session.use_ort_model_bytes_directly", "1"},
		{"session.use_ort_model_bytes_for_initializers", "1"},
	} {
		if err := opts.AddSessionConfigEntry(kv[0], kv[1]); err != nil {
			unmapFile(data)
			c.log.Warn("model cache: cannot set a session option; the model is optimized again", "option", kv[0], "err", err)
			return nil
		}
	}
	sess, err := onnx.NewDynamicAdvancedSessionWithONNXData(payload, []string{cfg.InputName}, cfg.outputNames(), opts)
	if err != nil {
		unmapFile(data)
		c.reject(fmt.Errorf("ONNX Runtime refused it: %w", err))
		return nil
	}
	c.log.Debug("model cache: optimized graph loaded", "entry", c.path)
	return &sessionCore{sess: sess, refs: 1, rewrites: sites, mapped: data, cache: cacheHit}
}

// verifyEntry checks an entry against key and returns its payload and rewrite site count.
func verifyEntry(data []byte, key [sha256.Size]byte) (payload []byte, sites int, err error) {
	if len(data) < trailerLen+1 {
		return nil, 0, errors.New("truncated")
	}
	t := data[len(data)-trailerLen:]
	if string(t[trailerLen-len(entryMagic):]) != entryMagic {
		return nil, 0, errors.New("no trailer (truncated or not an entry)")
	}
	n := binary.LittleEndian.Uint64(t)
	if n != uint64(len(data)-trailerLen) {
		return nil, 0, fmt.Errorf("payload of %d bytes, the trailer says %d", len(data)-trailerLen, n)
	}
	if !bytes.Equal(t[16:16+sha256.Size], key[:]) {
		return nil, 0, errors.New("written for another key")
	}
	payload = data[:n]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(t[12:]) {
		return nil, 0, errors.New("checksum mismatch")
	}
	return payload, int(binary.LittleEndian.Uint32(t[8:])), nil
}

// reject logs why an entry is not loaded and removes it, to be written anew.
func (c *modelCache) reject(why error) {
	c.log.Warn("model cache: entry refused and removed; the model is optimized again", "entry", c.path, "reason", why)
	if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("model cache: cannot remove a refused entry", "entry", c.path, "err", err)
	}
}

// begin makes opts write the optimized graph to a new temporary entry, whose path it
// returns; "" when the folder cannot be written (logged).
func (c *modelCache) begin(opts *onnx.SessionOptions) string {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		c.cannotWrite(err)
		return ""
	}
	c.removeStale()
	f, err := os.CreateTemp(c.dir, hex.EncodeToString(c.key[:])+".*.tmp.ort")
	if err != nil {
		c.cannotWrite(err)
		return ""
	}
	tmp := f.Name()
	f.Close()
	err = opts.SetOptimizedModelFilePath(tmp)
	if err == nil {
		err = opts.AddSessionConfigEntry("session.save_model_format", "ORT")
	}
	if err != nil {
		os.Remove(tmp)
		c.log.Warn("model cache: cannot ask ONNX Runtime for its optimized graph; starting without the cache", "err", err)
		return ""
	}
	return tmp
}

func (c *modelCache) cannotWrite(err error) {
	c.log.Warn("model cache: cannot write; starting without it (set runtime.cache_dir to a writable folder, or off)", "dir", c.dir, "err", err)
}

// commit seals the temporary entry ONNX Runtime wrote (the trailer) and renames it into place,
// if the model file still has the contents scan hashed (ONNX Runtime read it again since).
func (c *modelCache) commit(tmp string, sites int, scan *modelScan) error {
	if now, err := scanModel(scan.path, true); err != nil || now.sum != scan.sum {
		os.Remove(tmp)
		c.log.Info("model cache: the model file changed while it was loaded; no entry written", "model", scan.path)
		return errors.New("the model changed")
	}
	err := c.seal(tmp, sites)
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
		c.log.Warn("model cache: cannot write an entry; the next start optimizes the model again", "entry", c.path, "err", err)
		return err
	}
	c.log.Info("model cache: optimized graph written; later starts load it", "entry", c.path)
	return nil
}

func (c *modelCache) seal(tmp string, sites int) error {
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if n == 0 || n > maxRewriteBytes {
		return fmt.Errorf("ONNX Runtime wrote %d bytes", n)
	}
	t := make([]byte, 0, trailerLen)
	t = binary.LittleEndian.AppendUint64(t, uint64(n))
	t = binary.LittleEndian.AppendUint32(t, uint32(sites))
	t = binary.LittleEndian.AppendUint32(t, h.Sum32())
	t = append(t, c.key[:]...)
	t = append(t, entryMagic...)
	if _, err := f.Write(t); err != nil {
		return err
	}
	if err := f.Chmod(c.mode); err != nil {
		return err
	}
	return f.Close()
}

// removeStale removes this key's temporary entries left by processes that died writing them.
func (c *modelCache) removeStale() {
	old, _ := filepath.Glob(filepath.Join(c.dir, hex.EncodeToString(c.key[:])+".*.tmp.ort"))
	for _, p := range old {
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > staleTemp {
			os.Remove(p)
		}
	}
}
