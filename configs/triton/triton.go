package triton

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/imagegate/imagegate/api/inference"
)

// ConfigFile is the name of a model folder's configuration, as Triton names it.
const ConfigFile = "config.pbtxt"

// MaxConfigBytes bounds a config.pbtxt (Triton's are a few KiB; a label list belongs in a
// label file).
const MaxConfigBytes = 1 << 20

// Platform and Backend are what a served model's configuration may name (or leave empty).
const (
	Platform = "onnxruntime_onnx"
	Backend  = "onnxruntime"
)

// Read parses the config.pbtxt at path with Triton's schema. An unknown field is an error
// naming its line, as Triton's own parser makes it.
func Read(path string) (*inference.ModelConfig, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%s has more than the %d bytes allowed", path, MaxConfigBytes)
	}
	return Parse(data)
}

// Parse reads a config.pbtxt's text.
func Parse(data []byte) (*inference.ModelConfig, error) {
	var c inference.ModelConfig
	if err := prototext.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("cannot parse as Triton's ModelConfig (protobuf text format): %w", err)
	}
	return &c, nil
}

// Options say how Map maps a configuration.
type Options struct {
	// ModelKey reports whether a dotted key ("preprocess.mean", "task") names a key of a
	// model in the gateway's YAML configuration: a parameter of that name sets it.
	ModelKey func(key string) bool
	// Strict makes a field that is set and not honoured an error, not a warning.
	Strict bool
}

// Mapped is a model's configuration mapped onto the gateway's.
type Mapped struct {
	// Keys is the model's mapping in the YAML configuration's shape (nested maps), without
	// name and path.
	Keys map[string]any
	// From says, for each dotted key set, what set it ("max_batch_size",
	// "parameters[preprocess.mean]").
	From map[string]string
	// Unhonoured names each field that is set and that the gateway does not honour (or not
	// wholly), with why: one start-up warning lists them (an error with Options.Strict).
	Unhonoured []string
	// ModelFilename is default_model_filename, "" when not set: the version folders' file.
	ModelFilename string
}

// Map maps c, the configuration of the model in folder dir, onto the gateway's model keys. It
// refuses, naming the field, what the gateway cannot serve faithfully: another platform or
// backend, a name that is not the folder's, several inputs, an input that is not an image,
// sequence batching, ensembles, decoupled models, batch inputs and outputs.
func Map(c *inference.ModelConfig, dir string, o Options) (Mapped, error) {
	m := &mapper{c: c, dir: dir, o: o, out: Mapped{Keys: map[string]any{}, From: map[string]string{}}}
	m.refusals()
	if len(m.errs) > 0 {
		return Mapped{}, errors.Join(m.errs...)
	}
	m.input()
	m.output()
	m.batching()
	m.versions()
	m.instances()
	m.parameters()
	m.notHonoured(c.ProtoReflect(), "")
	if m.o.Strict && len(m.out.Unhonoured) > 0 {
		m.errs = append(m.errs, fmt.Errorf("fields the gateway does not honour (strict): %s", strings.Join(m.out.Unhonoured, "; ")))
	}
	if len(m.errs) > 0 {
		return Mapped{}, errors.Join(m.errs...)
	}
	if f := c.DefaultModelFilename; f != "" {
		m.out.ModelFilename = f
	}
	return m.out, nil
}

type mapper struct {
	c    *inference.ModelConfig
	dir  string
	o    Options
	out  Mapped
	errs []error
}

func (m *mapper) refuse(field, format string, args ...any) {
	m.errs = append(m.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (m *mapper) warn(format string, args ...any) {
	m.out.Unhonoured = append(m.out.Unhonoured, fmt.Sprintf(format, args...))
}

// set sets a dotted key of the mapping to v, from what (a field of config.pbtxt).
func (m *mapper) set(key string, v any, from string) {
	node := m.out.Keys
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := node[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			node[p] = next
		}
		node = next
	}
	node[parts[len(parts)-1]] = v
	m.out.From[key] = from
}

func (m *mapper) refusals() {
	c, name := m.c, filepath.Base(m.dir)
	if c.Name != "" && c.Name != name {
		m.refuse("name", "%q is not the model's folder name %q (Triton requires them to be the same)", c.Name, name)
	}
	if c.Platform != "" && c.Platform != Platform {
		m.refuse("platform", "%q is not served: the gateway serves ONNX models, platform %s (backend %s)", c.Platform, Platform, Backend)
	}
	if c.Backend != "" && c.Backend != Backend {
		m.refuse("backend", "%q is not served: the gateway serves ONNX models, backend %s (platform %s)", c.Backend, Backend, Platform)
	}
	switch c.SchedulingChoice.(type) {
	case *inference.ModelConfig_SequenceBatching:
		m.refuse("sequence_batching", "stateful sequence models are not served (dynamic_batching is)")
	case *inference.ModelConfig_EnsembleScheduling:
		m.refuse("ensemble_scheduling", "ensembles are not served")
	}
	if c.GetModelTransactionPolicy().GetDecoupled() {
		m.refuse("model_transaction_policy.decoupled", "decoupled models (several responses per request) are not served")
	}
	if len(c.BatchInput) > 0 {
		m.refuse("batch_input", "the gateway feeds a model its image input alone")
	}
	if len(c.BatchOutput) > 0 {
		m.refuse("batch_output", "the gateway reads a model's outputs as they are")
	}
	if c.MaxBatchSize < 0 {
		m.refuse("max_batch_size", "must not be negative, got %d", c.MaxBatchSize)
	}
	if len(c.Input) > 1 {
		names := make([]string, len(c.Input))
		for i, in := range c.Input {
			names[i] = in.Name
		}
		m.refuse("input", "%d inputs (%s): the gateway serves models with a single image input", len(c.Input), strings.Join(names, ", "))
	}
}

// input maps the image input: its name, element type, layout and size.
func (m *mapper) input() {
	if len(m.c.Input) != 1 {
		return
	}
	in := m.c.Input[0]
	if in.Name != "" {
		m.set("input.name", in.Name, "input[0].name")
	}
	switch in.DataType {
	case inference.DataType_TYPE_INVALID:
	case inference.DataType_TYPE_FP32:
		m.set("input.type", "float32", "input[0].data_type")
	case inference.DataType_TYPE_UINT8:
		m.set("input.type", "uint8", "input[0].data_type")
	default:
		m.refuse("input[0].data_type", "%s: the gateway feeds images as TYPE_FP32 or TYPE_UINT8", in.DataType)
	}
	layout := map[inference.ModelInput_Format]string{inference.ModelInput_FORMAT_NCHW: "NCHW", inference.ModelInput_FORMAT_NHWC: "NHWC"}[in.Format]
	dims := in.Dims
	if m.c.MaxBatchSize == 0 && len(dims) == 4 {
		// No max_batch_size: the dims are the whole shape, the batch axis first.
		if dims[0] == 1 {
			m.set("batching.max_batch_size", 1, "input[0].dims (max_batch_size 0)")
		}
		dims = dims[1:]
	}
	if len(dims) > 0 {
		if len(dims) != 3 {
			m.refuse("input[0].dims", "%v is not an image's [3, height, width] (FORMAT_NCHW) or [height, width, 3] (FORMAT_NHWC), without the batch axis", in.Dims)
			return
		}
		if layout == "" {
			switch {
			case dims[0] == 3 && dims[2] != 3:
				layout = "NCHW"
			case dims[2] == 3 && dims[0] != 3:
				layout = "NHWC"
			case dims[0] > 0 && dims[2] > 0 && dims[0] != 3 && dims[2] != 3:
				m.refuse("input[0].dims", "%v has no axis of 3 channels, first or last: the gateway feeds RGB images", in.Dims)
				return
			}
		}
		if layout != "" {
			ch, h, w := dims[0], dims[1], dims[2]
			if layout == "NHWC" {
				h, w, ch = dims[0], dims[1], dims[2]
			}
			if ch != 3 && ch != -1 {
				m.refuse("input[0].dims", "%v in %s has %d channels: the gateway feeds RGB images", in.Dims, layout, ch)
				return
			}
			if w > 0 {
				m.set("input.width", int(w), "input[0].dims")
			}
			if h > 0 {
				m.set("input.height", int(h), "input[0].dims")
			}
		}
	}
	if layout != "" {
		from := "input[0].format"
		if in.Format == inference.ModelInput_FORMAT_NONE {
			from = "input[0].dims"
		}
		m.set("input.layout", layout, from)
	}
}

// ServedOutput is the output the gateway reads scores from: the only one listed, else the
// only one with a label_filename; nil when the configuration does not tell (the model's
// only [batch, classes] output is then served, configs.Model.Complete).
func ServedOutput(c *inference.ModelConfig) *inference.ModelOutput {
	if len(c.Output) == 1 {
		return c.Output[0]
	}
	var labeled *inference.ModelOutput
	for _, o := range c.Output {
		if o.LabelFilename != "" {
			if labeled != nil {
				return nil
			}
			labeled = o
		}
	}
	return labeled
}

func (m *mapper) output() {
	served := ServedOutput(m.c)
	for i, o := range m.c.Output {
		if o.LabelFilename != "" && o != served {
			m.warn("output[%d].label_filename (the labels of the output served, %s, name the classes)", i, servedName(served))
		}
	}
	if served == nil {
		return
	}
	if served.Name != "" {
		m.set("output.name", served.Name, "output.name")
	}
	if lf := served.LabelFilename; lf != "" {
		if !filepath.IsAbs(lf) {
			lf = filepath.Join(m.dir, lf)
		}
		m.set("labels", lf, "output.label_filename")
	}
}

func servedName(o *inference.ModelOutput) string {
	if o == nil {
		return "the model's only [batch, classes] output"
	}
	return o.Name
}

// micros writes a count of microseconds as a duration key's value.
func micros(us uint64) string { return strconv.FormatUint(us, 10) + "us" }

func (m *mapper) batching() {
	c := m.c
	if c.MaxBatchSize > 0 {
		m.set("batching.max_batch_size", int(c.MaxBatchSize), "max_batch_size")
	}
	db := c.GetDynamicBatching()
	if db == nil {
		if c.SchedulingChoice == nil {
			m.warn("no dynamic_batching (Triton's default scheduler runs each request alone; the gateway batches concurrent requests)")
		}
		return
	}
	if len(db.PreferredBatchSize) > 0 {
		sizes := make([]int, len(db.PreferredBatchSize))
		for i, s := range db.PreferredBatchSize {
			sizes[i] = int(s)
		}
		m.set("batching.preferred_batch_sizes", sizes, "dynamic_batching.preferred_batch_size")
	}
	// Triton's delay 0 batches what is queued without waiting: the gateway's fixed window of 0
	// (requests queued during a run form the next batch), not its adaptive window.
	m.set("batching.max_queue_delay", micros(db.MaxQueueDelayMicroseconds), "dynamic_batching.max_queue_delay_microseconds")
	if n := db.PriorityLevels; n > 0 {
		if n > 16 {
			m.refuse("dynamic_batching.priority_levels", "%d: the gateway serves at most 16 levels", n)
		} else {
			m.set("batching.priorities", int(n), "dynamic_batching.priority_levels")
			if n > 1 {
				m.warn("dynamic_batching.priority_levels (served as %d levels, but a request's priority counts the other way: 0 is the lowest level, where Triton's 1 is the highest)", n)
			}
		}
	}
	if qp := db.DefaultQueuePolicy; qp != nil {
		if qp.MaxQueueSize > 0 {
			m.set("batching.max_queue_size", int(qp.MaxQueueSize), "dynamic_batching.default_queue_policy.max_queue_size")
		}
		if t := qp.DefaultTimeoutMicroseconds; t > 0 {
			m.set("batching.default_timeout", micros(t), "dynamic_batching.default_queue_policy.default_timeout_microseconds")
			if !qp.AllowTimeoutOverride {
				m.warn("dynamic_batching.default_queue_policy.allow_timeout_override false (a request may still shorten its deadline: X-Request-Timeout, the gRPC deadline)")
			}
		}
		if qp.TimeoutAction == inference.ModelQueuePolicy_DELAY {
			m.warn("dynamic_batching.default_queue_policy.timeout_action DELAY (a request whose timeout ends is answered 504, as REJECT)")
		}
	}
}

func (m *mapper) versions() {
	switch p := m.c.GetVersionPolicy().GetPolicyChoice().(type) {
	case *inference.ModelVersionPolicy_Latest_:
		if n := p.Latest.GetNumVersions(); n > 0 {
			m.set("version_policy.latest", int(n), "version_policy.latest.num_versions")
		}
	case *inference.ModelVersionPolicy_All_:
		m.set("version_policy.all", true, "version_policy.all")
	case *inference.ModelVersionPolicy_Specific_:
		vs := make([]int, len(p.Specific.GetVersions()))
		for i, v := range p.Specific.GetVersions() {
			vs[i] = int(v)
		}
		m.set("version_policy.specific", vs, "version_policy.specific.versions")
	}
}

func (m *mapper) instances() {
	n := 0
	for i, g := range m.c.InstanceGroup {
		count := int(g.Count)
		if count == 0 {
			count = 1 // Triton's default
		}
		n += count
		switch g.Kind {
		case inference.ModelInstanceGroup_KIND_AUTO, inference.ModelInstanceGroup_KIND_CPU:
		default:
			m.warn("instance_group[%d].kind %s (instances run on runtime.execution_provider, the CPU by default; parameters {key: \"runtime.execution_provider\" value: {string_value: \"cuda\"}} asks ONNX Runtime's CUDA provider)", i, g.Kind)
		}
	}
	if n > 0 {
		m.set("runtime.instances", n, "instance_group.count")
	}
}

// backendParameters are the ONNX Runtime backend's parameters of Triton that the gateway
// has a key for (a value of 0 is ONNX Runtime's default: the gateway's default is kept).
var backendParameters = map[string]string{
	"intra_op_thread_count": "runtime.intra_op_threads",
	"inter_op_thread_count": "runtime.inter_op_threads",
}

// parameters maps each parameter whose key names a key of the gateway's model (or one of
// Triton's ONNX Runtime parameters the gateway has a key for) onto that key; its string value
// is read as YAML ("224", "[0.5, 0.5, 0.5]", "auto").
func (m *mapper) parameters() {
	keys := make([]string, 0, len(m.c.Parameters))
	for k := range m.c.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		raw := m.c.Parameters[k].GetStringValue()
		field := "parameters[" + k + "]"
		if key, ok := backendParameters[k]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(raw))
			switch {
			case err != nil || n < 0:
				m.refuse(field, "%q is not a thread count", raw)
			case n > 0:
				m.set(key, n, field)
			}
			continue
		}
		if k == "name" || k == "path" || m.o.ModelKey == nil || !m.o.ModelKey(k) {
			m.warn("%s (no key of the gateway's model has this name)", field)
			continue
		}
		var v any
		if err := yaml.Unmarshal([]byte(raw), &v); err != nil || v == nil {
			v = raw
		}
		m.set(k, v, field)
	}
}

// handled are the fields Map reads; the walk names every other field that is set. A name
// ending in "." is a message whose fields are walked (the ones not listed are named).
var handled = map[string]bool{
	"name": true, "platform": true, "backend": true, "max_batch_size": true, "version_policy": true,
	"default_model_filename": true, "parameters": true,
	"input.": true, "input.name": true, "input.data_type": true, "input.format": true, "input.dims": true,
	"output.": true, "output.name": true, "output.data_type": true, "output.dims": true, "output.label_filename": true,
	"instance_group.": true, "instance_group.name": true, "instance_group.count": true, "instance_group.kind": true,
	"dynamic_batching.": true, "dynamic_batching.preferred_batch_size": true, "dynamic_batching.max_queue_delay_microseconds": true,
	"dynamic_batching.priority_levels":       true,
	"dynamic_batching.default_queue_policy.": true, "dynamic_batching.default_queue_policy.max_queue_size": true,
	"dynamic_batching.default_queue_policy.default_timeout_microseconds": true,
	"dynamic_batching.default_queue_policy.allow_timeout_override":       true,
	"dynamic_batching.default_queue_policy.timeout_action":               true,
	// Refused when they mean anything (refusals).
	"sequence_batching": true, "ensemble_scheduling": true, "batch_input": true, "batch_output": true,
	"model_transaction_policy.": true, "model_transaction_policy.decoupled": true,
}

// refused are the fields Map refuses (when set to what the gateway cannot serve: another
// platform, several inputs...), as docs/triton.md lists them.
var refused = []string{"name", "platform", "backend", "max_batch_size", "input", "input.data_type", "input.dims",
	"sequence_batching", "ensemble_scheduling", "model_transaction_policy.decoupled", "batch_input", "batch_output",
	"dynamic_batching.priority_levels", "parameters"}

// Honoured lists the fields of config.pbtxt that Map reads; Refused those it refuses when
// they ask what the gateway cannot serve; Named the fields it names in its warning with what
// the gateway does instead. docs/triton.md's tables are held to them.
func Honoured() []string {
	var out []string
	for k := range handled {
		if !strings.HasSuffix(k, ".") && !slices.Contains([]string{"sequence_batching", "ensemble_scheduling", "batch_input", "batch_output", "model_transaction_policy.decoupled"}, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Refused: see Honoured.
func Refused() []string { return slices.Sorted(slices.Values(refused)) }

// Named: see Honoured.
func Named() map[string]string { return maps.Clone(why) }

// why says what the gateway does instead, for fields that are commonly set.
var why = map[string]string{
	"model_warmup":                            "each instance is warmed with one run at its full batch before it takes traffic",
	"optimization":                            "parameters runtime.graph_optimization and runtime.execution_provider set ONNX Runtime's",
	"response_cache":                          "answers are not cached",
	"dynamic_batching.preserve_ordering":      "each request is answered as soon as its batch has run",
	"dynamic_batching.default_priority_level": "a request without a priority gets level 0, the lowest",
	"dynamic_batching.priority_queue_policy":  "every level has the model's queue policy",
	"instance_group.gpus":                     "instances run on runtime.execution_provider",
	"input.reshape":                           "the image fills the input as dims say",
	"output.reshape":                          "scores are read as [batch, classes]",
	"runtime":                                 "the gateway runs ONNX Runtime",
	"metric_tags":                             "metrics are labelled with the model and version",
	"model_metrics":                           "docs/metrics.md lists the gateway's",
}

// notHonoured names every field set in msg (at path) that Map does not read.
func (m *mapper) notHonoured(msg protoreflect.Message, path string) {
	var names []string
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := path + string(fd.Name())
		switch {
		case handled[name]:
		case handled[name+"."] && fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			if fd.IsList() {
				for i := range v.List().Len() {
					m.notHonouredIn(v.List().Get(i).Message(), name+".", fmt.Sprintf("%s[%d].", name, i))
				}
			} else {
				m.notHonouredIn(v.Message(), name+".", name+".")
			}
		default:
			names = append(names, name)
		}
		return true
	})
	slices.Sort(names)
	for _, n := range names {
		m.notHonoured1(n, n)
	}
}

// notHonouredIn walks a message whose fields are looked up under key and named under shown
// (with a list element's index).
func (m *mapper) notHonouredIn(msg protoreflect.Message, key, shown string) {
	var names []string
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		k := key + string(fd.Name())
		switch {
		case handled[k]:
		case handled[k+"."] && fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && !fd.IsList():
			m.notHonouredIn(v.Message(), k+".", shown+string(fd.Name())+".")
		default:
			names = append(names, string(fd.Name()))
		}
		return true
	})
	slices.Sort(names)
	for _, n := range names {
		m.notHonoured1(key+n, shown+n)
	}
}

func (m *mapper) notHonoured1(key, shown string) {
	if w, ok := why[key]; ok {
		m.warn("%s (%s)", shown, w)
		return
	}
	m.warn("%s", shown)
}
