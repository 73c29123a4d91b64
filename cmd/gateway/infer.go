package main

import (
	"log/slog"
	"strings"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/runtime/ort"
)

// completeModel fills what m's configuration leaves empty from the model file, through
// ONNX Runtime (configs.Model.Complete).
func completeModel(m *configs.Model, server configs.Server) (configs.Completion, error) {
	info, err := ort.Describe(m.Path)
	if err != nil {
		return configs.Completion{}, err
	}
	return m.Complete(modelFacts(info), server)
}

func modelFacts(info ort.ModelInfo) configs.ModelFacts {
	conv := func(ts []ort.TensorInfo) []configs.TensorFacts {
		out := make([]configs.TensorFacts, len(ts))
		for i, t := range ts {
			out[i] = configs.TensorFacts{Name: t.Name, Type: t.Type, Shape: t.Shape}
		}
		return out
	}
	return configs.ModelFacts{Inputs: conv(info.Inputs), Outputs: conv(info.Outputs), Metadata: info.Metadata}
}

// logSettings logs, once per model version loaded, where each of its settings came from: one
// attribute per source (from_model="input.name=input, input.width=224, ..."), then a warning
// for each thing the model asked that the gateway does not do.
func logSettings(log *slog.Logger, name, version string, c configs.Completion) {
	groups := map[string][]string{}
	for _, s := range c.Settings {
		kind, detail, _ := strings.Cut(s.Source, " ")
		kind = strings.TrimSuffix(kind, ":")
		v := s.Key + "=" + s.Value
		if detail != "" {
			v += " (" + detail + ")"
		}
		groups[kind] = append(groups[kind], v)
	}
	args := []any{"model", name, "version", version}
	for _, g := range []struct{ kind, attr string }{{"yaml", "from_yaml"}, {"config.pbtxt", "from_config_pbtxt"}, {"flag", "from_flags"}, {"model", "from_model"},
		{"metadata", "from_metadata"}, {"file", "from_file"}, {"default", "defaults"}} {
		if vs := groups[g.kind]; len(vs) > 0 {
			args = append(args, g.attr, strings.Join(vs, ", "))
		}
	}
	log.Info("model settings", args...)
	for _, w := range c.Warnings {
		log.Warn("model "+name+": "+w, "model", name, "version", version)
	}
}

// parameters are the settings as GET /v2/models/{m}/config shows them: "224 (model)".
func parameters(c configs.Completion) map[string]string {
	p := make(map[string]string, len(c.Settings))
	for _, s := range c.Settings {
		p[s.Key] = s.Value + " (" + s.Source + ")"
	}
	return p
}
