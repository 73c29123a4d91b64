package main

// Model-directory mode: the way KServe (and Knative) start a predictor container.
//
//	gateway --model_name=NAME --model_dir=/mnt/models --http_port=8080
//
// KServe's storage initializer downloads a model's storageUri into /mnt/models and starts the
// runtime with the args of its ServingRuntime; Knative also sets $PORT. In this mode the
// configuration is built from the directory instead of -config:
//
//   - the ONNX file: model.onnx, or the only *.onnx, in the directory, or else in its highest
//     numeric version folder (1/model.onnx, as Triton and KServe model repositories lay out);
//   - labels, inputs, outputs and preprocessing: as for any model (configs.Model.Complete):
//     a label file beside the ONNX file or in the directory, else the model's metadata;
//   - an optional gateway.yaml in the directory: the same strict schema as configs/gateway.yaml,
//     with at most one entry under models whose name and path may be left out (they come from
//     -model_name and the file found); relative paths are read from the directory.
//     Without it every setting takes its default, but for the drain: server.drain_delay 5s and
//     server.shutdown_timeout 20s unless the file sets them, so that a predictor leaves the
//     Service's endpoints before its listener closes, and drains within Kubernetes' default
//     30 s grace period.
//
// The server listens on 0.0.0.0:PORT: -http_port, else $PORT, else $IMAGEGATE_LISTEN (a whole
// address), else 0.0.0.0:8080; -listen overrides the whole address.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/imagegate/imagegate/configs"
)

// modelDirFlags are the KServe-style flags. Each has a snake_case name, as KServe's runtimes
// spell them (--model_dir; Go's flag package takes --x as -x), and a kebab-case alias.
type modelDirFlags struct {
	fs   *flag.FlagSet
	dir  string
	name string
	port int
}

const modelDirConfigFile = "gateway.yaml"

// modelDirDrainDefaults: in a cluster the endpoint's removal takes a few seconds to reach every
// proxy; 5 s + 20 s, and the 4 s at most the drain takes after them (gateway.ShutdownTail), fit
// in Kubernetes' default terminationGracePeriodSeconds (30).
var modelDirDrainDefaults = map[string]any{"drain_delay": "5s", "shutdown_timeout": "20s"}

func addModelDirFlags(fs *flag.FlagSet) *modelDirFlags {
	f := &modelDirFlags{fs: fs, port: -1}
	for _, n := range []string{"model_dir", "model-dir"} {
		fs.StringVar(&f.dir, n, "", "serve the model in this directory (KServe's /mnt/models) instead of -config; see -model_name")
	}
	for _, n := range []string{"model_name", "model-name"} {
		fs.StringVar(&f.name, n, "", "with -model_dir: the model's name (default: the directory's name)")
	}
	for _, n := range []string{"http_port", "http-port"} {
		fs.IntVar(&f.port, n, -1, "listen on 0.0.0.0:PORT (default with -model_dir: $PORT, else 8080)")
	}
	return f
}

// loader checks the flags' combination and returns the config loader run uses, with the
// config's name for messages and the listen address with what set it ("" when the
// configuration decides), both rewritten in model-directory mode.
func (f *modelDirFlags) loader(configPath, listen string) (load func(string) (*configs.Config, error), source, addr, from string, err error) {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[strings.ReplaceAll(fl.Name, "-", "_")] = true })
	if f.port != -1 && (f.port < 0 || f.port > 65535) {
		return nil, "", "", "", fmt.Errorf("-http_port must be in [0, 65535], got %d", f.port)
	}
	if set["http_port"] && listen != "" {
		return nil, "", "", "", errors.New("give -listen or -http_port, not both")
	}
	if listen != "" {
		from = "-listen"
	}
	if f.port >= 0 {
		listen, from = "0.0.0.0:"+strconv.Itoa(f.port), "-http_port"
	}
	if f.dir == "" {
		if set["model_name"] {
			return nil, "", "", "", errors.New("-model_name needs -model_dir")
		}
		return configs.Load, configPath, listen, from, nil
	}
	if set["config"] {
		return nil, "", "", "", errors.New("give -config or -model_dir, not both")
	}
	if listen == "" {
		switch p, env := os.Getenv("PORT"), os.Getenv(listenEnv); {
		case p != "":
			if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
				return nil, "", "", "", fmt.Errorf("$PORT must be a port number, got %q", p)
			}
			listen, from = "0.0.0.0:"+p, "$PORT"
		case env != "":
			listen, from = env, "$"+listenEnv
		default:
			listen, from = "0.0.0.0:8080", "-model_dir"
		}
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, "", "", "", fmt.Errorf("-model_dir: %w", err)
	}
	name := f.name
	if name == "" {
		name = filepath.Base(dir)
	}
	load = func(string) (*configs.Config, error) { return loadModelDir(dir, name) }
	return load, "-model_dir " + dir, listen, from, nil
}

// loadModelDir builds the configuration of the model in dir (see the file's comment).
func loadModelDir(dir, name string) (*configs.Config, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("-model_dir: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("-model_dir %s is not a directory", dir)
	}
	doc := map[string]any{}
	file := filepath.Join(dir, modelDirConfigFile)
	data, err := configs.ReadFile(file, configs.MaxConfigBytes)
	switch {
	case err == nil:
		// Strict first, on the file as written, so errors carry its own line numbers.
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		var strict configs.Config
		if err := dec.Decode(&strict); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: cannot parse config: %w", file, err)
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: cannot parse config: %w", file, err)
		}
		if doc == nil {
			doc = map[string]any{}
		}
	case errors.Is(err, os.ErrNotExist):
		file = ""
	default:
		return nil, fmt.Errorf("cannot read config: %w", err)
	}
	where := func(err error) error {
		if file == "" {
			return fmt.Errorf("-model_dir %s: %w", dir, err)
		}
		return fmt.Errorf("%s: %w", file, err)
	}

	var model map[string]any
	switch models := doc["models"].(type) {
	case nil:
		model = map[string]any{}
	case []any:
		if len(models) != 1 {
			return nil, where(fmt.Errorf("models: a model directory holds one model, got %d entries", len(models)))
		}
		m, ok := models[0].(map[string]any)
		if !ok {
			return nil, where(errors.New("models[0]: must be a mapping"))
		}
		model = m
	default:
		return nil, where(errors.New("models: must be a list"))
	}
	if n, ok := model["name"]; ok && n != name {
		return nil, where(fmt.Errorf("models[0].name is %v, but -model_name is %q: leave the name out of the file", n, name))
	}
	model["name"] = name
	if _, hasPath := model["path"]; !hasPath {
		onnx, err := findModelFile(dir)
		if err != nil {
			return nil, where(err)
		}
		model["path"] = onnx
		if filepath.Dir(onnx) != filepath.Clean(dir) {
			// In a version folder: the directory is a repository (Triton's layout), served
			// with that folder's version number (a file path would be served as version 1):
			// the folder found, the newest holding a model, unless the file sets a policy.
			model["path"] = dir
			if _, set := model["version_policy"]; !set {
				v, _ := strconv.Atoi(filepath.Base(filepath.Dir(onnx)))
				model["version_policy"] = map[string]any{"specific": []int{v}}
			}
		}
	}
	doc["models"] = []any{model}
	server, ok := doc["server"].(map[string]any)
	if !ok {
		if doc["server"] != nil {
			return nil, where(errors.New("server: must be a mapping"))
		}
		server = map[string]any{}
		doc["server"] = server
	}
	for k, v := range modelDirDrainDefaults {
		if _, set := server[k]; !set {
			server[k] = v
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, where(err)
	}
	cfg, err := configs.Parse(out, dir)
	if err != nil {
		return nil, where(err)
	}
	return cfg, nil
}

// findModelFile finds the ONNX file of a model directory: model.onnx or the only *.onnx in
// dir, else in its highest numeric version folder.
func findModelFile(dir string) (string, error) {
	onnx, err := findONNX(dir)
	if err != nil {
		return "", err
	}
	if onnx == "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", err
		}
		var versions []int
		for _, e := range entries {
			// Version folders as the configuration's repositories name them: 1, 2, ... ("0",
			// "007" are not versions; "007" was looked for as 7/).
			if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && e.IsDir() && strconv.Itoa(n) == e.Name() {
				versions = append(versions, n)
			}
		}
		slices.Sort(versions)
		for i := len(versions) - 1; i >= 0 && onnx == ""; i-- {
			if onnx, err = findONNX(filepath.Join(dir, strconv.Itoa(versions[i]))); err != nil {
				return "", err
			}
		}
	}
	if onnx == "" {
		return "", errors.New("no model.onnx (or single *.onnx) in the directory or in a numeric version folder such as 1/")
	}
	return onnx, nil
}

// findONNX returns model.onnx or the only *.onnx in dir, "" when there is none.
func findONNX(dir string) (string, error) {
	p := filepath.Join(dir, "model.onnx")
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p, nil
	}
	matches, err := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if err != nil {
		return "", err
	}
	var files []string
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && !st.IsDir() {
			files = append(files, m)
		}
	}
	switch len(files) {
	case 0:
		return "", nil
	case 1:
		return files[0], nil
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.Base(f)
	}
	return "", fmt.Errorf("%s holds several ONNX files (%s): name the one to serve model.onnx, or set models[0].path in %s",
		dir, strings.Join(names, ", "), modelDirConfigFile)
}
