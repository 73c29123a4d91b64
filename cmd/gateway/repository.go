package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/gateway"
)

// repository is the gateway's model repository over the configuration file: each call to
// Specs reads the file again and lists every model version it names (a model's path is an ONNX
// file, version 1, or a directory of numeric version folders, see configs.Model.Versions), with
// a fingerprint of the version's configuration and of its model and label files' contents, so
// that a reload rebuilds exactly what changed.
type repository struct {
	load       func(string) (*configs.Config, error)
	path       string
	listen     string // overrides server.listen when set: -listen, $IMAGEGATE_LISTEN...
	listenFrom string // what set listen
	log        *slog.Logger

	mu      sync.Mutex
	hashes  map[string]fileHash       // by path
	started *configs.Server           // the server section the process started with
	last    string                    // digest of the last specs polled
	chosen  map[string]map[string]int // by model name and version: the max_batch_size auto chose
	triton  tritonState               // the Triton repository's warnings logged (triton.go)
}

type fileHash struct {
	size  int64
	mtime time.Time
	sum   string
}

// config reads the configuration (with the listen address's override applied).
func (r *repository) config() (*configs.Config, error) {
	cfg, err := r.load(r.path)
	if err != nil {
		return nil, err
	}
	if r.listen != "" {
		cfg.Server.Listen = r.listen
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", r.listenFrom, err)
		}
	}
	return cfg, nil
}

func (r *repository) Specs() ([]gateway.ModelSpec, error) {
	cfg, err := r.config()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.started == nil {
		s := cfg.Server
		r.started = &s
	} else if !reflect.DeepEqual(*r.started, cfg.Server) {
		r.log.Warn("the server section of the configuration changed: it applies after a restart (models reload now)", "config", r.path)
	}
	r.mu.Unlock()
	var specs []gateway.ModelSpec
	for _, m := range cfg.Models {
		versions, err := m.Versions()
		if err != nil {
			if st, serr := os.Stat(m.Path); serr == nil && st.IsDir() && m.Triton == nil {
				return nil, err // a repository folder: which versions it holds is not known
			}
			// A model file gone or unreadable: its version 1 fails to load on its own (the
			// version served stays), and the other models reload.
			specs = append(specs, gateway.ModelSpec{Name: m.Name, Version: "1", Fingerprint: "unreadable: " + err.Error(),
				Load: func() (gateway.ModelOptions, error) { return gateway.ModelOptions{}, err }})
			continue
		}
		for _, v := range versions {
			mc := m.ForVersion(v)
			fp, err := r.fingerprint(mc)
			if err != nil {
				// This version's files cannot be read (a path gone, not a regular file): it fails
				// to load on its own, reported as a load failure of this model (the version it
				// would replace stays served), and the other models reload as usual.
				specs = append(specs, gateway.ModelSpec{Name: m.Name, Version: v.Version,
					Fingerprint: "unreadable: " + err.Error(), // stable: a poll reloads when the error changes
					Load:        func() (gateway.ModelOptions, error) { return gateway.ModelOptions{}, err }})
				continue
			}
			specs = append(specs, gateway.ModelSpec{Name: m.Name, Version: v.Version, Fingerprint: fp,
				Load: func() (gateway.ModelOptions, error) {
					if mc.Warning != "" {
						r.log.Warn("model "+mc.Name+": "+mc.Warning, "model", mc.Name, "version", v.Version)
					}
					mo, err := modelOptions(mc, v.Version, cfg.Server, r.log)
					if err == nil && mc.Batching.MaxBatchSize.Auto() {
						r.noteChoice(m.Name, v.Version, mo.Batching.MaxBatchSize)
					}
					return tritonOptions(mc, mo, err)
				}})
		}
	}
	return r.tritonSpecs(cfg, specs), nil
}

// fingerprint hashes a model version's configuration and the contents of its files.
func (r *repository) fingerprint(m configs.Model) (string, error) {
	h := sha256.New()
	y, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	h.Write(y)
	files := []string{m.Path, m.Labels}
	if m.Triton != nil {
		files = append(files, m.Triton.ConfigFile) // what .../config answers, every field of it
	}
	for _, p := range files {
		if p == "" { // no label file: the labels come from the model's metadata or indices
			continue
		}
		sum, err := r.fileSum(p)
		if err != nil {
			return "", err
		}
		h.Write([]byte(sum))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileSum is a file's sha256, cached by its size and modification time.
func (r *repository) fileSum(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		// A device (/dev/zero), a FIFO or a directory: hashing it would never end, or block.
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	r.mu.Lock()
	if r.hashes == nil {
		r.hashes = map[string]fileHash{}
	}
	c, ok := r.hashes[path]
	r.mu.Unlock()
	if ok && c.size == st.Size() && c.mtime.Equal(st.ModTime()) {
		return c.sum, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	r.mu.Lock()
	r.hashes[path] = fileHash{size: st.Size(), mtime: st.ModTime(), sum: sum}
	r.mu.Unlock()
	return sum, nil
}

// poll reloads the server when the repository's specs change (repository.poll).
func (r *repository) poll(srv *gateway.Server, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	if specs, err := r.Specs(); err == nil {
		r.last = digest(specs)
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		specs, err := r.Specs()
		if err != nil {
			r.log.Warn("repository poll: cannot read the repository", "err", err)
			continue
		}
		d := digest(specs)
		r.mu.Lock()
		changed := d != r.last
		r.last = d
		r.mu.Unlock()
		if changed {
			start := time.Now()
			if err := srv.Reload(); err != nil {
				r.log.Error("reload failed: what was served is still served", "by", "repository.poll", "took", time.Since(start).Round(time.Millisecond), "err", err)
			} else {
				r.log.Info("reloaded", "by", "repository.poll", "took", time.Since(start).Round(time.Millisecond))
			}
		}
	}
}

// digest sums what the specs name, to notice a change.
func digest(specs []gateway.ModelSpec) string {
	h := sha256.New()
	for _, s := range specs {
		fmt.Fprintf(h, "%s\x00%s\x00%s\n", s.Name, s.Version, s.Fingerprint)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// noteChoice records the max_batch_size auto chose for a model version (-check prints it).
func (r *repository) noteChoice(name, version string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.chosen == nil {
		r.chosen = map[string]map[string]int{}
	}
	if r.chosen[name] == nil {
		r.chosen[name] = map[string]int{}
	}
	r.chosen[name][version] = n
}

// choices says what auto chose for a model's versions: "; max_batch_size auto: 4 (version
// 1)", or "" when none was chosen.
func (r *repository) choices(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, v := range slices.Sorted(maps.Keys(r.chosen[name])) {
		out = append(out, fmt.Sprintf("%d (version %s)", r.chosen[name][v], v))
	}
	if len(out) == 0 {
		return ""
	}
	return "; max_batch_size auto: " + strings.Join(out, ", ")
}
