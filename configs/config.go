package configs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Config is the whole gateway configuration. The first model is the default one served on
// /predict/.
type Config struct {
	Server      Server      `yaml:"server"`
	ONNXRuntime ONNXRuntime `yaml:"onnxruntime"`
	Repository  Repository  `yaml:"repository"`
	Models      []Model     `yaml:"models"`

	// explicitZero holds the keys the file set to zero explicitly: a zero that is not
	// meaningful for its key is an error rather than silently the default.
	explicitZero map[string]bool
}

// Server configures the HTTP front end.
type Server struct {
	Listen string `yaml:"listen"`
	// MaxBodyBytes bounds a request body (413 above it). Default 16 MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// ReadTimeout and WriteTimeout bound reading a request and writing a response. Defaults 30s.
	ReadTimeout  Duration `yaml:"read_timeout"`
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle longer than this. Default 120s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// ShutdownTimeout bounds the graceful drain on SIGTERM. Default 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// DecodeWorkers bounds how many images are decoded at once. Default: the number of CPUs.
	DecodeWorkers int `yaml:"decode_workers"`
	// MaxConnections bounds concurrent connections. Default 10000.
	MaxConnections int `yaml:"max_connections"`
	// QueueFullStatus is the status of a request refused because a queue is full: 503 or 429.
	QueueFullStatus int `yaml:"queue_full_status"`
	// RetryAfter is the Retry-After value, in whole seconds, sent with every refusal. Default 1s.
	RetryAfter Duration `yaml:"retry_after"`
	// MaxInflightBytes is the memory budget of the requests in flight (bodies as received,
	// decode buffers, input rows); a request that would exceed it is refused at once. Default: a
	// quarter of the memory limit (the cgroup's, else the machine's), within 64 MiB..1 GiB.
	MaxInflightBytes ByteSize `yaml:"max_inflight_bytes"`
	// DecodeQueue is how many requests may wait for a decode worker; beyond it they are refused
	// at once (and earlier when their deadline cannot be met). Default: 128 per decode worker,
	// at least 256: a closed loop of a few hundred clients queues, an open-loop overload is
	// refused once about a second or two of decode work waits.
	DecodeQueue int `yaml:"decode_queue"`
	// DrainDelay: after SIGTERM readiness fails at once, but connections are still accepted and
	// served this long (load balancers stop sending meanwhile), then the listener closes. 0: none.
	DrainDelay Duration `yaml:"drain_delay"`
	// AdminListen is the address of the admin API (the model repository: index, load, unload;
	// reload). Default 127.0.0.1:8081 (loopback only); "off" disables the listener.
	AdminListen string `yaml:"admin_listen"`
	// AdminTokenFile, when set, names a file holding a bearer token: the admin API then
	// requires "Authorization: Bearer <token>" on the admin listener, and is also served on the
	// public listener to requests that carry it.
	AdminTokenFile string `yaml:"admin_token_file"`
}

// Repository configures how the served models follow the configuration and their files.
type Repository struct {
	// Poll, when > 0, checks the configuration file and every model and label file this often
	// and reloads what changed (as SIGHUP does). 0: no polling.
	Poll Duration `yaml:"poll"`
}

// ONNXRuntime locates the ONNX Runtime shared library.
type ONNXRuntime struct {
	// Library is the path of libonnxruntime.so. Empty: the ONNXRUNTIME_LIB environment variable,
	// then .deps/onnxruntime/ beside the binary's parent folder, then the system's search path.
	Library string `yaml:"library"`
}

// Model configures one served model.
type Model struct {
	Name string `yaml:"name"`
	// Path is an ONNX file (served as version 1), or a model repository directory whose
	// numeric subfolders hold the versions, Triton's layout: <path>/<version>/model.onnx (a
	// version folder may hold its own labels.txt or labels.json).
	Path string `yaml:"path"`
	// VersionPolicy chooses the versions served from a repository directory.
	VersionPolicy VersionPolicy `yaml:"version_policy"`
	Labels        string        `yaml:"labels"`
	Input         Input         `yaml:"input"`
	Output        Output        `yaml:"output"`
	Preprocess    Preprocess    `yaml:"preprocess"`
	Batching      Batching      `yaml:"batching"`
	Runtime       Runtime       `yaml:"runtime"`
}

// VersionPolicy is Triton's: at most one of Latest, All and Specific (default: latest 1).
type VersionPolicy struct {
	// Latest serves the N highest versions.
	Latest int `yaml:"latest"`
	// All serves every version.
	All bool `yaml:"all"`
	// Specific serves these versions.
	Specific []int `yaml:"specific"`
}

// Input describes the model's image input.
type Input struct {
	Name   string `yaml:"name"`
	Width  int    `yaml:"width"`
	Height int    `yaml:"height"`
	// Layout is NCHW (default) or NHWC.
	Layout string `yaml:"layout"`
	// Type is the input's element type: float32 or uint8 (raw 0..255 pixels, no
	// normalization). Empty: taken from the model; when set, the model must match.
	Type string `yaml:"type"`
}

// Output names the model's score output ([N, classes]).
type Output struct {
	Name string `yaml:"name"`
}

// Preprocess describes how an image becomes the model's input.
type Preprocess struct {
	// Mode: shorter_side (torchvision: resize the shorter side, center crop; default), stretch
	// (resize to the input size ignoring the aspect ratio).
	Mode string `yaml:"mode"`
	// Resize is the shorter side's length before the crop (shorter_side mode). Default 256.
	Resize int `yaml:"resize"`
	// Crop is the center crop's size; it must equal the input's width and height.
	Crop int       `yaml:"crop"`
	Mean []float32 `yaml:"mean"`
	Std  []float32 `yaml:"std"`
	// Scale: normalized (default) feeds (x/255-mean)/std; raw feeds 0..255 values, for models
	// that embed their own normalization.
	Scale string `yaml:"scale"`
	// FullDecode decodes JPEGs at full size instead of the smallest DCT scale that covers the
	// resize target: bit-identical to torchvision (PIL), about 2 ms slower per photo.
	FullDecode bool `yaml:"full_decode"`
	// MaxPixels refuses images whose header declares more pixels. Default 89,478,485 (Pillow's MAX_IMAGE_PIXELS).
	MaxPixels int64 `yaml:"max_pixels"`
}

// Batching configures the model's dynamic batcher.
type Batching struct {
	MaxBatchSize  int      `yaml:"max_batch_size"`
	MaxQueueDelay Duration `yaml:"max_queue_delay"`
	MaxQueueSize  int      `yaml:"max_queue_size"`
	// PreferredBatchSizes: dispatch as soon as one of these sizes can be formed.
	PreferredBatchSizes []int `yaml:"preferred_batch_sizes"`
	// DefaultTimeout bounds a request's wait and run; a request may only shorten it. 0: 30s.
	DefaultTimeout Duration `yaml:"default_timeout"`
	// Priorities is the number of priority levels (0 or 1: none).
	Priorities int `yaml:"priorities"`
	// Adaptive, when its latency_target is set, sizes the window from measured service time.
	Adaptive Adaptive `yaml:"adaptive"`
}

// Adaptive configures the adaptive batch window.
type Adaptive struct {
	LatencyTarget Duration `yaml:"latency_target"`
}

// Runtime configures the ONNX Runtime sessions of a model.
type Runtime struct {
	// Instances is the number of batch loops, each with its own input and output buffers (and,
	// with Sessions per_instance, its own ONNX Runtime session). Default 1.
	Instances      int `yaml:"instances"`
	IntraOpThreads int `yaml:"intra_op_threads"`
	InterOpThreads int `yaml:"inter_op_threads"`
	// GraphOptimization: disabled, basic, extended or all (default).
	GraphOptimization string `yaml:"graph_optimization"`
	// OptimizedModelPath, when set, makes ORT write the optimized graph there.
	OptimizedModelPath string `yaml:"optimized_model_path"`
	// ExecutionProvider: cpu (default), cuda or tensorrt.
	ExecutionProvider string `yaml:"execution_provider"`
	// CPUMemArena: on keeps ONNX Runtime's CPU memory arena (activations reused across runs, the
	// arena as large as the largest batch run); off allocates them per run.
	CPUMemArena string `yaml:"cpu_mem_arena"`
	// HardSwishRewrite: on rewrites the model's HardSwish activations, before ONNX Runtime
	// loads it, into operators its blocked (NCHWc) layout keeps, so that they run without two
	// layout copies each (x86-64, cpu, graph_optimization all; the logits move by float32
	// rounding); off loads the model as it is; auto (default) is on where that was measured
	// to pay, x86-64 CPUs with AVX-512.
	HardSwishRewrite string `yaml:"hardswish_rewrite"`
	// Sessions: shared (default) runs every instance on one ONNX Runtime session (the weights,
	// prepacked kernels and graph held once; each instance has its own buffers and batch loop,
	// and ONNX Runtime's Run is safe for concurrent calls); per_instance gives each instance a
	// session of its own.
	Sessions string `yaml:"sessions"`
	// CacheDir keeps ONNX Runtime's optimized graph of the model between starts, keyed by the
	// model's contents, the ONNX Runtime version, these settings and the CPU (a later start
	// loads it instead of optimizing again): a folder (relative to this file), auto (default:
	// $XDG_CACHE_HOME/imagegate or ~/.cache/imagegate) or off. A folder that cannot be
	// written costs a warning at start-up, never the model.
	CacheDir string `yaml:"cache_dir"`
}

// ShareSession reports whether the model's instances share one ONNX Runtime session.
func (r Runtime) ShareSession() bool { return r.Sessions != "per_instance" }

// Load reads, defaults and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("cannot read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve config path %q: %w", path, err)
	}
	cfg, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML strictly, resolves relative paths against dir, applies defaults and
// validates the result.
func Parse(data []byte, dir string) (*Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty")
		}
		return nil, fmt.Errorf("cannot parse config: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("cannot parse config: more than one YAML document")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("cannot parse config: %w", err)
	}
	cfg.explicitZero = zeroKeys(&doc)
	cfg.resolvePaths(dir)
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// zeroKeys returns the paths (e.g. "server.read_timeout", "models[0].batching.max_queue_size")
// of the keys given an explicit zero ("0", "0s", "0MiB"...) in the YAML document.
func zeroKeys(doc *yaml.Node) map[string]bool {
	out := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if path != "" {
					k = path + "." + k
				}
				walk(n.Content[i+1], k)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.ScalarNode:
			if isZeroScalar(n.Value) {
				out[path] = true
			}
		}
	}
	walk(doc, "")
	return out
}

// isZeroScalar reports whether a YAML scalar spells zero: 0, 0.0, 0s, 0ms, 0B, 0MiB...
func isZeroScalar(v string) bool {
	num := strings.TrimRightFunc(strings.TrimSpace(v), unicode.IsLetter)
	if num == "" {
		return false
	}
	f, err := strconv.ParseFloat(num, 64)
	return err == nil && f == 0
}

func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c.ONNXRuntime.Library = abs(c.ONNXRuntime.Library)
	c.Server.AdminTokenFile = abs(c.Server.AdminTokenFile)
	for i := range c.Models {
		m := &c.Models[i]
		m.Path = abs(m.Path)
		m.Labels = abs(m.Labels)
		m.Runtime.OptimizedModelPath = abs(m.Runtime.OptimizedModelPath)
		if d := m.Runtime.CacheDir; d != "auto" && d != "off" {
			m.Runtime.CacheDir = abs(d)
		}
	}
}

func (c *Config) setDefaults() {
	s := &c.Server
	if s.Listen == "" {
		s.Listen = "127.0.0.1:8080"
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = 16 << 20
	}
	if s.ReadTimeout == 0 {
		s.ReadTimeout = Duration(30 * time.Second)
	}
	if s.WriteTimeout == 0 {
		s.WriteTimeout = Duration(30 * time.Second)
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = Duration(120 * time.Second)
	}
	if s.ShutdownTimeout == 0 {
		s.ShutdownTimeout = Duration(30 * time.Second)
	}
	if s.DecodeWorkers == 0 {
		s.DecodeWorkers = CPUs
	}
	if s.DecodeQueue == 0 {
		s.DecodeQueue = max(256, 128*s.DecodeWorkers)
	}
	if s.AdminListen == "" {
		s.AdminListen = "127.0.0.1:8081"
	}
	if s.MaxInflightBytes == 0 {
		s.MaxInflightBytes = ByteSize(min(max(MemoryLimit()/4, 64<<20), 1<<30))
	}
	if s.MaxConnections == 0 {
		s.MaxConnections = 10000
	}
	if s.QueueFullStatus == 0 {
		s.QueueFullStatus = 503
	}
	if s.RetryAfter == 0 {
		s.RetryAfter = Duration(time.Second)
	}
	for i := range c.Models {
		m := &c.Models[i]
		if m.Input.Name == "" {
			m.Input.Name = "input"
		}
		if m.Input.Width == 0 {
			m.Input.Width = 224
		}
		if m.Input.Height == 0 {
			m.Input.Height = m.Input.Width
		}
		if m.Input.Layout == "" {
			m.Input.Layout = "NCHW"
		}
		if m.Output.Name == "" {
			m.Output.Name = "output"
		}
		if v := &m.VersionPolicy; v.Latest == 0 && !v.All && len(v.Specific) == 0 {
			v.Latest = 1
		}
		p := &m.Preprocess
		if p.Mode == "" {
			p.Mode = "shorter_side"
		}
		if p.Resize == 0 {
			p.Resize = 256
		}
		if p.Crop == 0 {
			p.Crop = m.Input.Width
		}
		if p.Mean == nil {
			p.Mean = []float32{0.485, 0.456, 0.406}
		}
		if p.Std == nil {
			p.Std = []float32{0.229, 0.224, 0.225}
		}
		if p.Scale == "" {
			p.Scale = "normalized"
		}
		if p.MaxPixels == 0 {
			p.MaxPixels = 89_478_485 // Pillow's MAX_IMAGE_PIXELS, preprocess.DefaultMaxPixels
		}
		b := &m.Batching
		if b.MaxBatchSize == 0 {
			b.MaxBatchSize = 32
		}
		if b.MaxQueueSize == 0 {
			b.MaxQueueSize = 1024
		}
		if b.DefaultTimeout == 0 {
			b.DefaultTimeout = Duration(30 * time.Second)
		}
		r := &m.Runtime
		if r.Instances == 0 {
			r.Instances = 1
		}
		if r.IntraOpThreads == 0 {
			r.IntraOpThreads = 1
		}
		if r.InterOpThreads == 0 {
			r.InterOpThreads = 1
		}
		if r.GraphOptimization == "" {
			r.GraphOptimization = "all"
		}
		if r.ExecutionProvider == "" {
			r.ExecutionProvider = "cpu"
		}
		if r.CPUMemArena == "" {
			r.CPUMemArena = "on"
		}
		if r.HardSwishRewrite == "" {
			r.HardSwishRewrite = "auto"
		}
		if r.Sessions == "" {
			r.Sessions = "shared"
		}
		if r.CacheDir == "" {
			r.CacheDir = "auto"
		}
	}
}

// Validate reports every problem found, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	s := &c.Server
	if _, _, err := splitHostPort(s.Listen); err != nil {
		bad("server.listen", "%v", err)
	}
	if s.AdminListen != "off" {
		if _, _, err := splitHostPort(s.AdminListen); err != nil {
			bad("server.admin_listen", "%v (or \"off\")", err)
		} else if s.AdminListen == s.Listen {
			bad("server.admin_listen", "must differ from server.listen (%s)", s.Listen)
		}
	}
	if c.Repository.Poll < 0 {
		bad("repository.poll", "must not be negative, got %s", c.Repository.Poll)
	}
	if s.MaxBodyBytes < 1024 {
		bad("server.max_body_bytes", "must be at least 1KiB, got %d", s.MaxBodyBytes)
	}
	for name, d := range map[string]Duration{"read_timeout": s.ReadTimeout, "write_timeout": s.WriteTimeout,
		"idle_timeout": s.IdleTimeout, "shutdown_timeout": s.ShutdownTimeout, "retry_after": s.RetryAfter,
		"drain_delay": s.DrainDelay} {
		switch {
		case d < 0:
			bad("server."+name, "must not be negative, got %s", d)
		case d > Duration(maxServerDuration):
			bad("server."+name, "must be at most %s, got %s", maxServerDuration, d)
		}
	}
	// Timeouts under which nothing can be read or written: with write_timeout 1ns the server
	// reported ready and dropped every response.
	for name, d := range map[string]Duration{"read_timeout": s.ReadTimeout, "write_timeout": s.WriteTimeout, "idle_timeout": s.IdleTimeout} {
		if d > 0 && d < Duration(minIOTimeout) {
			bad("server."+name, "must be at least %s, got %s", minIOTimeout, d)
		}
	}
	// Keys whose zero means nothing (the default is what an omitted key gets): an explicit zero
	// is an error, so that a config means what it says.
	for _, k := range []string{"max_body_bytes", "read_timeout", "write_timeout", "idle_timeout", "shutdown_timeout",
		"max_connections", "queue_full_status", "retry_after", "max_inflight_bytes", "decode_queue"} {
		if c.explicitZero["server."+k] {
			bad("server."+k, "must be positive (omit it for the default)")
		}
	}
	if s.DecodeWorkers < 0 || s.DecodeWorkers > 1024 {
		bad("server.decode_workers", "must be in [0, 1024] (0: one per CPU), got %d", s.DecodeWorkers)
	}
	if s.DecodeQueue < 0 || s.DecodeQueue > 100000 {
		bad("server.decode_queue", "must be in [1, 100000], got %d", s.DecodeQueue)
	}
	if s.MaxConnections < 0 || s.MaxConnections > 1000000 {
		bad("server.max_connections", "must be in [1, 1000000], got %d", s.MaxConnections)
	}
	if s.MaxInflightBytes < 1<<20 {
		bad("server.max_inflight_bytes", "must be at least 1MiB, got %d", s.MaxInflightBytes)
	} else if lim := MemoryLimit(); int64(s.MaxInflightBytes) > lim {
		bad("server.max_inflight_bytes", "is %d bytes, more than the memory available (%d)", s.MaxInflightBytes, lim)
	}
	if s.MaxBodyBytes > s.MaxInflightBytes {
		bad("server.max_body_bytes", "(%d) must not exceed server.max_inflight_bytes (%d): one body must fit the memory budget", s.MaxBodyBytes, s.MaxInflightBytes)
	}
	if s.QueueFullStatus != 503 && s.QueueFullStatus != 429 {
		bad("server.queue_full_status", "must be 503 or 429, got %d", s.QueueFullStatus)
	}
	if len(c.Models) == 0 {
		bad("models", "at least one model is required")
	}
	seen := map[string]bool{}
	for i := range c.Models {
		m := &c.Models[i]
		f := fmt.Sprintf("models[%d]", i)
		if name := m.Name; name != "" {
			if len(name) > 64 {
				name = name[:64] + "…"
			}
			f = fmt.Sprintf("models[%d] (%s)", i, name)
		}
		switch {
		case m.Name == "":
			bad(f+".name", "is required")
		case len(m.Name) > MaxModelName:
			bad(f+".name", "has %d bytes, more than %d", len(m.Name), MaxModelName)
		case !validName(m.Name) || m.Name[0] == '_' || m.Name[0] == '.':
			bad(f+".name", "%q may hold only letters, digits, '.', '_' and '-', and must start with a letter or digit", m.Name)
		case strings.HasSuffix(m.Name, ".tensor"):
			bad(f+".name", "%q: the suffix .tensor names a model's tensor interface on /v2", m.Name)
		case seen[m.Name]:
			bad(f+".name", "%q is used by another model", m.Name)
		}
		seen[m.Name] = true
		if m.Path == "" {
			bad(f+".path", "is required")
		}
		if v := m.VersionPolicy; (v.Latest > 0) && (v.All || len(v.Specific) > 0) || v.All && len(v.Specific) > 0 || v.Latest < 0 {
			bad(f+".version_policy", "set one of latest (a positive count), all and specific")
		}
		for j, v := range m.VersionPolicy.Specific {
			if v < 1 {
				bad(fmt.Sprintf("%s.version_policy.specific[%d]", f, j), "versions are positive integers, got %d", v)
			}
		}
		if m.Input.Width < 8 || m.Input.Width > 8192 {
			bad(f+".input.width", "must be in [8, 8192], got %d", m.Input.Width)
		}
		if m.Input.Height < 8 || m.Input.Height > 8192 {
			bad(f+".input.height", "must be in [8, 8192], got %d", m.Input.Height)
		}
		if m.Input.Layout != "NCHW" && m.Input.Layout != "NHWC" {
			bad(f+".input.layout", "must be NCHW or NHWC, got %q", m.Input.Layout)
		}
		switch m.Input.Type {
		case "", "float32", "uint8":
		default:
			bad(f+".input.type", "must be float32 or uint8 (or empty: from the model), got %q", m.Input.Type)
		}
		p := &m.Preprocess
		switch p.Mode {
		case "shorter_side":
			if p.Crop != m.Input.Width || p.Crop != m.Input.Height {
				bad(f+".preprocess.crop", "must equal input.width and input.height (%dx%d), got %d", m.Input.Width, m.Input.Height, p.Crop)
			}
			if p.Resize < p.Crop {
				bad(f+".preprocess.resize", "must be at least preprocess.crop (%d), got %d", p.Crop, p.Resize)
			}
		case "stretch":
		default:
			bad(f+".preprocess.mode", "must be shorter_side or stretch, got %q", p.Mode)
		}
		if p.Scale != "normalized" && p.Scale != "raw" {
			bad(f+".preprocess.scale", "must be normalized or raw, got %q", p.Scale)
		}
		if len(p.Mean) != 3 {
			bad(f+".preprocess.mean", "must have 3 values (R, G, B), got %d", len(p.Mean))
		}
		if len(p.Std) != 3 {
			bad(f+".preprocess.std", "must have 3 values (R, G, B), got %d", len(p.Std))
		}
		for j, v := range p.Std {
			if v <= 0 {
				bad(fmt.Sprintf("%s.preprocess.std[%d]", f, j), "must be positive, got %g", v)
			}
		}
		if p.MaxPixels < 1 {
			bad(f+".preprocess.max_pixels", "must be positive, got %d", p.MaxPixels)
		}
		for _, k := range []string{"input.width", "input.height", "preprocess.resize", "preprocess.crop", "preprocess.max_pixels",
			"batching.max_batch_size", "batching.max_queue_size", "batching.default_timeout",
			"runtime.instances", "runtime.intra_op_threads", "runtime.inter_op_threads"} {
			if c.explicitZero[fmt.Sprintf("models[%d].%s", i, k)] {
				bad(f+"."+k, "must be positive (omit it for the default)")
			}
		}
		b := &m.Batching
		if b.MaxBatchSize < 1 || b.MaxBatchSize > 4096 {
			bad(f+".batching.max_batch_size", "must be in [1, 4096], got %d", b.MaxBatchSize)
		}
		if b.MaxQueueDelay < 0 {
			bad(f+".batching.max_queue_delay", "must not be negative, got %s", b.MaxQueueDelay)
		}
		if b.MaxQueueSize < 1 || b.MaxQueueSize > 65536 {
			bad(f+".batching.max_queue_size", "must be in [1, 65536], got %d", b.MaxQueueSize)
		} else if row := int64(3*m.Input.Width*m.Input.Height) * 4; int64(b.MaxQueueSize)*row > 4*int64(s.MaxInflightBytes) {
			bad(f+".batching.max_queue_size", "%d queued rows of %d bytes exceed four times server.max_inflight_bytes (%d); the budget would refuse most of them",
				b.MaxQueueSize, row, s.MaxInflightBytes)
		}
		for j, n := range b.PreferredBatchSizes {
			if n < 1 || n > b.MaxBatchSize {
				bad(fmt.Sprintf("%s.batching.preferred_batch_sizes[%d]", f, j), "must be in [1, max_batch_size=%d], got %d", b.MaxBatchSize, n)
			}
		}
		if b.DefaultTimeout < 0 {
			bad(f+".batching.default_timeout", "must not be negative, got %s", b.DefaultTimeout)
		}
		if b.Priorities < 0 || b.Priorities > 16 {
			bad(f+".batching.priorities", "must be in [0, 16], got %d", b.Priorities)
		}
		if b.Adaptive.LatencyTarget < 0 {
			bad(f+".batching.adaptive.latency_target", "must not be negative, got %s", b.Adaptive.LatencyTarget)
		}
		r := &m.Runtime
		if r.Instances < 1 || r.Instances > 64 {
			bad(f+".runtime.instances", "must be in [1, 64], got %d", r.Instances)
		}
		if r.IntraOpThreads < 1 || r.IntraOpThreads > 256 {
			bad(f+".runtime.intra_op_threads", "must be in [1, 256], got %d", r.IntraOpThreads)
		}
		if r.InterOpThreads < 1 || r.InterOpThreads > 256 {
			bad(f+".runtime.inter_op_threads", "must be in [1, 256], got %d", r.InterOpThreads)
		}
		switch r.GraphOptimization {
		case "disabled", "basic", "extended", "all":
		default:
			bad(f+".runtime.graph_optimization", "must be disabled, basic, extended or all, got %q", r.GraphOptimization)
		}
		if r.CPUMemArena != "on" && r.CPUMemArena != "off" {
			bad(f+".runtime.cpu_mem_arena", "must be on or off, got %q", r.CPUMemArena)
		}
		if r.HardSwishRewrite != "auto" && r.HardSwishRewrite != "on" && r.HardSwishRewrite != "off" {
			bad(f+".runtime.hardswish_rewrite", "must be auto, on or off, got %q", r.HardSwishRewrite)
		}
		if r.Sessions != "shared" && r.Sessions != "per_instance" {
			bad(f+".runtime.sessions", "must be shared or per_instance, got %q", r.Sessions)
		}
		switch r.ExecutionProvider {
		case "cpu", "cuda", "tensorrt":
		default:
			bad(f+".runtime.execution_provider", "must be cpu, cuda or tensorrt, got %q", r.ExecutionProvider)
		}
	}
	return errors.Join(errs...)
}

// LoadLabels reads a label file: a JSON array of strings, or one label per line.
func LoadLabels(path string) ([]string, error) {
	data, err := ReadFile(path, MaxLabelBytes)
	if err != nil {
		return nil, fmt.Errorf("cannot read labels: %w", err)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var labels []string
		if err := json.Unmarshal(trimmed, &labels); err != nil {
			return nil, fmt.Errorf("cannot parse labels %s as a JSON array of strings: %w", path, err)
		}
		return labels, nil
	}
	var labels []string
	for _, line := range strings.Split(strings.TrimRight(string(data), "\r\n"), "\n") {
		labels = append(labels, strings.TrimRight(line, "\r"))
	}
	if len(labels) == 1 && labels[0] == "" {
		return nil, fmt.Errorf("labels file %s is empty", path)
	}
	return labels, nil
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func splitHostPort(s string) (string, string, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", fmt.Errorf("%q is not HOST:PORT", s)
	}
	port := s[i+1:]
	if port == "" {
		return "", "", fmt.Errorf("%q has no port", s)
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return "", "", fmt.Errorf("%q has a bad port %q", s, port)
		}
	}
	return s[:i], port, nil
}

// CPUs is the number of CPUs the process may use: the container's CPU limit (cgroup quota,
// rounded up) where there is one, else the CPUs it may run on, as Go's default GOMAXPROCS
// counts them, read before cmd/gateway raises GOMAXPROCS (a package variable is set before
// main runs). runtime.NumCPU counts every CPU of the node: under a 2-CPU limit on a 64-core
// node it made 64 decode workers. GOMAXPROCS in the environment sets it.
var CPUs = runtime.GOMAXPROCS(0)

// MemoryLimit returns the memory this process may use: the tightest limit of its cgroup and
// the cgroups above it (cgroup v2's memory.max, or v1's memory.limit_in_bytes, as container
// runtimes set them), at most the machine's total memory; else 4 GiB.
func MemoryLimit() int64 { return memoryLimit("/") }

// memoryLimit is MemoryLimit with the file system's root at root (tests use a tree of their
// own).
func memoryLimit(root string) int64 {
	read := func(path string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(root, path))
		return string(b), err == nil
	}
	limit := int64(0)
	if mi, ok := read("/proc/meminfo"); ok {
		for line := range strings.Lines(mi) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if v, err := strconv.ParseInt(f[0], 10, 64); err == nil && v > 0 {
						limit = v << 10
					}
				}
			}
		}
	}
	take := func(file string) {
		b, ok := read(file)
		if !ok {
			return
		}
		v, err := strconv.ParseInt(strings.TrimSpace(b), 10, 64) // "max" (v2): no limit
		if err != nil || v <= 0 || v >= 1<<62 {                  // v1 says "no limit" with about 2^63
			return
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	// The cgroup's own limit and those of the cgroups above it (each bounds it). Inside a
	// container the path /proc/self/cgroup gives may be the host's, while the container sees
	// its own cgroup at the mount's root: both are read.
	walk := func(mount, path, file string) {
		take(filepath.Join(mount, file))
		for p := filepath.Clean("/" + path); p != "/"; p = filepath.Dir(p) {
			take(filepath.Join(mount, p, file))
		}
	}
	if cg, ok := read("/proc/self/cgroup"); ok {
		for line := range strings.Lines(cg) {
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "": // v2 (unified)
				walk("/sys/fs/cgroup", f[2], "memory.max")
			case slices.Contains(strings.Split(f[1], ","), "memory"): // v1
				walk("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")
			}
		}
	} else {
		take("/sys/fs/cgroup/memory.max")
		take("/sys/fs/cgroup/memory/memory.limit_in_bytes")
	}
	if limit == 0 {
		return 4 << 30
	}
	return limit
}

// ModelVersion is one version of a model as its configuration and files name it.
type ModelVersion struct {
	Version string // "1", "2", ...
	Path    string // the ONNX file
	Labels  string // the label file
}

// Versions lists the versions of m to serve, by its path and version policy, in ascending
// order. A file path is version 1. A directory holds the versions in
// numeric subfolders (Triton's layout), each with model.onnx (or a single .onnx file) and
// optionally its own labels.txt or labels.json; otherwise the model's labels (or a labels.txt or
// labels.json beside the version folders) apply.
func (m *Model) Versions() ([]ModelVersion, error) {
	st, err := os.Stat(m.Path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	if !st.IsDir() {
		if m.Labels == "" {
			return nil, fmt.Errorf("model %s: labels is required", m.Name)
		}
		return []ModelVersion{{Version: "1", Path: m.Path, Labels: m.Labels}}, nil
	}
	entries, err := os.ReadDir(m.Path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	var nums []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && e.IsDir() && strconv.Itoa(n) == e.Name() {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	if len(nums) == 0 {
		return nil, fmt.Errorf("model %s: %s has no version folder (1/, 2/, ... each with model.onnx)", m.Name, m.Path)
	}
	p := m.VersionPolicy
	switch {
	case p.All:
	case len(p.Specific) > 0:
		var keep []int
		for _, v := range p.Specific {
			if !slices.Contains(nums, v) {
				return nil, fmt.Errorf("model %s: version_policy.specific names version %d; %s has %v", m.Name, v, m.Path, nums)
			}
			keep = append(keep, v)
		}
		slices.Sort(keep)
		nums = slices.Compact(keep)
	default:
		nums = nums[max(0, len(nums)-max(p.Latest, 1)):]
	}
	defLabels := m.Labels
	if defLabels == "" {
		defLabels = firstExisting(filepath.Join(m.Path, "labels.txt"), filepath.Join(m.Path, "labels.json"))
	}
	var out []ModelVersion
	for _, n := range nums {
		dir := filepath.Join(m.Path, strconv.Itoa(n))
		file := filepath.Join(dir, "model.onnx")
		if _, err := os.Stat(file); err != nil {
			onnx, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
			if len(onnx) != 1 {
				return nil, fmt.Errorf("model %s version %d: %s holds no model.onnx (nor exactly one .onnx file)", m.Name, n, dir)
			}
			file = onnx[0]
		}
		labels := firstExisting(filepath.Join(dir, "labels.txt"), filepath.Join(dir, "labels.json"))
		if labels == "" {
			labels = defLabels
		}
		if labels == "" {
			return nil, fmt.Errorf("model %s version %d: no labels (set labels, or put labels.txt beside the version folders)", m.Name, n)
		}
		out = append(out, ModelVersion{Version: strconv.Itoa(n), Path: file, Labels: labels})
	}
	return out, nil
}

func firstExisting(paths ...string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// ReadFile reads a configuration, label or token file: a regular file (a device such as
// /dev/zero, a FIFO or a directory never ends or blocks) of at most max bytes.
func ReadFile(path string, max int64) ([]byte, error) {
	// Stat first: opening a FIFO for reading blocks until a writer opens it.
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat() // what was opened: a rename between the two is caught here
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d allowed", path, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s has more than the %d bytes allowed", path, max)
	}
	return b, err
}

// Bounds of server durations: a day at most (drain_delay + shutdown_timeout overflowed when
// both were 1500000h), and read/write/idle timeouts of at least 100 ms.
const (
	maxServerDuration = 24 * time.Hour
	minIOTimeout      = 100 * time.Millisecond
)

// MaxModelName bounds a model's name (it is a metric label on every series of the model).
const MaxModelName = 128

// Limits of the files ReadFile reads.
const (
	MaxConfigBytes = 16 << 20
	MaxLabelBytes  = 16 << 20
	MaxTokenBytes  = 4 << 10
)
