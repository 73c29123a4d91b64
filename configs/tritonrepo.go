package configs

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/configs/triton"
)

// A Triton model repository (repository.path) is read as Triton reads it: every folder under
// it is a model named after the folder, its versions in numeric subfolders, configured by its
// config.pbtxt (package triton maps Triton's fields onto the model's keys, and a parameter
// whose key names a model key sets it), or, without one, from its ONNX file as -model does.
// Each model becomes an entry of Models, decoded and validated as strictly as one the file
// lists; a model that cannot be read or mapped is one of FailedModels, so that the others
// are served (and a poll still follows them).

// Model control modes (repository.model_control_mode), Triton's.
const (
	ControlNone     = "none"
	ControlPoll     = "poll"
	ControlExplicit = "explicit"
)

// DefaultPoll is how often model_control_mode poll checks when repository.poll is not set:
// Triton's --repository-poll-secs default.
const DefaultPoll = Duration(15 * time.Second)

// TritonModel is where a model of the Triton model repository comes from.
type TritonModel struct {
	// Dir is the model's folder; ConfigFile its config.pbtxt, "" when it has none.
	Dir, ConfigFile string
	// Config is the config.pbtxt as read, nil without one: what GET /v2/models/{m}/config
	// answers, completed (triton.Answer).
	Config *inference.ModelConfig
	// Unhonoured names the fields of the config.pbtxt that are set and that the gateway does
	// not honour (or not wholly), with why: one start-up warning per model.
	Unhonoured []string
	// From says which field of the config.pbtxt set each key of the model.
	From map[string]string
}

// field is how errors name the model: its name, and its config.pbtxt or folder.
func (t *TritonModel) field() string {
	return fmt.Sprintf("%s (%s)", filepath.Base(t.Dir), cmp.Or(t.ConfigFile, t.Dir))
}

// FailedModel is a model of the Triton repository that cannot be served as its folder stands:
// its load fails with Err (and the repository index says why).
type FailedModel struct {
	Name string
	// Version is the version it would serve (its highest version folder), "1" when none.
	Version string
	Err     error
}

func (c *Config) validateRepository(p *problems) {
	r := &c.Repository
	switch r.ModelControlMode {
	case ControlNone, ControlExplicit:
		if r.Poll != 0 {
			p.add("repository.poll", "polls in model_control_mode poll only (the mode is %s)", r.ModelControlMode)
		}
	case ControlPoll:
		if r.Poll < Duration(100*time.Millisecond) {
			p.add("repository.poll", "must be at least 100ms, got %s", r.Poll)
		}
	default:
		p.add("repository.model_control_mode", "must be none, poll or explicit, got %q", r.ModelControlMode)
	}
	if len(r.LoadModels) > 0 && r.ModelControlMode != ControlExplicit {
		p.add("repository.load_models", "loads models at start in model_control_mode explicit only (the other modes load every model)")
	}
	for i, n := range r.LoadModels {
		if n == "" {
			p.add(fmt.Sprintf("repository.load_models[%d]", i), "is empty")
		}
	}
	if r.Path != "" {
		if st, err := os.Stat(r.Path); err != nil {
			p.add("repository.path", "%v", err)
		} else if !st.IsDir() {
			p.add("repository.path", "%s is not a directory (a Triton model repository holds a folder per model)", r.Path)
		}
	}
}

func setRepositoryDefaults(r *Repository) {
	if len(r.LoadModels) == 0 {
		r.LoadModels = nil // an empty list and none mean the same
	}
	if r.ModelControlMode == "" {
		r.ModelControlMode = ControlNone
		if r.Poll > 0 {
			r.ModelControlMode = ControlPoll
		}
	}
	if r.ModelControlMode == ControlPoll && r.Poll == 0 {
		r.Poll = DefaultPoll
	}
}

// readRepository reads the Triton model repository into Models and FailedModels.
func (c *Config) readRepository() error {
	c.FailedModels = nil
	if c.Repository.Path == "" {
		return nil
	}
	entries, err := os.ReadDir(c.Repository.Path)
	if err != nil {
		return fmt.Errorf("repository.path: %w", err)
	}
	listed := map[string]bool{}
	for _, m := range c.Models {
		listed[m.Name] = true
	}
	for _, e := range entries {
		name := e.Name()
		dir := filepath.Join(c.Repository.Path, name)
		// Hidden folders are not models: .git, and the ..data links of a Kubernetes volume.
		if strings.HasPrefix(name, ".") {
			continue
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue // a file beside the models (a README)
		}
		m, err := c.tritonModel(name, dir)
		switch {
		case err == nil && listed[name]:
			err = fmt.Errorf("a model of the configuration file (models) has the name %q: rename one", name)
		case err == nil:
			c.Models = append(c.Models, m)
			listed[name] = true
			continue
		}
		c.FailedModels = append(c.FailedModels, FailedModel{Name: name, Version: highestVersion(dir),
			Err: fmt.Errorf("model repository %s, model %s: %w", c.Repository.Path, name, err)})
	}
	return nil
}

// tritonModel reads the model in folder dir, maps it onto the model keys, and decodes,
// defaults and validates the result as Parse does a model of the file.
func (c *Config) tritonModel(name, dir string) (Model, error) {
	src := &TritonModel{Dir: dir}
	keys := map[string]any{}
	file := filepath.Join(dir, triton.ConfigFile)
	if _, err := os.Stat(file); err == nil {
		src.ConfigFile = file
		read, err := triton.Read(file)
		if err != nil {
			return Model{}, fmt.Errorf("%s: %w", file, err)
		}
		mapped, err := triton.Map(read, dir, triton.Options{ModelKey: IsModelKey, Strict: c.Repository.Strict})
		if err != nil {
			return Model{}, fmt.Errorf("%s: %w", file, err)
		}
		src.Config, src.Unhonoured, src.From, keys = read, mapped.Unhonoured, mapped.From, mapped.Keys
		if f := mapped.ModelFilename; f != "" {
			if err := checkModelFilename(name, dir, f); err != nil {
				return Model{}, fmt.Errorf("%s: default_model_filename: %w", file, err)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Model{}, err
	}
	keys["name"], keys["path"] = name, dir
	m, err := c.decodeModel(keys, src)
	if err != nil {
		return Model{}, err
	}
	if _, err := m.Versions(); err != nil {
		return Model{}, err
	}
	return m, nil
}

// decodeModel decodes a model's keys as the file's models are decoded (strictly, every key
// set counted as set), with the server section of c, and defaults and validates it.
func (c *Config) decodeModel(keys map[string]any, src *TritonModel) (Model, error) {
	doc, err := yaml.Marshal(map[string]any{"models": []any{keys}})
	if err != nil {
		return Model{}, err
	}
	var one Config
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&one); err != nil {
		return Model{}, mapError(keys, src, err)
	}
	var node yaml.Node
	if err := yaml.Unmarshal(doc, &node); err != nil {
		return Model{}, err
	}
	one.keys = setKeys(&node)
	one.Server, one.Log, one.ONNXRuntime = c.Server, c.Log, c.ONNXRuntime
	one.Models[0].Triton = src
	if err := one.finish(src.Dir, "config.pbtxt"); err != nil {
		return Model{}, err
	}
	return one.Models[0], nil
}

// mapError names the fields of the config.pbtxt whose values the model's keys do not take,
// decoding each key alone (the document decoded is generated: its line numbers mean nothing
// to the user).
func mapError(keys map[string]any, src *TritonModel, err error) error {
	var bad []string
	for key, from := range src.From {
		one := map[string]any{}
		node, parts := one, strings.Split(key, ".")
		v := lookup(keys, parts)
		for _, p := range parts[:len(parts)-1] {
			next := map[string]any{}
			node[p] = next
			node = next
		}
		node[parts[len(parts)-1]] = v
		doc, _ := yaml.Marshal(map[string]any{"models": []any{one}})
		var cfg Config
		dec := yaml.NewDecoder(bytes.NewReader(doc))
		dec.KnownFields(true)
		if e := dec.Decode(&cfg); e != nil {
			msg := e.Error()
			if _, after, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "yaml: ") {
				msg = after
			}
			if _, after, ok := strings.Cut(msg, "line "); ok {
				if _, rest, ok := strings.Cut(after, ": "); ok {
					msg = rest
				}
			}
			bad = append(bad, fmt.Sprintf("%s (sets %s): %s", from, key, msg))
		}
	}
	if len(bad) == 0 {
		return fmt.Errorf("cannot map onto the gateway's model keys: %w", err)
	}
	slices.Sort(bad)
	return fmt.Errorf("%s", strings.Join(bad, "; "))
}

func lookup(m map[string]any, path []string) any {
	for i, p := range path {
		v := m[p]
		if i == len(path)-1 {
			return v
		}
		next, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return nil
}

// checkModelFilename: default_model_filename is honoured where each version folder's file
// the gateway serves (model.onnx, or the folder's only .onnx file) is that file.
func checkModelFilename(name, dir, file string) error {
	m := Model{Name: name, Path: dir, VersionPolicy: VersionPolicy{All: true}}
	vs, err := m.Versions()
	if err != nil {
		return nil // reported by the versions' own check
	}
	for _, v := range vs {
		if filepath.Base(v.Path) != file {
			return fmt.Errorf("%q, but version %s serves %s: the gateway serves a version folder's model.onnx, or its only .onnx file", file, v.Version, filepath.Base(v.Path))
		}
	}
	return nil
}

// highestVersion is the highest numeric version folder in dir, "1" when there is none.
func highestVersion(dir string) string {
	entries, _ := os.ReadDir(dir)
	best := 0
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > best && e.IsDir() && strconv.Itoa(n) == e.Name() {
			best = n
		}
	}
	return strconv.Itoa(max(best, 1))
}

// IsModelKey reports whether a dotted key ("preprocess.mean", "batching", "runtime.instances")
// names a key of a model in the configuration, other than its name and path: what a
// config.pbtxt parameter may set.
func IsModelKey(key string) bool {
	if key == "name" || key == "path" {
		return false
	}
	t := reflect.TypeFor[Model]()
	for part := range strings.SplitSeq(key, ".") {
		if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
			return false
		}
		found := false
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if f.IsExported() && tag != "" && tag != "-" && tag == part {
				t, found = f.Type, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
