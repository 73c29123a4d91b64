package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/runtime/ort"
)

// printConfig writes the effective configuration (-print-config): every default filled in,
// the flags and environment applied, and each model completed from its file (its newest
// version's, for a repository folder) as the server would. What cannot be read from a model
// is left empty, and a comment says why. The output parses back to the same values.
func printConfig(w io.Writer, cfg *configs.Config, from string) error {
	notes := []string{
		"The effective configuration of the gateway, from " + from + " (bin/gateway -print-config):",
		"every default filled in, and the keys a model tells taken from its file.",
	}
	lib := ort.FindLibrary(cfg.ONNXRuntime.Library)
	ortErr := ort.Init(lib)
	for i := range cfg.Models {
		m := &cfg.Models[i]
		note, err := completeForPrint(m, cfg.Server, ortErr)
		if err != nil {
			note = fmt.Sprintf("%s: the keys its model tells are left empty: %v", m.Field(), err)
		}
		notes = append(notes, note+tritonNote(m))
	}
	out, err := cfg.Marshal()
	if err != nil {
		return err
	}
	for _, n := range notes {
		for _, line := range strings.Split(n, "\n") {
			fmt.Fprintf(w, "# %s\n", line)
		}
	}
	_, err = w.Write(out)
	return err
}

// completeForPrint completes m from its newest version's file and copies what was filled
// into m, keeping m's path (a repository folder stays one).
func completeForPrint(m *configs.Model, server configs.Server, ortErr error) (string, error) {
	if ortErr != nil {
		return "", ortErr
	}
	versions, err := m.Versions()
	if err != nil {
		return "", err
	}
	v := versions[len(versions)-1]
	mv := m.ForVersion(v)
	comp, err := completeModel(&mv, server)
	if err != nil {
		return "", err
	}
	m.Input, m.Output, m.Preprocess, m.Batching = mv.Input, mv.Output, mv.Preprocess, mv.Batching
	note := fmt.Sprintf("%s: completed from %s", m.Field(), v.Path)
	if len(versions) > 1 || v.Path != m.Path {
		note += fmt.Sprintf(" (version %s)", v.Version)
	}
	if mv.Batching.MaxBatchSize.Auto() {
		choice, err := printChoice(mv, server)
		if err != nil {
			return "", err
		}
		note += "; " + choice
	}
	switch {
	case comp.Labels != nil:
		note += fmt.Sprintf("; labels: %s (not a file: left empty)", labelsSource(comp))
	case v.Path == m.Path && m.Labels == "":
		m.Labels = v.Labels // the file found beside the model
	}
	return note, nil
}

func labelsSource(c configs.Completion) string {
	for _, s := range c.Settings {
		if s.Key == "labels" {
			return s.Value + " from " + s.Source
		}
	}
	return "none"
}
