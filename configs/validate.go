package configs

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxBatchSize bounds batching.max_batch_size.
const MaxBatchSize = 4096

// Bounds of server durations: a day at most (drain_delay + shutdown_timeout overflowed when
// both were 1500000h), and read/write/idle timeouts of at least 100 ms (below it nothing is
// answered).
const (
	maxServerDuration = 24 * time.Hour
	minIOTimeout      = 100 * time.Millisecond
)

// problems collects every error found, each naming its field.
type problems struct{ errs []error }

func (p *problems) add(field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (p *problems) err() error { return errors.Join(p.errs...) }

// Keys whose zero means nothing (the default is what an omitted key gets): an explicit zero
// is an error, so that a config means what it says. The other keys' zero has a documented
// meaning (none, auto, from the model).
var (
	serverPositive = []string{"max_body_bytes", "read_timeout", "write_timeout", "idle_timeout",
		"shutdown_timeout", "max_connections", "queue_full_status", "retry_after",
		"watchdog.run_multiple", "watchdog.min_hang", "watchdog.max_run"}
	modelPositive = []string{"batching.max_batch_size", "batching.max_queue_size", "batching.default_timeout", "batching.queue_target",
		"runtime.instances", "runtime.intra_op_threads", "runtime.inter_op_threads", "detect.max_detections"}
)

// Validate reports every problem found, each naming its field. Keys a model file may tell
// may still be empty here; Complete validates the model again once they are filled.
func (c *Config) Validate() error {
	var p problems
	c.validateServer(&p)
	validateLog(&p, c.Log)
	if c.explicitZero("log.access.sample") {
		p.add("log.access.sample", "must be positive (mode: errors logs the failures only)")
	}
	if c.Repository.Poll < 0 {
		p.add("repository.poll", "must not be negative, got %s", c.Repository.Poll)
	}
	if len(c.Models) == 0 && c.Repository.Path == "" {
		p.add("models", "at least one model is required (or a Triton model repository, repository.path)")
	}
	c.validateRepository(&p)
	seen := map[string]bool{}
	for i := range c.Models {
		m := &c.Models[i]
		if m.field == "" {
			m.field = fmt.Sprintf("models[%d]", i)
		}
		validateName(&p, m, seen)
		m.validate(&p, c.Server, false)
		for _, k := range modelPositive {
			if c.explicitZero(fmt.Sprintf("models[%d].%s", i, k)) {
				p.add(m.field+"."+k, "must be positive (omit it for the default)")
			}
		}
	}
	return p.err()
}

func (c *Config) validateServer(p *problems) {
	s := &c.Server
	if _, _, err := splitHostPort(s.Listen); err != nil {
		p.add("server.listen", "%v", err)
	}
	if s.AdminListen != "off" {
		if _, _, err := splitHostPort(s.AdminListen); err != nil {
			p.add("server.admin_listen", "%v (or \"off\")", err)
		} else if s.AdminListen == s.Listen {
			p.add("server.admin_listen", "must differ from server.listen (%s)", s.Listen)
		}
	}
	if s.GRPCListen != "off" {
		if _, _, err := splitHostPort(s.GRPCListen); err != nil {
			p.add("server.grpc_listen", "%v (or \"off\")", err)
		} else if s.GRPCListen == s.Listen || s.GRPCListen == s.AdminListen {
			p.add("server.grpc_listen", "must differ from server.listen (%s) and server.admin_listen (%s)", s.Listen, s.AdminListen)
		}
	}
	for _, k := range serverPositive {
		if c.explicitZero("server." + k) {
			p.add("server."+k, "must be positive (omit it for the default)")
		}
	}
	validateDurations(p, s)
	validateSecurity(p, s)
	if s.GRPCCallWindow < 64<<10 || s.GRPCCallWindow > 1<<30 {
		p.add("server.grpc_call_window", "must be within 64KiB..1GiB (HTTP/2 windows start at 64KiB), got %d", s.GRPCCallWindow)
	}
	if s.MaxBodyBytes < 1024 {
		p.add("server.max_body_bytes", "must be at least 1KiB, got %d", s.MaxBodyBytes)
	}
	if s.DecodeWorkers < 0 || s.DecodeWorkers > 1024 {
		p.add("server.decode_workers", "must be in [0, 1024] (0: one per CPU), got %d", s.DecodeWorkers)
	}
	if s.DecodeQueue < 0 || s.DecodeQueue > 100000 {
		p.add("server.decode_queue", "must be in [0, 100000] (0: from decode_workers), got %d", s.DecodeQueue)
	}
	if s.Console != "admin" && s.Console != "public" && s.Console != "off" {
		p.add("server.console", "must be admin, public or off, got %q", s.Console)
	}
	if s.QueueDiscipline != "predict" && s.QueueDiscipline != "lifo" {
		p.add("server.queue_discipline", "must be predict or lifo, got %q", s.QueueDiscipline)
	}
	if s.MaxConnections < 0 || s.MaxConnections > 1000000 {
		p.add("server.max_connections", "must be in [1, 1000000], got %d", s.MaxConnections)
	}
	if s.MaxInflightBytes < 1<<20 {
		p.add("server.max_inflight_bytes", "must be at least 1MiB (or 0: from the memory limit), got %d", s.MaxInflightBytes)
	} else if lim := MemoryLimit(); int64(s.MaxInflightBytes) > lim {
		p.add("server.max_inflight_bytes", "is %d bytes, more than the memory available (%d)", s.MaxInflightBytes, lim)
	}
	if s.MaxBodyBytes > s.MaxInflightBytes {
		p.add("server.max_body_bytes", "(%d) must not exceed server.max_inflight_bytes (%d): one body must fit the memory budget", s.MaxBodyBytes, s.MaxInflightBytes)
	}
	if s.QueueFullStatus != 503 && s.QueueFullStatus != 429 {
		p.add("server.queue_full_status", "must be 503 or 429, got %d", s.QueueFullStatus)
	}
	w := s.Watchdog
	if w.RunMultiple < 1 || w.RunMultiple > 1e6 {
		p.add("server.watchdog.run_multiple", "must be in [1, 1000000], got %v", w.RunMultiple)
	}
	switch {
	case w.MinHang <= 0:
		p.add("server.watchdog.min_hang", "must be positive, got %s", w.MinHang)
	case w.MaxRun < w.MinHang:
		p.add("server.watchdog.max_run", "(%s) must be at least server.watchdog.min_hang (%s)", w.MaxRun, w.MinHang)
	case w.MaxRun > Duration(maxServerDuration):
		p.add("server.watchdog.max_run", "must be at most %s, got %s", maxServerDuration, w.MaxRun)
	}
}

// validateSecurity checks server.tls, server.api_keys and server.credentials_poll.
func validateSecurity(p *problems, s *Server) {
	check := func(field, clientAuth, minVersion string) {
		switch clientAuth {
		case "", "none", "optional", "require":
		default:
			p.add(field+".client_auth", "must be none, optional or require, got %q", clientAuth)
		}
		switch minVersion {
		case "", "1.2", "1.3":
		default:
			p.add(field+".min_version", "must be \"1.2\" or \"1.3\", got %q", minVersion)
		}
	}
	t := s.TLS
	check("server.tls", t.ClientAuth, t.MinVersion)
	for _, name := range []string{"http", "grpc", "admin"} {
		l := map[string]TLSListener{"http": t.HTTP, "grpc": t.GRPC, "admin": t.Admin}[name]
		field := "server.tls." + name
		check(field, l.ClientAuth, l.MinVersion)
		eff, on := t.For(name)
		if !on {
			continue
		}
		switch {
		case eff.CertFile == "" || eff.KeyFile == "":
			p.add(field, "needs both a cert_file and a key_file (of server.tls or its own)")
		case eff.ClientCAFile == "" && (eff.ClientAuth == "optional" || eff.ClientAuth == "require"):
			p.add(field, "client_auth %s needs a client_ca_file", eff.ClientAuth)
		case eff.ClientCAFile != "" && eff.ClientAuth == "none":
			p.add(field, "has a client_ca_file, but client_auth none: set client_auth optional or require, or drop the file")
		}
	}
	for _, o := range s.APIKeys.Open {
		if o != "health" && o != "metrics" && o != "metadata" {
			p.add("server.api_keys.open", "%q must be health, metrics or metadata (inference always needs a key)", o)
		}
	}
	if s.CredentialsPoll < 0 || s.CredentialsPoll > Duration(maxServerDuration) {
		p.add("server.credentials_poll", "must be in [0, %s], got %s", maxServerDuration, s.CredentialsPoll)
	}
}

func validateDurations(p *problems, s *Server) {
	for _, d := range []struct {
		name string
		v    Duration
		io   bool // a read, write or idle timeout
	}{{"read_timeout", s.ReadTimeout, true}, {"write_timeout", s.WriteTimeout, true}, {"idle_timeout", s.IdleTimeout, true},
		{"shutdown_timeout", s.ShutdownTimeout, false}, {"retry_after", s.RetryAfter, false}, {"drain_delay", s.DrainDelay, false}} {
		switch {
		case d.v < 0:
			p.add("server."+d.name, "must not be negative, got %s", d.v)
		case d.v > Duration(maxServerDuration):
			p.add("server."+d.name, "must be at most %s, got %s", maxServerDuration, d.v)
		case d.io && d.v > 0 && d.v < Duration(minIOTimeout):
			p.add("server."+d.name, "must be at least %s, got %s", minIOTimeout, d.v)
		}
	}
}

func validateLog(p *problems, l Log) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "must be debug, info, warn or error, got %q", l.Level)
	}
	if l.Format != "text" && l.Format != "json" {
		p.add("log.format", "must be text or json, got %q", l.Format)
	}
	a := l.Access
	if a.Mode != "off" && a.Mode != "errors" && a.Mode != "all" {
		p.add("log.access.mode", "must be off, errors or all, got %q", a.Mode)
	}
	if !(a.Sample > 0 && a.Sample <= 1) {
		p.add("log.access.sample", "must be in (0, 1], got %v", a.Sample)
	}
	if a.Format != "" && a.Format != "text" && a.Format != "json" {
		p.add("log.access.format", "must be text or json (or empty: log.format), got %q", a.Format)
	}
	if a.Output != "stderr" && a.Output != "stdout" {
		p.add("log.access.output", "must be stderr or stdout, got %q", a.Output)
	}
}

func validateName(p *problems, m *Model, seen map[string]bool) {
	f := m.field + ".name"
	switch {
	case m.Name == "":
		p.add(f, "is required")
	case len(m.Name) > MaxModelName:
		p.add(f, "has %d bytes, more than %d", len(m.Name), MaxModelName)
	case !validName(m.Name) || m.Name[0] == '_' || m.Name[0] == '.':
		p.add(f, "%q may hold only letters, digits, '.', '_' and '-', and must start with a letter or digit", m.Name)
	case strings.HasSuffix(m.Name, ".tensor"):
		p.add(f, "%q: the suffix .tensor names a model's tensor interface on /v2", m.Name)
	case seen[m.Name]:
		p.add(f, "%q is used by another model", m.Name)
	}
	seen[m.Name] = true
}

// validate checks a model's sections. complete: the keys a model file tells are filled in
// (Complete), so they must be valid rather than empty.
func (m *Model) validate(p *problems, s Server, complete bool) {
	f := m.field
	if m.Path == "" {
		p.add(f+".path", "is required")
	}
	v := m.VersionPolicy
	if (v.Latest > 0) && (v.All || len(v.Specific) > 0) || v.All && len(v.Specific) > 0 || v.Latest < 0 {
		p.add(f+".version_policy", "set one of latest (a positive count), all and specific")
	}
	for j, n := range v.Specific {
		if n < 1 {
			p.add(fmt.Sprintf("%s.version_policy.specific[%d]", f, j), "versions are positive integers, got %d", n)
		}
	}
	m.validateInput(p, complete)
	m.validateTask(p, complete)
	m.validatePreprocess(p, complete)
	m.validateBatching(p, s, complete)
	m.validateRuntime(p)
}

func (m *Model) validateInput(p *problems, complete bool) {
	f, in := m.field+".input", m.Input
	for _, d := range []struct {
		key string
		v   int
	}{{"width", in.Width}, {"height", in.Height}} {
		if (complete || d.v != 0) && (d.v < 8 || d.v > 8192) {
			p.add(f+"."+d.key, "must be in [8, 8192], got %d", d.v)
		}
	}
	switch in.Layout {
	case "NCHW", "NHWC":
	case "":
		if complete {
			p.add(f+".layout", "must be NCHW or NHWC")
		}
	default:
		p.add(f+".layout", "must be NCHW or NHWC, got %q", in.Layout)
	}
	switch in.Type {
	case "float32", "uint8":
	case "":
		if complete {
			p.add(f+".type", "must be float32 or uint8")
		}
	default:
		p.add(f+".type", "must be float32 or uint8 (or empty: the model's), got %q", in.Type)
	}
}

func (m *Model) validatePreprocess(p *problems, complete bool) {
	f, pp := m.field+".preprocess", &m.Preprocess
	if pp.Mode == "" && complete {
		p.add(f+".mode", "must be shorter_side, stretch or letterbox")
	}
	if pp.Pad < 0 || pp.Pad > 255 {
		p.add(f+".pad", "must be in [0, 255], got %d", pp.Pad)
	}
	switch pp.Mode {
	case "shorter_side", "": // empty: shorter_side unless the model tells otherwise
		w, h := m.Input.Width, m.Input.Height
		if (complete || pp.Crop != 0) && (pp.Crop != w && (complete || w != 0) || pp.Crop != h && (complete || h != 0)) {
			p.add(f+".crop", "must equal input.width and input.height (%dx%d), got %d (or set preprocess.mode: stretch)", m.Input.Width, m.Input.Height, pp.Crop)
		}
		if pp.Resize != 0 && pp.Crop != 0 && pp.Resize < pp.Crop {
			p.add(f+".resize", "must be at least preprocess.crop (%d), got %d", pp.Crop, pp.Resize)
		}
	case "stretch", "letterbox":
	default:
		p.add(f+".mode", "must be shorter_side, stretch or letterbox, got %q", pp.Mode)
	}
	if pp.Resize < 0 {
		p.add(f+".resize", "must not be negative, got %d", pp.Resize)
	}
	if pp.Crop < 0 {
		p.add(f+".crop", "must not be negative, got %d", pp.Crop)
	}
	switch pp.Scale {
	case "normalized", "raw":
	case "":
		if complete {
			p.add(f+".scale", "must be normalized or raw")
		}
	default:
		p.add(f+".scale", "must be normalized or raw, got %q", pp.Scale)
	}
	if n := len(pp.Mean); n != 3 && (complete || n != 0) {
		p.add(f+".mean", "must have 3 values (R, G, B), got %d", n)
	}
	if n := len(pp.Std); n != 3 && (complete || n != 0) {
		p.add(f+".std", "must have 3 values (R, G, B), got %d", n)
	}
	for j, v := range pp.Std {
		if v <= 0 {
			p.add(fmt.Sprintf("%s.std[%d]", f, j), "must be positive, got %g", v)
		}
	}
	if pp.MaxPixels < 0 {
		p.add(f+".max_pixels", "must not be negative (0: the decoder's default), got %d", pp.MaxPixels)
	}
}

func (m *Model) validateBatching(p *problems, s Server, complete bool) {
	f, b := m.field+".batching", &m.Batching
	if b.MaxBatchSize < 0 || b.MaxBatchSize > MaxBatchSize {
		p.add(f+".max_batch_size", "must be in [1, %d] or auto, got %d", MaxBatchSize, b.MaxBatchSize)
	}
	if b.MaxQueueDelay < 0 {
		p.add(f+".max_queue_delay", "must not be negative, got %s", b.MaxQueueDelay)
	}
	if b.MaxQueueSize < 1 || b.MaxQueueSize > 65536 {
		p.add(f+".max_queue_size", "must be in [1, 65536], got %d", b.MaxQueueSize)
	} else if w, h := m.Input.Width, m.Input.Height; complete || w > 0 && h > 0 {
		if row := int64(3*w*h) * 4; int64(b.MaxQueueSize)*row > 4*int64(s.MaxInflightBytes) {
			p.add(f+".max_queue_size", "%d queued rows of %d bytes exceed four times server.max_inflight_bytes (%d); the budget would refuse most of them",
				b.MaxQueueSize, row, s.MaxInflightBytes)
		}
	}
	for j, n := range b.PreferredBatchSizes {
		if b.MaxBatchSize.Auto() && (n < 1 || n > MaxBatchSize) {
			p.add(fmt.Sprintf("%s.preferred_batch_sizes[%d]", f, j), "must be in [1, %d], got %d", MaxBatchSize, n)
		} else if !b.MaxBatchSize.Auto() && (n < 1 || n > int(b.MaxBatchSize)) {
			p.add(fmt.Sprintf("%s.preferred_batch_sizes[%d]", f, j), "must be in [1, max_batch_size=%d], got %d", b.MaxBatchSize, n)
		}
	}
	if b.DefaultTimeout < 0 {
		p.add(f+".default_timeout", "must not be negative, got %s", b.DefaultTimeout)
	}
	if b.QueueTarget < 0 {
		p.add(f+".queue_target", "must not be negative, got %s", b.QueueTarget)
	}
	if b.Priorities < 0 || b.Priorities > 16 {
		p.add(f+".priorities", "must be in [0, 16], got %d", b.Priorities)
	}
	if b.Adaptive.LatencyTarget < 0 {
		p.add(f+".adaptive.latency_target", "must not be negative, got %s", b.Adaptive.LatencyTarget)
	}
}

func (m *Model) validateRuntime(p *problems) {
	f, r := m.field+".runtime", &m.Runtime
	for _, n := range []struct {
		key      string
		v, limit int
	}{{"instances", r.Instances, 64}, {"intra_op_threads", r.IntraOpThreads, 256}, {"inter_op_threads", r.InterOpThreads, 256}} {
		if n.v < 1 || n.v > n.limit {
			p.add(f+"."+n.key, "must be in [1, %d], got %d", n.limit, n.v)
		}
	}
	for _, e := range []struct {
		key, v  string
		allowed []string
	}{
		{"graph_optimization", r.GraphOptimization, []string{"disabled", "basic", "extended", "all"}},
		{"cpu_mem_arena", r.CPUMemArena, []string{"on", "off"}},
		{"hardswish_rewrite", r.HardSwishRewrite, []string{"auto", "on", "off"}},
		{"sessions", r.Sessions, []string{"shared", "per_instance"}},
		{"execution_provider", r.ExecutionProvider, []string{"cpu", "cuda", "tensorrt"}},
	} {
		if !contains(e.allowed, e.v) {
			p.add(f+"."+e.key, "must be %s, got %q", oneOf(e.allowed), e.v)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// oneOf writes "a, b or c".
func oneOf(list []string) string {
	if len(list) < 2 {
		return strings.Join(list, "")
	}
	return strings.Join(list[:len(list)-1], ", ") + " or " + list[len(list)-1]
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
