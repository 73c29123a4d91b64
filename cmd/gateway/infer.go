package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/imagegate/imagegate/configs"
	"github.com/imagegate/imagegate/gateway"
	"github.com/imagegate/imagegate/postprocess"
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
	for _, s := range c.Settings {
		if s.Key == "batching.max_batch_size" && s.Source == "model" && s.Value == "1" {
			// Many exported detectors are: every image is a run of its own.
			log.Info("the model's batch axis is fixed at 1: it is served with batches of one", "model", name, "version", version)
		}
	}
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

// taskOptions translates the completed model's task into the gateway's options: an embedding's
// normalization; a detector's decoder (checked here, so that a configuration it cannot use
// fails with the keys to change) and its selection's defaults.
func taskOptions(mo *gateway.ModelOptions, m configs.Model, comp configs.Completion) error {
	switch m.Task {
	case configs.TaskEmbed:
		mo.Task, mo.Normalize = gateway.TaskEmbed, m.Embed.Normalize
	case configs.TaskDetect:
		mo.Task = gateway.TaskDetect
		d, f := m.Detect, comp.Detect
		kind, err := postprocess.ParseKind(d.Decoder)
		if err != nil {
			return fmt.Errorf("%s.detect.decoder: %w", m.Field(), err)
		}
		format, err := postprocess.ParseBoxFormat(d.BoxFormat)
		if err != nil {
			return fmt.Errorf("%s.detect.box_format: %w", m.Field(), err)
		}
		dec := postprocess.Decoder{Kind: kind, Anchors: f.Anchors, Classes: f.Classes, Format: format,
			Normalized: d.BoxUnits == "normalized", Background: d.Background == "on", Objectness: d.Objectness == "on",
			Transposed: f.Transposed, Packed: f.Packed, InputWidth: m.Input.Width, InputHeight: m.Input.Height}
		if err := dec.Check(); err != nil {
			return fmt.Errorf("%s.detect: %w", m.Field(), err)
		}
		p := postprocess.Params{ScoreThreshold: float32(d.ScoreThreshold), IOUThreshold: float32(d.IOUThreshold),
			MaxDetections: d.MaxDetections, ClassAgnostic: d.ClassAgnostic}
		if err := p.Check(); err != nil {
			return fmt.Errorf("%s.detect.%w", m.Field(), err)
		}
		mo.Detect = gateway.DetectOptions{Decoder: dec, Params: p, Boxes: d.Boxes, Scores: d.Scores, Classes: d.Classes, Count: d.Count}
	}
	return nil
}
