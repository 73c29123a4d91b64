package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/imagegate/imagegate/configs"
)

//go:generate go test -run ^TestConfigurationDoc$ -update .

// options are the command line's. Where a flag and the configuration both set something,
// the flag wins; then the environment (IMAGEGATE_LISTEN); then the YAML; then the default.
type options struct {
	fs          *flag.FlagSet
	config      string
	model       string
	labels      string
	name        string
	task        string
	listen      string
	adminListen string
	grpcListen  string
	check       bool
	printConfig bool
	version     bool
	logLevel    string
	logFormat   string
	health      string
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	apiKeys     string
	modelDir    *modelDirFlags // KServe's -model_dir, -model_name, -http_port: kserve.go
	triton      *tritonFlags   // Triton's -model-repository, -model-control-mode...: triton.go
}

func newOptions(fs *flag.FlagSet) *options {
	o := &options{fs: fs}
	fs.StringVar(&o.config, "config", "configs/gateway.yaml", "the YAML configuration file (docs/configuration.md)")
	fs.StringVar(&o.model, "model", "", "serve this ONNX file (or model repository folder) without a YAML: the model tells its inputs, outputs, sizes and labels")
	fs.StringVar(&o.labels, "labels", "", "with -model: its label file (default: labels.txt, labels.json or synset.txt beside the model, else the model's metadata)")
	fs.StringVar(&o.name, "name", "", "with -model: the model's name (default: the file's name without .onnx; for model.onnx, its folder's)")
	fs.StringVar(&o.task, "task", "", "with -model: what the model answers, classify, embed or detect (default: from the model's outputs where they leave no doubt)")
	fs.StringVar(&o.listen, "listen", "", "HOST:PORT of the public API (overrides $IMAGEGATE_LISTEN and server.listen)")
	fs.StringVar(&o.adminListen, "admin-listen", "", `HOST:PORT of the admin API, or "off" (overrides server.admin_listen)`)
	fs.StringVar(&o.grpcListen, "grpc-listen", "", `HOST:PORT of the gRPC API, or "off" (overrides $IMAGEGATE_GRPC_LISTEN and server.grpc_listen)`)
	fs.BoolVar(&o.check, "check", false, "validate the configuration and load every model, then exit")
	fs.BoolVar(&o.printConfig, "print-config", false, "print the effective configuration as YAML (defaults filled in, and what the models tell), then exit")
	fs.BoolVar(&o.version, "version", false, "print the build's version, Go's, ONNX Runtime's and the CPU features used, then exit")
	fs.StringVar(&o.logLevel, "log-level", "", "debug, info, warn or error (overrides log.level)")
	fs.StringVar(&o.logFormat, "log-format", "", "text or json (overrides log.format)")
	fs.StringVar(&o.health, "healthcheck", "", "GET this URL and exit 0 if it answers 200 (for container health checks; https:// is not verified, and an http:// URL that reaches a TLS port is tried over https://)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate file: serve every listener over TLS (overrides server.tls.cert_file; with -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM key file of -tls-cert (overrides server.tls.key_file)")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM file of the CAs whose client certificates are required (mutual TLS; overrides server.tls.client_ca_file)")
	fs.StringVar(&o.apiKeys, "api-keys", "", "key file: every inference request needs a key (overrides server.api_keys.file; docs/security.md)")
	o.modelDir = addModelDirFlags(fs)
	o.triton = addTritonFlags(fs)
	return o
}

// set reports which flags the command line gave, with KServe's spellings folded to theirs.
func (o *options) set() map[string]bool {
	set := map[string]bool{}
	o.fs.Visit(func(fl *flag.Flag) { set[strings.ReplaceAll(fl.Name, "-", "_")] = true })
	return set
}

// validate refuses combinations of flags that mean nothing, and values no key accepts.
func (o *options) validate() error {
	if err := tritonCommand(o.fs, o); err != nil {
		return err
	}
	set := o.set()
	switch {
	case o.model != "" && set["config"]:
		return errors.New("give -config or -model, not both")
	case o.model != "" && o.modelDir.dir != "":
		return errors.New("give -model or -model_dir, not both")
	case o.model == "" && (set["labels"] || set["name"] || set["task"]):
		return errors.New("-labels, -name and -task go with -model")
	}
	switch o.task {
	case "", configs.TaskClassify, configs.TaskEmbed, configs.TaskDetect:
	default:
		return fmt.Errorf("-task must be classify, embed or detect, got %q", o.task)
	}
	if err := o.triton.validate(o); err != nil {
		return err
	}
	if o.logLevel != "" {
		if _, err := parseLevel(o.logLevel); err != nil {
			return fmt.Errorf("-log-level: %w", err)
		}
	}
	if o.logFormat != "" && o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("-log-format must be text or json, got %q", o.logFormat)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	return nil
}

// source is where the configuration comes from.
type source struct {
	load func(string) (*configs.Config, error)
	// name names it in messages: the file, "-model PATH" or "-model_dir DIR".
	name string
	// listen overrides server.listen when set; listenFrom names what set it.
	listen, listenFrom string
}

// source chooses the configuration's loader and the listen address, by the precedence
// flag > environment > YAML > default.
func (o *options) source() (source, error) {
	load, name, listen, from, err := o.modelDir.loader(o.config, o.listen)
	if err != nil {
		return source{}, err
	}
	if o.model != "" {
		model, labels, n, task := o.model, o.labels, o.name, o.task
		load = func(string) (*configs.Config, error) {
			cfg, err := configs.ForModel(model, labels, n)
			if err == nil && task != "" {
				cfg.Models[0].Task = task
				err = cfg.Validate()
			}
			return cfg, err
		}
		name = "-model " + model
	}
	src := o.triton.wrap(source{load: load, name: name, listen: listen, listenFrom: from}, o)
	load, name, listen, from = src.load, src.name, src.listen, src.listenFrom
	if listen == "" {
		if env := os.Getenv(listenEnv); env != "" {
			listen, from = env, "$"+listenEnv
		}
	}
	return source{load: load, name: name, listen: listen, listenFrom: from}, nil
}

// apply sets what the flags override in cfg, after the configuration was read.
func (o *options) apply(cfg *configs.Config) {
	if o.adminListen != "" {
		cfg.Server.AdminListen = o.adminListen
	}
	switch env := os.Getenv(grpcListenEnv); {
	case o.grpcListen != "":
		cfg.Server.GRPCListen = o.grpcListen
	case env != "":
		cfg.Server.GRPCListen = env
	}
	if o.logLevel != "" {
		cfg.Log.Level = o.logLevel
	}
	if o.logFormat != "" {
		cfg.Log.Format = o.logFormat
	}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	if o.tlsCert != "" {
		cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile = abs(o.tlsCert), abs(o.tlsKey)
	}
	if o.tlsClientCA != "" {
		cfg.Server.TLS.ClientCAFile = abs(o.tlsClientCA)
	}
	if o.apiKeys != "" {
		cfg.Server.APIKeys.File = abs(o.apiKeys)
	}
}

// listenEnv sets the listen address between -listen and server.listen: the container image
// sets it, so that a -config given to the container does not make it listen on loopback.
const listenEnv = "IMAGEGATE_LISTEN"

// grpcListenEnv sets the gRPC address between -grpc-listen and server.grpc_listen, as
// listenEnv does the public API's.
const grpcListenEnv = "IMAGEGATE_GRPC_LISTEN"

// grpcListenExplicit reports whether the flag or the environment chose the gRPC address:
// then a listener that cannot be opened is an error, not a warning.
func (o *options) grpcListenExplicit() bool {
	return o.grpcListen != "" || os.Getenv(grpcListenEnv) != ""
}

// envVar is an environment variable the gateway reads.
type envVar struct{ name, meaning string }

// environment lists the environment variables the gateway reads (docs/configuration.md;
// TestEnvironmentDocumented finds every one the code reads).
func environment() []envVar {
	return []envVar{
		{listenEnv, "HOST:PORT of the public API, between -listen and server.listen. The container image sets 0.0.0.0:8080"},
		{grpcListenEnv, "HOST:PORT of the gRPC API, or off, between -grpc-listen and server.grpc_listen"},
		{"ONNXRUNTIME_LIB", "the ONNX Runtime library, when onnxruntime.library is empty"},
		{"PORT", "with -model_dir (as Knative sets it): the port to listen on, after -listen and -http_port and before $" + listenEnv},
		{"GOMAXPROCS", "Go's: when set, the gateway does not raise GOMAXPROCS by one per decode worker and model instance, and server.decode_workers' default follows it"},
		{"GOGC", "Go's: when set, it replaces the gateway's garbage collection policy"},
		{"GOMEMLIMIT", "Go's: a memory limit applied on top of the gateway's garbage collection policy"},
		{"MALLOC_ARENA_MAX", "glibc's: when set, the gateway does not bound malloc's arenas to one per CPU"},
		{"OTEL_TRACES_EXPORTER", "OpenTelemetry's: otlp exports traces, none (or unset, with no OTLP endpoint set) does not; docs/observability.md"},
		{"OTEL_SDK_DISABLED", "OpenTelemetry's: true turns tracing off"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "OpenTelemetry's: the collector's base URL (http://localhost:4318, or :4317 for grpc); setting it turns tracing on when OTEL_TRACES_EXPORTER is unset. The exporter's other OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression, certificates) apply"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OpenTelemetry's: the traces endpoint's full URL, over OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "OpenTelemetry's: http/protobuf (default) or grpc"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OpenTelemetry's: the traces' protocol, over OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"OTEL_TRACES_SAMPLER", "OpenTelemetry's: parentbased_always_on (default), parentbased_traceidratio, parentbased_always_off, always_on, always_off or traceidratio; a batch run's span is sampled when a request it served is"},
		{"OTEL_TRACES_SAMPLER_ARG", "OpenTelemetry's: the ratio of the traceidratio samplers, in [0, 1] (default 1)"},
		{"OTEL_SERVICE_NAME", "OpenTelemetry's: the service.name of the spans (default imagegate)"},
		{"OTEL_RESOURCE_ATTRIBUTES", "OpenTelemetry's: more resource attributes of the spans, key=value,..."},
	}
}

// parseLevel reads a log level: debug, info, warn or error.
func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug", "info", "warn", "error":
		var l slog.Level
		err := l.UnmarshalText([]byte(s))
		return l, err
	}
	return 0, fmt.Errorf("must be debug, info, warn or error, got %q", s)
}

// newLogger is the gateway's log: level and format as log.level and log.format give them.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	l, err := parseLevel(level)
	if err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
