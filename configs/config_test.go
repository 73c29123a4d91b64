package configs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShippedConfigLoads: the shipped configuration names the committed model and leaves
// everything else to the defaults and the model.
func TestShippedConfigLoads(t *testing.T) {
	cfg, err := Load("gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models[0]
	if m.Name != "mobilenet_v3_small" || !m.Batching.MaxBatchSize.Auto() || m.Batching.Adaptive.LatencyTarget.D() != 50*time.Millisecond ||
		m.Batching.MaxQueueSize != 256 || m.Runtime.Instances != 1 || m.Runtime.IntraOpThreads != 1 {
		t.Fatalf("unexpected values: %+v", m)
	}
	if !filepath.IsAbs(m.Path) || !strings.HasSuffix(m.Path, filepath.Join("models", "mobilenet_v3_small", "model.onnx")) {
		t.Fatalf("path not resolved against the config's folder: %s", m.Path)
	}
	vs, err := m.Versions()
	if err != nil || len(vs) != 1 || !vs[0].LabelsFound {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	labels, err := LoadLabels(vs[0].Labels)
	if err != nil || len(labels) != 11 || labels[0] != "dew" || labels[10] != "snow" {
		t.Fatalf("labels = %v, %v", labels, err)
	}
	if cfg.Server.Listen != "127.0.0.1:8080" || cfg.Server.QueueFullStatus != 503 || cfg.Server.MaxBodyBytes != 16<<20 {
		t.Fatalf("server = %+v", cfg.Server)
	}
	// A fixed window named alone is that window, without the adaptive default.
	cfg, err = Parse([]byte("models: [{name: m, path: p, batching: {max_batch_size: 8, max_queue_delay: 2ms}}]\n"), "/x")
	if err != nil || cfg.Models[0].Batching.Adaptive.LatencyTarget != 0 {
		t.Fatalf("a fixed window: %+v %v", cfg.Models[0].Batching, err)
	}
}

// TestDefaults: Parse fills the defaults that do not depend on the model and leaves the keys
// a model tells empty; the batching default is the adaptive window.
func TestDefaults(t *testing.T) {
	cfg, err := Parse([]byte("models:\n  - name: m\n    path: m.onnx\n"), "/x")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models[0]
	if m.Path != "/x/m.onnx" || !m.Batching.MaxBatchSize.Auto() || m.Batching.MaxQueueSize != 256 || m.Batching.Adaptive.LatencyTarget.D() != 50*time.Millisecond ||
		m.Batching.MaxQueueDelay != 0 || m.Batching.DefaultTimeout.D() != 30*time.Second || m.Runtime.GraphOptimization != "all" || m.Runtime.Instances != 1 {
		t.Fatalf("defaults: %+v", m)
	}
	if m.Input != (Input{}) || m.Output != (Output{}) || m.Preprocess.Mode != "" || m.Preprocess.Crop != 0 || m.Preprocess.Mean != nil || m.Preprocess.MaxPixels != 0 {
		t.Fatalf("keys the model tells were filled before the model was read: %+v %+v %+v", m.Input, m.Output, m.Preprocess)
	}
	if cfg.Log != (Log{Level: "info", Format: "text", Access: AccessLog{Mode: "off", Sample: 1, Output: "stderr"}}) {
		t.Fatalf("log: %+v", cfg.Log)
	}
	if w := cfg.Server.Watchdog; w != (Watchdog{RunMultiple: 20, MinHang: Duration(10 * time.Second), MaxRun: Duration(5 * time.Minute)}) {
		t.Fatalf("watchdog: %+v", w)
	}
	// An explicit 0 turns the adaptive window off.
	cfg, err = Parse([]byte("models: [{name: m, path: p, batching: {adaptive: {latency_target: 0s}, max_queue_delay: 2ms}}]\n"), "/x")
	if err != nil || cfg.Models[0].Batching.Adaptive.LatencyTarget != 0 || cfg.Models[0].Batching.MaxQueueDelay.D() != 2*time.Millisecond {
		t.Fatalf("adaptive off: %+v %v", cfg.Models[0].Batching, err)
	}
}

func TestStrictAndValidation(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"server:\n  listen: x:1\n  lisen: y\nmodels: [{name: m, path: p}]\n", "field lisen not found"},
		{"models: [{name: m, path: p, batching: {max_batch_sise: 3}}]\n", "field max_batch_sise not found"},
		{"models: []\n", "models: at least one model"},
		{"models: [{name: m, path: p, batching: {max_batch_size: -1}}]\n", "batching.max_batch_size"},
		{"models: [{name: m, path: p, batching: {max_queue_delay: 2 ms}}]\n", "cannot parse duration"},
		{"models: [{name: m, path: p, batching: {max_queue_delay: -2ms}}]\n", "max_queue_delay: must not be negative"},
		{"models: [{name: m, path: p, batching: {max_batch_size: 32, preferred_batch_sizes: [4, 64]}}]\n", "preferred_batch_sizes[1]"},
		{"models: [{name: m, path: p, preprocess: {mean: [1, 2]}}]\n", "preprocess.mean: must have 3 values"},
		{"models: [{name: m, path: p, preprocess: {std: [1, 0, 1]}}]\n", "preprocess.std[1]"},
		{"models: [{name: m, path: p, input: {width: 224}, preprocess: {crop: 200}}]\n", "preprocess.crop: must equal input.width"},
		{"models: [{name: m, path: p, preprocess: {resize: 200, crop: 224}}]\n", "preprocess.resize: must be at least preprocess.crop"},
		{"models: [{name: m, path: p, input: {layout: NCWH}}]\n", "input.layout: must be NCHW or NHWC"},
		{"models: [{name: m, path: p, input: {type: int8}}]\n", "input.type: must be float32 or uint8"},
		{"models: [{name: m, path: p, preprocess: {max_pixels: -1}}]\n", "preprocess.max_pixels: must not be negative"},
		{"log: {level: verbose}\nmodels: [{name: m, path: p}]\n", "log.level: must be debug, info, warn or error"},
		{"log: {format: xml}\nmodels: [{name: m, path: p}]\n", "log.format: must be text or json"},
		{"log: {access: {mode: on}}\nmodels: [{name: m, path: p}]\n", "log.access.mode: must be off, errors or all"},
		{"log: {access: {mode: all, sample: 0}}\nmodels: [{name: m, path: p}]\n", "log.access.sample: must be positive"},
		{"log: {access: {sample: 1.5}}\nmodels: [{name: m, path: p}]\n", "log.access.sample: must be in (0, 1]"},
		{"log: {access: {format: xml}}\nmodels: [{name: m, path: p}]\n", "log.access.format"},
		{"log: {access: {output: file}}\nmodels: [{name: m, path: p}]\n", "log.access.output: must be stderr or stdout"},
		{"server: {console: both}\nmodels: [{name: m, path: p}]\n", "server.console: must be admin, public or off"},
		{"server: {watchdog: {run_multiple: 0}}\nmodels: [{name: m, path: p}]\n", "server.watchdog.run_multiple: must be positive"},
		{"server: {watchdog: {run_multiple: 0.5}}\nmodels: [{name: m, path: p}]\n", "server.watchdog.run_multiple: must be in [1, 1000000]"},
		{"server: {watchdog: {min_hang: 1m, max_run: 30s}}\nmodels: [{name: m, path: p}]\n", "server.watchdog.max_run: (30s) must be at least"},
		{"server: {watchdog: {min_hang: -1s}}\nmodels: [{name: m, path: p}]\n", "server.watchdog.min_hang: must be positive"},
		{"models: [{name: m, path: p, preprocess: {mode: squash}}]\n", "preprocess.mode"},
		{"server: {tls: {cert_file: c}}\nmodels: [{name: m, path: p}]\n", "server.tls.http: needs both a cert_file and a key_file"},
		{"server: {tls: {cert_file: c, key_file: k, client_auth: require}}\nmodels: [{name: m, path: p}]\n", "server.tls.grpc: client_auth require needs a client_ca_file"},
		{"server: {tls: {cert_file: c, key_file: k, client_ca_file: ca, client_auth: none}}\nmodels: [{name: m, path: p}]\n", "server.tls.admin: has a client_ca_file, but client_auth none"},
		{"server: {tls: {client_auth: always}}\nmodels: [{name: m, path: p}]\n", "server.tls.client_auth: must be none, optional or require"},
		{"server: {tls: {grpc: {min_version: \"1.1\"}}}\nmodels: [{name: m, path: p}]\n", "server.tls.grpc.min_version"},
		{"server: {tls: {http: {cert_file: c}}}\nmodels: [{name: m, path: p}]\n", "server.tls.http: needs both"},
		{"server: {api_keys: {open: [health, inference]}}\nmodels: [{name: m, path: p}]\n", "server.api_keys.open: \"inference\" must be health, metrics or metadata"},
		{"server: {credentials_poll: -1s}\nmodels: [{name: m, path: p}]\n", "server.credentials_poll"},
		{"models: [{name: m, path: p, runtime: {execution_provider: tpu}}]\n", "runtime.execution_provider"},
		{"models: [{name: m, path: p, runtime: {sessions: one}}]\n", "runtime.sessions"},
		{"models: [{name: m, path: p, runtime: {hardswish_rewrite: yes}}]\n", "runtime.hardswish_rewrite: must be auto, on or off"},
		{"models: [{name: m, path: p}, {name: m, path: q}]\n", "is used by another model"},
		{"models: [{name: 'a b', path: p}]\n", "may hold only"},
		{"models: [{name: _unknown, path: p}]\n", "must start with a letter or digit"},
		{"models: [{name: m}]\n", "path: is required"},
		{"server: {queue_full_status: 500}\nmodels: [{name: m, path: p}]\n", "server.queue_full_status"},
		{"server: {listen: nope}\nmodels: [{name: m, path: p}]\n", "server.listen"},
		{"server: {max_body_bytes: 12XB}\nmodels: [{name: m, path: p}]\n", "cannot parse size"},
		{"", "config is empty"},
		{"server: {read_timeout: 0s}\nmodels: [{name: m, path: p}]\n", "server.read_timeout: must be positive (omit it for the default)"},
		{"server: {max_body_bytes: 0}\nmodels: [{name: m, path: p}]\n", "server.max_body_bytes: must be positive"},
		{"models: [{name: m, path: p, batching: {max_queue_size: 0}}]\n", "batching.max_queue_size: must be positive"},
		{"models: [{name: m, path: p, runtime: {instances: 0}}]\n", "runtime.instances: must be positive"},
		{"models: [{name: m, path: p, batching: {max_queue_size: 70000}}]\n", "max_queue_size: must be in [1, 65536]"},
		{"server: {max_inflight_bytes: 64MiB}\nmodels: [{name: m, path: p, input: {width: 224, height: 224}, batching: {max_queue_size: 1024}}]\n", "exceed four times server.max_inflight_bytes"},
		{"server: {max_inflight_bytes: 8MiB}\nmodels: [{name: m, path: p}]\n", "must not exceed server.max_inflight_bytes"},
		{"server: {max_connections: 2000000}\nmodels: [{name: m, path: p}]\n", "server.max_connections"},
		{"server: {drain_delay: -1s}\nmodels: [{name: m, path: p}]\n", "server.drain_delay"},
		{"models: [{name: m.tensor, path: p}]\n", "names a model's tensor interface"},
		// bounds found by a hostile review: sizes that wrapped to 0 (the default), durations
		// whose sum overflowed, timeouts under which nothing is answered, a name that becomes a
		// metric label on every series
		{"server: {max_body_bytes: 17179869184GiB}\nmodels: [{name: m, path: p}]\n", "too large"},
		{"server: {max_inflight_bytes: 9223372036854775807KiB}\nmodels: [{name: m, path: p}]\n", "too large"},
		{"server: {drain_delay: 1500000h, shutdown_timeout: 1500000h}\nmodels: [{name: m, path: p}]\n", "server.drain_delay: must be at most 24h"},
		{"server: {write_timeout: 1ns}\nmodels: [{name: m, path: p}]\n", "server.write_timeout: must be at least 100ms"},
		{"server: {read_timeout: 1ms}\nmodels: [{name: m, path: p}]\n", "server.read_timeout: must be at least 100ms"},
		{"models: [{name: " + strings.Repeat("m", 129) + ", path: p}]\n", "more than 128"},
	} {
		_, err := Parse([]byte(tc.yaml), "/x")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}

// TestMeaningfulZeros: the keys whose zero means something (none, from the machine, from the
// model) accept it, so that the documented defaults can be copied; the others refuse it.
// TestTLSPerListener: server.tls's keys apply to every listener, a listener's block changes
// them or turns TLS off for it; paths are read from the configuration's folder; api_keys.open
// defaults to health and metrics, and [] opens nothing.
func TestTLSPerListener(t *testing.T) {
	cfg, err := Parse([]byte(`server:
  tls:
    cert_file: tls.crt
    key_file: tls.key
    grpc: {client_ca_file: ca.pem, min_version: "1.3"}
    admin: {off: true}
  api_keys: {file: keys.yaml, open: []}
models: [{name: m, path: p}]
`), "/etc/gw")
	if err != nil {
		t.Fatal(err)
	}
	h, onH := cfg.Server.TLS.For("http")
	g, onG := cfg.Server.TLS.For("grpc")
	_, onA := cfg.Server.TLS.For("admin")
	if !onH || h.CertFile != "/etc/gw/tls.crt" || h.KeyFile != "/etc/gw/tls.key" || h.MinVersion != "1.2" || h.ClientCAFile != "" {
		t.Errorf("http: %v %+v", onH, h)
	}
	if !onG || g.CertFile != "/etc/gw/tls.crt" || g.ClientCAFile != "/etc/gw/ca.pem" || g.MinVersion != "1.3" {
		t.Errorf("grpc: %v %+v", onG, g)
	}
	if onA {
		t.Error("admin: TLS despite off")
	}
	if cfg.Server.APIKeys.File != "/etc/gw/keys.yaml" || len(cfg.Server.APIKeys.Open) != 0 {
		t.Errorf("api_keys: %+v", cfg.Server.APIKeys)
	}
	plain, err := Parse([]byte("models: [{name: m, path: p}]\n"), "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, on := plain.Server.TLS.For("http"); on || !slices.Equal(plain.Server.APIKeys.Open, []string{"health", "metrics"}) {
		t.Errorf("defaults: TLS %v, open %v", on, plain.Server.APIKeys.Open)
	}
}

func TestMeaningfulZeros(t *testing.T) {
	cfg, err := Parse([]byte(`server: {decode_workers: 0, decode_queue: 0, max_inflight_bytes: "", drain_delay: 0s}
repository: {poll: 0s}
models: [{name: m, path: p, labels: "", input: {name: "", width: 0, height: 0, layout: "", type: ""}, output: {name: ""},
  preprocess: {mode: "", resize: 0, crop: 0, mean: [], std: [], scale: "", max_pixels: 0},
  batching: {max_queue_delay: 0, priorities: 0, preferred_batch_sizes: [], adaptive: {latency_target: 0s}}}]
`), "/x")
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Server
	if s.DecodeWorkers < 1 || s.DecodeQueue != max(256, 128*s.DecodeWorkers) || s.DrainDelay != 0 || s.MaxInflightBytes < 64<<20 || s.MaxInflightBytes > 1<<30 {
		t.Fatalf("server defaults: %+v", s)
	}
	if m := cfg.Models[0]; m.Preprocess.Mean != nil || m.Batching.PreferredBatchSizes != nil || m.Batching.Adaptive.LatencyTarget != 0 {
		t.Fatalf("empty lists are unset, latency_target 0 is off: %+v", m)
	}
	for _, v := range []string{"0", "0s", "0.0", "0MiB", " 0ms"} {
		if !isZeroScalar(v) {
			t.Errorf("%q is zero", v)
		}
	}
	for _, v := range []string{"1", "0.5s", "false", "", "10"} {
		if isZeroScalar(v) {
			t.Errorf("%q is not zero", v)
		}
	}
}

// TestReadFileRefusesDevicesAndHugeFiles: the config, label and token files are read only when
// regular and within their limit: /dev/zero as a label or token file hung the start (hashing
// it) or grew the process to gigabytes.
func TestReadFileRefusesDevicesAndHugeFiles(t *testing.T) {
	if _, err := ReadFile("/dev/zero", MaxTokenBytes); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("/dev/zero: %v", err)
	}
	if _, err := LoadLabels("/dev/zero"); err == nil {
		t.Fatal("labels from /dev/zero were read")
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil { // opening it for reading would block
		if _, err := ReadFile(fifo, MaxConfigBytes); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a FIFO: %v", err)
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory as the config: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, make([]byte, MaxTokenBytes+1), 0o600)
	if _, err := ReadFile(big, MaxTokenBytes); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a file over its limit: %v", err)
	}
	if b, err := ReadFile(big, MaxTokenBytes+1); err != nil || len(b) != MaxTokenBytes+1 {
		t.Fatalf("a file at its limit: %d bytes, %v", len(b), err)
	}
}

func TestByteSizeAndLabels(t *testing.T) {
	cfg, err := Parse([]byte("server: {max_body_bytes: 2MiB}\nmodels: [{name: m, path: p}]\n"), "/x")
	if err != nil || cfg.Server.MaxBodyBytes != 2<<20 {
		t.Fatalf("%v %v", cfg, err)
	}
	dir := t.TempDir()
	js := filepath.Join(dir, "l.json")
	os.WriteFile(js, []byte(`["a", "b \"c\""]`), 0o644)
	if l, err := LoadLabels(js); err != nil || len(l) != 2 || l[1] != `b "c"` {
		t.Fatalf("json labels: %v %v", l, err)
	}
	txt := filepath.Join(dir, "l.txt")
	os.WriteFile(txt, []byte("a\r\nb\n"), 0o644)
	if l, err := LoadLabels(txt); err != nil || len(l) != 2 || l[0] != "a" || l[1] != "b" {
		t.Fatalf("text labels: %q %v", l, err)
	}
}

// TestMemoryLimitReadsCgroups: the memory budget's default follows the tightest cgroup limit,
// cgroup v2 or v1 (v1 was not read: on a v1 host a 1 GiB container got a budget of its whole
// limit and was OOM-killed under held uploads), nested or at the mount's root, never above the
// machine's memory.
func TestMemoryLimitReadsCgroups(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"no cgroup", map[string]string{}, 8 * gib},
		{"v2 at the namespace root", map[string]string{
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1073741824\n"}, gib},
		{"v2 nested, unlimited below a limited parent", map[string]string{
			"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":     "536870912\n",
			"sys/fs/cgroup/kubepods/memory.max":          "4294967296\n"}, gib / 2},
		{"v1 with the host's path, the container's cgroup at the mount's root", map[string]string{
			"proc/self/cgroup":                           "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}, gib},
		{"v1 nested", map[string]string{
			"proc/self/cgroup":                                                   "4:memory:/kubepods/burstable/pod2\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                         "9223372036854771712\n",
			"sys/fs/cgroup/memory/kubepods/burstable/pod2/memory.limit_in_bytes": "805306368\n"}, 768 << 20},
		{"a limit above the machine's memory", map[string]string{
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "68719476736\n"}, 8 * gib},
	} {
		root := t.TempDir()
		files := map[string]string{"proc/meminfo": "MemTotal:        8388608 kB\nMemFree:         1 kB\n"}
		for k, v := range c.files {
			files[k] = v
		}
		for name, data := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := memoryLimit(root); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestAutoDefaults: the defaults decided by the machine follow the rules their doc comments
// (and so docs/configuration.md) state.
func TestAutoDefaults(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		mc             machine
		workers, queue int
		inflight       ByteSize
	}{
		{machine{cpus: 1, memory: 1024 * mib}, 1, 256, 256 * mib},
		{machine{cpus: 4, memory: 100 * mib}, 4, 512, 64 * mib},
		{machine{cpus: 64, memory: 64 * 1024 * mib}, 64, 8192, 1024 * mib},
	} {
		cfg := Defaults()
		cfg.resolveAuto(c.mc)
		if s := cfg.Server; s.DecodeWorkers != c.workers || s.DecodeQueue != c.queue || s.MaxInflightBytes != c.inflight {
			t.Errorf("%+v: workers %d, queue %d, inflight %d; want %d, %d, %d", c.mc, s.DecodeWorkers, s.DecodeQueue, s.MaxInflightBytes, c.workers, c.queue, c.inflight)
		}
	}
}
