package main

// Triton's command line: a model repository and its model control, with tritonserver's flag
// spellings, so that a script or a KServe ServingRuntime written for Triton starts the gateway
// unchanged (docs/triton.md):
//
//	gateway --model-repository=/models [--model-control-mode=none|poll|explicit] [--load-model=NAME ...]
//	        [--repository-poll-secs=15] [--http-port=8000] [--grpc-port=8001] [--allow-grpc=false]
//	gateway tritonserver --model-store=/mnt/models --grpc-port=9000 --http-port=8080 --allow-grpc=true --allow-http=true
//
// Go's flag package takes --x as -x. The leading word tritonserver (KServe's Triton runtime
// puts the command in its args) selects Triton's defaults too: HTTP on 0.0.0.0:8000 and gRPC
// on 0.0.0.0:8001, unless --http-port, --grpc-port or -listen say otherwise.

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/configs/triton"
	"github.com/imagegate/imagegate/gateway"
)

// tritonFlags are the model repository's flags.
type tritonFlags struct {
	repository  string
	controlMode string
	loadModels  stringList
	pollSecs    int
	strict      bool
	grpcPort    int
	allowGRPC   bool
	allowHTTP   bool
	strictModel bool
	exitOnError bool
	logVerbose  int
	metricsPort int
	ignored     stringList // Triton's flags accepted and not honoured: logged at start
	tritonMode  bool       // the command line began with the word tritonserver
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func addTritonFlags(fs *flag.FlagSet) *tritonFlags {
	f := &tritonFlags{pollSecs: -1, grpcPort: -1}
	for _, n := range []string{"model-repository", "model-store"} {
		fs.StringVar(&f.repository, n, "", "serve every model folder of this Triton model repository (<dir>/<model>/config.pbtxt, <dir>/<model>/<version>/model.onnx; repository.path). -model-store is Triton's older name")
	}
	fs.StringVar(&f.controlMode, "model-control-mode", "", "none, poll or explicit: Triton's model control (repository.model_control_mode)")
	fs.Var(&f.loadModels, "load-model", `with -model-control-mode explicit: a model to load at start ("*": all); may be repeated (repository.load_models)`)
	fs.IntVar(&f.pollSecs, "repository-poll-secs", -1, "with -model-control-mode poll: seconds between checks of the repository (repository.poll; default 15)")
	fs.BoolVar(&f.strict, "repository-strict", false, "a config.pbtxt field the gateway does not honour fails its model instead of a warning (repository.strict)")
	fs.IntVar(&f.grpcPort, "grpc-port", -1, "serve gRPC on 0.0.0.0:PORT (Triton's spelling of -grpc-listen)")
	fs.BoolVar(&f.allowGRPC, "allow-grpc", true, "false: no gRPC listener (Triton's flag)")
	fs.BoolVar(&f.allowHTTP, "allow-http", true, "Triton's flag: HTTP is always served; false is refused")
	fs.BoolVar(&f.strictModel, "strict-model-config", false, "Triton's flag: the gateway completes a configuration from the model, as Triton's auto-complete (true is logged as not honoured)")
	fs.BoolVar(&f.exitOnError, "exit-on-error", true, "Triton's flag: false serves the models that load when others fail at start")
	fs.IntVar(&f.logVerbose, "log-verbose", 0, "Triton's flag: above 0 logs at level debug")
	fs.IntVar(&f.metricsPort, "metrics-port", -1, "Triton's flag, not honoured (logged): metrics are at /metrics on the HTTP port and the admin port")
	fs.Func("backend-config", "Triton's flag, accepted and not honoured (logged at start)", func(v string) error {
		f.ignored = append(f.ignored, "--backend-config="+v)
		return nil
	})
	for _, n := range []string{"allow-metrics", "allow-gpu-metrics", "log-info", "log-warning", "log-error"} {
		fs.BoolFunc(n, "Triton's flag, accepted and not honoured (logged at start)", func(v string) error {
			f.ignored = append(f.ignored, "--"+n+"="+v)
			return nil
		})
	}
	return f
}

// tritonCommand handles a command line that begins with the word tritonserver: the rest is
// parsed as the flags, with Triton's default ports. Other words that are not flags are an
// error, not silently ignored.
func tritonCommand(fs *flag.FlagSet, o *options) error {
	args := fs.Args()
	if len(args) == 0 {
		return nil
	}
	if args[0] != "tritonserver" || o.triton.tritonMode {
		return fmt.Errorf("unexpected argument %q: flags start with - (or --)", args[0])
	}
	o.triton.tritonMode = true
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	return tritonCommand(fs, o)
}

// validate refuses what Triton's flags cannot mean here.
func (f *tritonFlags) validate(o *options) error {
	set := o.set()
	repoFlags := set["model_repository"] || set["model_store"] || set["model_control_mode"] || set["load_model"] ||
		set["repository_poll_secs"] || set["repository_strict"]
	switch {
	case set["model_repository"] && set["model_store"]:
		return errors.New("give -model-repository or -model-store, not both")
	case repoFlags && o.model != "":
		return errors.New("give -model or the model repository's flags (-model-repository ...), not both")
	case repoFlags && o.modelDir.dir != "":
		return errors.New("give -model_dir or the model repository's flags (-model-repository ...), not both")
	case f.repository == "" && !set["config"] && repoFlags:
		return errors.New("-model-control-mode, -load-model, -repository-poll-secs and -repository-strict go with -model-repository (or -config)")
	case set["grpc_port"] && o.grpcListen != "":
		return errors.New("give -grpc-listen or -grpc-port, not both")
	case set["grpc_port"] && (f.grpcPort < 0 || f.grpcPort > 65535):
		return fmt.Errorf("-grpc-port must be in [0, 65535], got %d", f.grpcPort)
	case set["repository_poll_secs"] && f.pollSecs < 1:
		return fmt.Errorf("-repository-poll-secs must be at least 1, got %d", f.pollSecs)
	case !f.allowHTTP:
		return errors.New("-allow-http=false: the gateway always serves HTTP (its health checks and metrics are there)")
	case !f.allowGRPC && (set["grpc_port"] || o.grpcListen != ""):
		return errors.New("-allow-grpc=false with a gRPC address")
	}
	f.controlMode = strings.ToLower(f.controlMode) // Triton's documentation writes POLL, EXPLICIT
	if f.controlMode != "" && !slices.Contains([]string{configs.ControlNone, configs.ControlPoll, configs.ControlExplicit}, f.controlMode) {
		return fmt.Errorf("-model-control-mode must be none, poll or explicit, got %q", f.controlMode)
	}
	if f.strictModel {
		f.ignored = append(f.ignored, "--strict-model-config=true (a configuration is completed from the model)")
	}
	if set["metrics_port"] {
		f.ignored = append(f.ignored, fmt.Sprintf("--metrics-port=%d (metrics are at /metrics on the HTTP port and the admin port)", f.metricsPort))
	}
	if f.logVerbose > 0 && o.logLevel == "" {
		o.logLevel = "debug"
	}
	switch {
	case !f.allowGRPC:
		o.grpcListen = "off"
	case set["grpc_port"]:
		o.grpcListen = "0.0.0.0:" + strconv.Itoa(f.grpcPort)
	case f.tritonMode && o.grpcListen == "":
		o.grpcListen = "0.0.0.0:8001" // Triton's
	}
	return nil
}

// apply sets what the flags give over the configuration's repository section.
func (f *tritonFlags) apply(c *configs.Config) {
	r := &c.Repository
	if f.repository != "" {
		abs, err := filepath.Abs(f.repository)
		if err != nil {
			abs = f.repository
		}
		r.Path = abs
	}
	if f.controlMode != "" {
		r.ModelControlMode = f.controlMode
		if f.controlMode != configs.ControlPoll {
			r.Poll = 0 // the file's poll was for another mode
		}
	}
	if f.pollSecs > 0 {
		r.Poll = configs.Duration(time.Duration(f.pollSecs) * time.Second)
		if r.ModelControlMode == "" {
			r.ModelControlMode = configs.ControlPoll
		}
	}
	r.LoadModels = append(r.LoadModels, f.loadModels...)
	if f.strict {
		r.Strict = true
	}
}

// wrap returns the configuration's source with the repository's flags applied: the
// repository alone (-model-repository without -config), or over the -config file.
func (f *tritonFlags) wrap(src source, o *options) source {
	set := o.set()
	if f.tritonMode && src.listen == "" {
		src.listen, src.listenFrom = "0.0.0.0:8000", "tritonserver" // Triton's HTTP port, over $IMAGEGATE_LISTEN
	}
	switch {
	case o.model != "" || o.modelDir.dir != "": // validate refused the repository's flags
	case f.repository != "" && !set["config"]:
		dir := f.repository
		src.load = func(string) (*configs.Config, error) { return configs.ForRepository(dir, f.apply) }
		src.name = "-model-repository " + dir
	default:
		src.load = func(path string) (*configs.Config, error) { return configs.LoadWith(path, f.apply) }
	}
	return src
}

// tritonState is what the repository keeps of the Triton models between reads: the warnings
// already logged.
type tritonState struct {
	mu     sync.Mutex
	warned map[string]string // by model: the unhonoured fields last logged
}

// tritonSpecs adds to specs what the Triton repository's side of cfg needs: the failed
// models, as versions whose load fails saying why; Idle in explicit model control. It logs,
// once per model and change, the config.pbtxt fields not honoured.
func (r *repository) tritonSpecs(cfg *configs.Config, specs []gateway.ModelSpec) []gateway.ModelSpec {
	for _, f := range cfg.FailedModels {
		err := f.Err
		specs = append(specs, gateway.ModelSpec{Name: f.Name, Version: f.Version, Fingerprint: "failed: " + err.Error(),
			Load: func() (gateway.ModelOptions, error) { return gateway.ModelOptions{}, err }})
	}
	if cfg.Repository.ModelControlMode == configs.ControlExplicit {
		for i := range specs {
			specs[i].Idle = true
		}
	}
	r.triton.mu.Lock()
	defer r.triton.mu.Unlock()
	if r.triton.warned == nil {
		r.triton.warned = map[string]string{}
	}
	for _, m := range cfg.Models {
		if m.Triton == nil {
			continue
		}
		w := strings.Join(m.Triton.Unhonoured, "; ")
		if w != "" && r.triton.warned[m.Name] != w {
			r.log.Warn("model "+m.Name+": config.pbtxt fields not honoured: "+w, "model", m.Name, "config", m.Triton.ConfigFile)
		}
		r.triton.warned[m.Name] = w
	}
	return specs
}

// tritonOptions completes a Triton model's options with the configuration .../config
// answers: its config.pbtxt as read, with what it leaves out filled in from what is served.
func tritonOptions(m configs.Model, mo gateway.ModelOptions, err error) (gateway.ModelOptions, error) {
	if err != nil || m.Triton == nil {
		return mo, err
	}
	s := triton.Served{Name: m.Name, InputName: mo.InputName, OutputName: firstOutput(mo.Runners), InputType: m.Input.Type,
		Layout: string(mo.Preprocess.Layout), Width: mo.Preprocess.Width, Height: mo.Preprocess.Height,
		Classes: len(mo.Labels), MaxBatchSize: mo.Batching.MaxBatchSize, Instances: m.Runtime.Instances}
	if s.Layout == "" {
		s.Layout = "NCHW"
	}
	if _, u8 := mo.Runners.(gateway.RunnersOf[uint8]); u8 {
		s.InputType = "uint8"
	} else {
		s.InputType = "float32"
	}
	mo.Config, err = triton.Answer(m.Triton.Config, s)
	if err != nil {
		if mo.Release != nil {
			mo.Release()
		}
		return gateway.ModelOptions{}, fmt.Errorf("%s: %w", m.Triton.ConfigFile, err)
	}
	return mo, nil
}

// firstOutput is the name of the runners' first output (a classifier's scores).
func firstOutput(r gateway.Runners) string {
	var outs []gateway.Output
	switch rs := r.(type) {
	case gateway.RunnersOf[float32]:
		outs = rs[0].Outputs()
	case gateway.RunnersOf[uint8]:
		outs = rs[0].Outputs()
	}
	if len(outs) == 0 {
		return ""
	}
	return outs[0].Name
}

// startModels loads what is served at start: every model (Reload), then, in explicit model
// control, the models of repository.load_models ("*": every model), each of which must load,
// as Triton's --load-model. With --exit-on-error=false a model that fails is logged and the
// others are served.
func startModels(srv *gateway.Server, cfg *configs.Config, f *tritonFlags, log *slog.Logger) error {
	if len(f.ignored) > 0 {
		log.Warn("Triton's flags accepted and not honoured: " + strings.Join(f.ignored, ", "))
	}
	err := errors.Join(srv.Reload(), loadAtStart(srv, cfg, log))
	if err != nil && !f.exitOnError {
		log.Error("models failed to load: serving the others (--exit-on-error=false)", "err", err)
		return nil
	}
	return err
}

// loadAtStart loads the models of repository.load_models in explicit model control.
func loadAtStart(srv *gateway.Server, cfg *configs.Config, log *slog.Logger) error {
	r := cfg.Repository
	if r.ModelControlMode != configs.ControlExplicit {
		return nil
	}
	names := r.LoadModels
	if slices.Contains(names, "*") {
		names = nil
		for _, m := range cfg.Models {
			names = append(names, m.Name)
		}
		for _, f := range cfg.FailedModels {
			names = append(names, f.Name)
		}
	}
	var errs []error
	for _, n := range names {
		if err := srv.LoadModel(n); err != nil {
			errs = append(errs, fmt.Errorf("-load-model %s: %w", n, err))
		}
	}
	log.Info("model control explicit: models loaded at start", "models", len(names))
	return errors.Join(errs...)
}

// tritonNote is what -print-config shows of a model of the Triton repository, which the YAML
// it prints leaves to repository.path: the model as the gateway serves it, in the YAML's keys.
func tritonNote(m *configs.Model) string {
	if m.Triton == nil {
		return ""
	}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if enc.Encode(m) != nil || enc.Close() != nil {
		return ""
	}
	return "\nfrom the model repository (repository.path reads it again), as a models entry it would be:\n" +
		"  - " + strings.ReplaceAll(strings.TrimRight(b.String(), "\n"), "\n", "\n    ")
}
