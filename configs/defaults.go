package configs

import "time"

// The defaults: this file is the only place that states them. docs/configuration.md is
// generated from it (cmd/gateway's TestConfigurationDoc), and -print-config shows them filled
// in. Three kinds of key start at zero: those of the machine (resolveAuto fills them), those
// the model file tells (Complete fills them), and those whose zero means "none".

// Defaults returns the configuration every key of which is its default, with one model
// entry whose name and path are empty: what an empty file would mean if it were valid. Keys
// the machine or the model decides are zero (their documented meaning).
func Defaults() *Config {
	c := &Config{Models: []Model{{}}}
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	setServerDefaults(&c.Server)
	if _, set := c.keys["server.api_keys.open"]; !set && len(c.Server.APIKeys.Open) == 0 {
		c.Server.APIKeys.Open = []string{"health", "metrics"} // probes and scrapers keep working
	}
	l := &c.Log
	if l.Level == "" {
		l.Level = "info"
	}
	if l.Format == "" {
		l.Format = "text"
	}
	a := &l.Access
	if a.Mode == "" {
		a.Mode = "off"
	}
	if a.Sample == 0 {
		a.Sample = 1
	}
	if a.Output == "" {
		a.Output = "stderr"
	}
	setRepositoryDefaults(&c.Repository)
	for i := range c.Models {
		setModelDefaults(&c.Models[i])
	}
}

func setServerDefaults(s *Server) {
	if s.Listen == "" {
		s.Listen = "127.0.0.1:8080"
	}
	if s.GRPCCallWindow == 0 {
		s.GRPCCallWindow = 64 << 10
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
	if s.AdminListen == "" {
		s.AdminListen = "127.0.0.1:8081"
	}
	if s.GRPCListen == "" {
		s.GRPCListen = "127.0.0.1:8001" // Triton's gRPC port (the admin listener holds 8081)
	}
	if s.Console == "" {
		s.Console = "admin"
	}
	if s.QueueDiscipline == "" {
		s.QueueDiscipline = "lifo"
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
	if s.CredentialsPoll == 0 {
		s.CredentialsPoll = Duration(10 * time.Second)
	}
	if s.TLS.MinVersion == "" {
		s.TLS.MinVersion = "1.2"
	}
	w := &s.Watchdog
	if w.RunMultiple == 0 {
		w.RunMultiple = 20
	}
	if w.MinHang == 0 {
		w.MinHang = Duration(10 * time.Second)
	}
	if w.MaxRun == 0 {
		w.MaxRun = Duration(5 * time.Minute)
	}
}

// setModelDefaults fills the keys whose default does not depend on the model file.
// Batching: the adaptive window, with the most images a run takes chosen from the model's
// measured run times (max_batch_size: auto; docs/defaults.md says why); a batch window nobody
// configured must not mean "no batching".
func setModelDefaults(m *Model) {
	if v := &m.VersionPolicy; v.Latest == 0 && !v.All && len(v.Specific) == 0 {
		v.Latest = 1
	}
	if len(m.VersionPolicy.Specific) == 0 {
		m.VersionPolicy.Specific = nil
	}
	b := &m.Batching // max_batch_size 0 is auto: chosen when the model loads
	if b.MaxQueueSize == 0 {
		b.MaxQueueSize = 256
	}
	if len(b.PreferredBatchSizes) == 0 {
		b.PreferredBatchSizes = nil
	}
	if b.DefaultTimeout == 0 {
		b.DefaultTimeout = Duration(30 * time.Second)
	}
	// A standing queue adds latency and no throughput: at capacity a served request waits at
	// most this in line, once 64 requests are (docs/operations.md has the measurements behind it).
	if b.QueueTarget == 0 {
		b.QueueTarget = Duration(100 * time.Millisecond)
	}
	// A configuration that names a fixed window (max_queue_delay) gets that window alone.
	if b.Adaptive.LatencyTarget == 0 && !m.set["batching.adaptive.latency_target"] && !m.set["batching.max_queue_delay"] {
		b.Adaptive.LatencyTarget = Duration(50 * time.Millisecond)
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
	// Detection: ultralytics' predictor's thresholds; an explicit 0 keeps everything.
	d := &m.Detect
	if d.ScoreThreshold == 0 && !m.set["detect.score_threshold"] {
		d.ScoreThreshold = 0.25
	}
	if d.IOUThreshold == 0 && !m.set["detect.iou_threshold"] {
		d.IOUThreshold = 0.45
	}
	if d.MaxDetections == 0 {
		d.MaxDetections = 100
	}
	if d.Background == "" {
		d.Background = "auto"
	}
	if d.Objectness == "" {
		d.Objectness = "auto"
	}
	if m.Preprocess.Pad == 0 && !m.set["preprocess.pad"] {
		m.Preprocess.Pad = 114
	}
	// Empty lists are unset lists: a YAML [] and an omitted key mean the same.
	if len(m.Preprocess.Mean) == 0 {
		m.Preprocess.Mean = nil
	}
	if len(m.Preprocess.Std) == 0 {
		m.Preprocess.Std = nil
	}
}

// machine is what the defaults of the machine-dependent keys follow.
type machine struct {
	cpus   int
	memory int64
}

func thisMachine() machine { return machine{cpus: CPUs, memory: MemoryLimit()} }

// resolveAuto fills the keys whose zero means "from the machine".
func (c *Config) resolveAuto(mc machine) {
	s := &c.Server
	if s.DecodeWorkers == 0 {
		s.DecodeWorkers = mc.cpus
	}
	if s.DecodeQueue == 0 {
		s.DecodeQueue = max(256, 128*s.DecodeWorkers)
	}
	if s.MaxInflightBytes == 0 {
		s.MaxInflightBytes = ByteSize(min(max(mc.memory/4, 64<<20), 1<<30))
	}
}

// Defaults of the keys a model file may tell, where it does not: ImageNet's mean and
// standard deviation, as torchvision normalizes.
func imagenetMean() []float32 { return []float32{0.485, 0.456, 0.406} }
func imagenetStd() []float32  { return []float32{0.229, 0.224, 0.225} }

const (
	defaultLayout = "NCHW"
	defaultMode   = "shorter_side"
	defaultScale  = "normalized"
)

// defaultResize is torchvision's resize for a crop: 256 for 224 (as preprocess computes it).
func defaultResize(crop int) int { return crop * 256 / 224 }
