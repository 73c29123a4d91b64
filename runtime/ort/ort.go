package ort

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	onnx "github.com/yalue/onnxruntime_go"
	"golang.org/x/sys/cpu"
)

var (
	initMu   sync.Mutex
	initPath string
)

// Init loads the ONNX Runtime shared library at libPath and creates the process-wide
// environment. Later calls with the same path are no-ops; a different path is an error.
func Init(libPath string) error {
	initMu.Lock()
	defer initMu.Unlock()
	if onnx.IsInitialized() {
		if libPath != initPath {
			return fmt.Errorf("ort: already initialized with %s, cannot switch to %s", initPath, libPath)
		}
		return nil
	}
	if _, err := os.Stat(libPath); err != nil && filepath.IsAbs(libPath) {
		return fmt.Errorf("ort: cannot find the ONNX Runtime library: %w (run scripts/setup-onnxruntime.sh or set onnxruntime.library)", err)
	}
	onnx.SetSharedLibraryPath(libPath)
	if err := onnx.InitializeEnvironment(onnx.WithLogLevelError()); err != nil {
		return fmt.Errorf("ort: cannot initialize ONNX Runtime from %s: %w", libPath, err)
	}
	initPath = libPath
	return nil
}

// Version returns the loaded ONNX Runtime version.
func Version() string { return onnx.GetVersion() }

// FindLibrary picks the ONNX Runtime library: explicit (a config value) if set, else the
// ONNXRUNTIME_LIB environment variable, else .deps/onnxruntime/libonnxruntime.so in the
// folder above the running binary or in the working folder, else the bare soname for the
// system's search path.
func FindLibrary(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if env := os.Getenv("ONNXRUNTIME_LIB"); env != "" {
		return env
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "..", ".deps", "onnxruntime", "libonnxruntime.so"))
	}
	candidates = append(candidates, filepath.Join(".deps", "onnxruntime", "libonnxruntime.so"),
		"/usr/local/lib/libonnxruntime.so", "/usr/lib/libonnxruntime.so")
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			if abs, err := filepath.Abs(c); err == nil {
				return abs
			}
			return c
		}
	}
	return "libonnxruntime.so"
}

// TensorInfo describes one model input or output.
type TensorInfo struct {
	Name  string
	Type  string  // "float32", "uint8", …
	Shape []int64 // -1 for a dynamic dimension
}

func (t TensorInfo) String() string { return fmt.Sprintf("%s %s %v", t.Name, t.Type, t.Shape) }

// Inspect reads a model's inputs and outputs without creating a session for serving.
func Inspect(path string) (inputs, outputs []TensorInfo, err error) {
	in, out, err := onnx.GetInputOutputInfo(path)
	if err != nil {
		return nil, nil, fmt.Errorf("ort: cannot read model %s: %w", path, err)
	}
	conv := func(infos []onnx.InputOutputInfo) []TensorInfo {
		r := make([]TensorInfo, len(infos))
		for i, x := range infos {
			r[i] = TensorInfo{Name: x.Name, Type: typeName(x.DataType), Shape: append([]int64(nil), x.Dimensions...)}
		}
		return r
	}
	return conv(in), conv(out), nil
}

func typeName(t onnx.TensorElementDataType) string {
	switch t {
	case onnx.TensorElementDataTypeFloat:
		return "float32"
	case onnx.TensorElementDataTypeUint8:
		return "uint8"
	case onnx.TensorElementDataTypeInt8:
		return "int8"
	case onnx.TensorElementDataTypeFloat16:
		return "float16"
	case onnx.TensorElementDataTypeInt64:
		return "int64"
	case onnx.TensorElementDataTypeInt32:
		return "int32"
	case onnx.TensorElementDataTypeDouble:
		return "float64"
	}
	return t.String()
}

// SessionConfig configures one Session.
type SessionConfig struct {
	ModelPath  string
	InputName  string
	OutputName string
	// OutputNames, when set, are the outputs the session runs instead of OutputName, for
	// models that are not classifiers (an embedding, a detector's boxes and scores): each
	// float32, int64 or int32, of any shape (outputs.go); RunOutputs returns them.
	OutputNames []string
	// InputShape is one sample's shape without the batch axis, e.g. [3,224,224] (NCHW) or
	// [224,224,3] (NHWC).
	InputShape   []int64
	MaxBatchSize int
	IntraOp      int
	InterOp      int
	// GraphOptimization: disabled, basic, extended or all.
	GraphOptimization string
	// OptimizedModelPath, when set, makes ORT write the optimized graph there.
	OptimizedModelPath string
	// Provider: cpu, cuda or tensorrt. cuda and tensorrt need an ORT build with them and a GPU.
	Provider string
	// NoCPUMemArena turns off ONNX Runtime's CPU memory arena: activations are allocated and
	// freed per run (malloc) instead of kept in an arena sized by the largest batch run.
	NoCPUMemArena bool
	// RewriteHardSwish rewrites the model's HardSwish activations so that ONNX Runtime's
	// blocked layout keeps them (rewrite.go). It applies on x86-64 (where that layout is
	// used), with the CPU provider and graph optimization all; elsewhere it is ignored.
	// HardSwishRewritePays tells where it was measured to pay.
	RewriteHardSwish bool
	// CacheDir keeps ONNX Runtime's optimized graph of the model between starts (cache.go): a
	// folder; "auto" for the user's cache folder (os.UserCacheDir)/imagegate; "" or "off" for
	// no cache. A folder that cannot be written costs a warning, never the session.
	CacheDir string
	// Logger receives the cache's warnings; nil: slog.Default().
	Logger *slog.Logger

	trace func(step string) // called after each step of NewSession (BenchmarkStartupSteps)
}

// Elem is the element type of a served model's input: float32, or uint8 for models that take
// raw 0..255 pixels.
type Elem interface{ float32 | uint8 }

// elemName is T's name as TensorInfo.Type spells it.
func elemName[T Elem]() string {
	var z T
	if _, ok := any(z).(uint8); ok {
		return "uint8"
	}
	return "float32"
}

// Session is one ONNX Runtime session with input and output buffers for MaxBatchSize rows; T is
// the model input's element type. It is not safe for concurrent use; Share gives another
// Session over the same ONNX Runtime session for another goroutine. Close releases it.
type Session[T Elem] struct {
	core     *sessionCore
	in       []T
	out      []float32
	inViews  []onnx.Value // index n-1: the first n rows
	outViews []*onnx.Tensor[float32]
	inShape  []int64
	rowIn    int
	classes  int
	inputs   []onnx.Value
	outputs  []onnx.Value
	// multi holds the outputs of a session made with OutputNames (nil: the classifier's one).
	multi *multiOut
}

// sessionCore is an ONNX Runtime session shared by the Sessions made from it with Share; the
// last Close destroys it.
type sessionCore struct {
	sess *onnx.DynamicAdvancedSession
	mu   sync.Mutex
	refs int
	// rewrites: HardSwish sites rewritten before ONNX Runtime loaded the model.
	rewrites int
	// mapped is the cache entry the session reads its graph and weights from, unmapped after
	// the session is destroyed; cache says how the session was made (cacheHit, …).
	mapped []byte
	cache  string
}

func (c *sessionCore) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs--; c.refs > 0 {
		return nil
	}
	err := c.sess.Destroy()
	c.sess = nil
	if c.mapped != nil {
		if uerr := unmapFile(c.mapped); err == nil {
			err = uerr
		}
		c.mapped = nil
	}
	trimHeap()
	return err
}

// ErrModel is returned when a model does not match its configuration.
var ErrModel = errors.New("ort: model does not match its configuration")

// InputType returns the element type ("float32", "uint8", …) of the model's input named name.
func InputType(path, name string) (string, error) {
	// The inputs as declared are ONNX Runtime's (shape inference refines outputs only).
	if s, err := scanModel(path, false); err == nil {
		if in, ok := find(s.inputs, name); ok && in.Type != "" {
			return in.Type, nil
		}
	}
	ins, _, err := Inspect(path)
	if err != nil {
		return "", err
	}
	in, ok := find(ins, name)
	if !ok {
		return "", fmt.Errorf("%w: %s has no input %q (inputs: %v)", ErrModel, path, name, ins)
	}
	return in.Type, nil
}

// NewSession checks the model against cfg and T and creates a session.
func NewSession[T Elem](cfg SessionConfig) (*Session[T], error) {
	if cfg.MaxBatchSize < 1 {
		return nil, fmt.Errorf("ort: max batch size must be positive, got %d", cfg.MaxBatchSize)
	}
	m, err := checkModel[T](cfg, cacheWanted(cfg))
	if err != nil {
		return nil, err
	}
	if m.batchAxis != -1 && (m.batchAxis != 1 || cfg.MaxBatchSize > 1) {
		return nil, m.fixedBatchError(cfg)
	}
	core, err := newCore(cfg, m.scan)
	if err != nil {
		return nil, err
	}
	return instance[T](core, cfg, m, cfg.MaxBatchSize), nil
}

// checkedModel is what checkModel learns of a model that matches its configuration.
type checkedModel struct {
	scan      *modelScan // nil when the file could not be scanned (ONNX Runtime read it)
	input     TensorInfo
	batchAxis int64        // the input's batch axis: -1 when dynamic
	rowIn     int          // input values per row
	classes   int          // the output's scores per row (cfg.OutputName)
	specs     []OutputSpec // the outputs cfg.OutputNames names, when it names any
}

// checkModel checks cfg's model against cfg and T, all but its batch axis against the batch
// size; hash: the scan hashes the file (a cache's key needs it).
func checkModel[T Elem](cfg SessionConfig, hash bool) (checkedModel, error) {
	ins, outs, scan, err := modelIO(cfg.ModelPath, hash, cfg.trace)
	if err != nil {
		return checkedModel{}, err
	}
	in, ok := find(ins, cfg.InputName)
	if !ok {
		return checkedModel{}, fmt.Errorf("%w: %s has no input %q (inputs: %v)", ErrModel, cfg.ModelPath, cfg.InputName, ins)
	}
	if len(ins) != 1 {
		return checkedModel{}, fmt.Errorf("%w: %s has %d inputs; only single-input models are served (inputs: %v)", ErrModel, cfg.ModelPath, len(ins), ins)
	}
	if in.Type != elemName[T]() {
		return checkedModel{}, fmt.Errorf("%w: input %q is %s, not %s (float32 and uint8 inputs are served)", ErrModel, in.Name, in.Type, elemName[T]())
	}
	if len(in.Shape) != len(cfg.InputShape)+1 {
		return checkedModel{}, fmt.Errorf("%w: input %q has shape %v, want [N %v]", ErrModel, in.Name, in.Shape, cfg.InputShape)
	}
	for i, d := range cfg.InputShape {
		if m := in.Shape[i+1]; m != -1 && m != d {
			return checkedModel{}, fmt.Errorf("%w: input %q has shape %v, the configuration gives [N %v] (check input.width/height/layout)", ErrModel, in.Name, in.Shape, cfg.InputShape)
		}
	}
	rowIn := 1
	for _, d := range cfg.InputShape {
		rowIn *= int(d)
	}
	m := checkedModel{scan: scan, input: in, batchAxis: in.Shape[0], rowIn: rowIn}
	if len(cfg.OutputNames) > 0 {
		if m.specs, err = outputSpecs(cfg, outs, in.Shape[0] == 1); err != nil {
			return checkedModel{}, err
		}
		return m, nil
	}
	out, ok := find(outs, cfg.OutputName)
	if !ok {
		return checkedModel{}, fmt.Errorf("%w: %s has no output %q (outputs: %v)", ErrModel, cfg.ModelPath, cfg.OutputName, outs)
	}
	if out.Type != "float32" {
		return checkedModel{}, fmt.Errorf("%w: output %q is %s; only float32 outputs are served", ErrModel, out.Name, out.Type)
	}
	if len(out.Shape) != 2 || out.Shape[1] < 1 {
		return checkedModel{}, fmt.Errorf("%w: output %q has shape %v; want [N, classes] with a fixed class count", ErrModel, out.Name, out.Shape)
	}
	m.classes = int(out.Shape[1])
	return m, nil
}

// instance makes a session of n rows over core for the model m checked: one output of
// m.classes scores per row, or the outputs m.specs names.
func instance[T Elem](core *sessionCore, cfg SessionConfig, m checkedModel, n int) *Session[T] {
	s := newInstance[T](core, cfg.InputShape, m.rowIn, m.classes, n)
	if m.specs != nil {
		s.multi = newMultiOut(m.specs, n)
		s.outputs = make([]onnx.Value, len(m.specs))
	}
	return s
}

func (m checkedModel) fixedBatchError(cfg SessionConfig) error {
	return fmt.Errorf("%w: input %q has a fixed batch axis of %d; export the model with a dynamic batch axis (or a batch of 1 and batching.max_batch_size: 1)", ErrModel, m.input.Name, m.batchAxis)
}

// outputNames are the outputs cfg's session runs.
func (cfg *SessionConfig) outputNames() []string {
	if len(cfg.OutputNames) > 0 {
		return cfg.OutputNames
	}
	return []string{cfg.OutputName}
}

// modelIO returns a model's inputs and outputs as ONNX Runtime reports them: read from the
// file (scanModel, hashing it when asked) where its declarations say all, else from a
// temporary session (Inspect). scan is nil when the file could not be read as a model (ONNX
// Runtime's error is returned).
func modelIO(path string, hash bool, trace func(string)) (ins, outs []TensorInfo, scan *modelScan, err error) {
	scan, err = scanModel(path, hash)
	step(trace, "scan")
	if err == nil && scan.complete {
		return scan.inputs, scan.outputs, scan, nil
	}
	if err != nil {
		scan = nil
	}
	ins, outs, err = Inspect(path)
	step(trace, "inspect")
	return ins, outs, scan, err
}

func step(trace func(string), name string) {
	if trace != nil {
		trace(name)
	}
}

// newCore makes cfg's ONNX Runtime session: from the model cache's entry when there is one,
// else from the model (rewritten when cfg asks), writing the entry when the cache applies.
func newCore(cfg SessionConfig, scan *modelScan) (*sessionCore, error) {
	cache := openCache(cfg, scan)
	if cache != nil {
		core := cache.load(cfg)
		step(cfg.trace, "cache")
		if core != nil {
			return core, nil
		}
	}
	opts, err := sessionOptions(cfg)
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	tmp := ""
	if cache != nil {
		tmp = cache.begin(opts)
	}
	core, err := createSession(cfg, scan, opts)
	if err != nil && tmp != "" {
		// ONNX Runtime may fail to write some models in its format: once more without.
		os.Remove(tmp)
		tmp = ""
		retry, oerr := sessionOptions(cfg)
		if oerr != nil {
			return nil, oerr
		}
		defer retry.Destroy()
		core, err = createSession(cfg, scan, retry)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case tmp != "" && cache.commit(tmp, core.rewrites, scan) == nil:
		core.cache = cacheWritten
	case cache != nil:
		core.cache = cacheMiss
	}
	step(cfg.trace, "cache write")
	return core, nil
}

// createSession makes cfg's session from the model file, rewritten first when cfg asks or its
// initializers are listed as inputs (scan, when not nil, says).
func createSession(cfg SessionConfig, scan *modelScan, opts *onnx.SessionOptions) (*sessionCore, error) {
	var sess *onnx.DynamicAdvancedSession
	var err error
	data, sites := rewrittenModel(cfg, scan != nil && scan.initInputs > 0)
	step(cfg.trace, "rewrite")
	if data != nil {
		sess, err = onnx.NewDynamicAdvancedSessionWithONNXData(data, []string{cfg.InputName}, cfg.outputNames(), opts)
		if err != nil { // the rewrite never costs a model its session: load it as it is
			sess, sites = nil, 0
		}
	}
	if sess == nil {
		sess, err = onnx.NewDynamicAdvancedSession(cfg.ModelPath, []string{cfg.InputName}, cfg.outputNames(), opts)
	}
	step(cfg.trace, "session")
	if err != nil {
		return nil, fmt.Errorf("ort: cannot create a session for %s: %w", cfg.ModelPath, err)
	}
	return &sessionCore{sess: sess, refs: 1, rewrites: sites}, nil
}

// rewriteModel is rewriteHardSwish (a test replaces it).
var rewriteModel = rewriteHardSwish

// maxRewriteBytes bounds the models read into memory for the HardSwish rewrite (ONNX
// Runtime maps larger ones from their file).
const maxRewriteBytes = 512 << 20

// rewrittenModel returns cfg's model with the initializers it lists as inputs dropped from
// its inputs (initInputs) and its HardSwish sites rewritten (when cfg asks), and how many
// HardSwish sites there were; or nil when neither applies or finds anything to rewrite: the
// session is then made from the file, as ONNX Runtime reads it. A model this parser cannot
// read is left to ONNX Runtime too, which reports what is wrong with it.
func rewrittenModel(cfg SessionConfig, initInputs bool) ([]byte, int) {
	if !rewriteApplies(cfg) && !initInputs {
		return nil, 0
	}
	f, err := os.Open(cfg.ModelPath)
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 || fi.Size() > maxRewriteBytes {
		return nil, 0
	}
	data, err := mapFile(f, int(fi.Size()))
	if err != nil {
		return nil, 0
	}
	defer unmapFile(data) // the rewritten model is a copy (with nothing rewritten, nil is returned)
	var out []byte
	if initInputs {
		if m, n, err := dropInitializerInputs(data); err == nil && n > 0 {
			out, data = m, m
		}
	}
	if !rewriteApplies(cfg) {
		return out, 0
	}
	m, sites, err := rewriteModel(data)
	if err != nil || sites == 0 {
		return out, 0
	}
	return m, sites
}

// rewriteApplies reports whether cfg's session is made from its model with the HardSwish
// rewrite: asked for, on x86-64, the CPU provider and optimization level all.
func rewriteApplies(cfg SessionConfig) bool {
	return cfg.RewriteHardSwish && runtime.GOARCH == "amd64" && (cfg.Provider == "" || cfg.Provider == "cpu") &&
		(cfg.GraphOptimization == "" || cfg.GraphOptimization == "all")
}

// HardSwishRewritePays reports whether the HardSwish rewrite was measured faster on CPUs
// like this one: x86-64 with AVX-512, where ONNX Runtime's blocked layout is 16 channels wide;
// with AVX2 only (8 channels) it ran slower (BenchmarkHardSwishRewrite; docs/internals.md).
func HardSwishRewritePays() bool { return runtime.GOARCH == "amd64" && cpu.X86.HasAVX512F }

// HardSwishRewrites is how many HardSwish sites of the model were rewritten for ONNX
// Runtime's blocked layout (RewriteHardSwish); 0 when the model was loaded as it is.
func (s *Session[T]) HardSwishRewrites() int { return s.core.rewrites }

func newInstance[T Elem](core *sessionCore, inShape []int64, rowIn, classes, maxBatch int) *Session[T] {
	return &Session[T]{
		core:     core,
		inShape:  append([]int64(nil), inShape...),
		rowIn:    rowIn,
		classes:  classes,
		in:       make([]T, rowIn*maxBatch),
		out:      make([]float32, classes*maxBatch),
		inViews:  make([]onnx.Value, maxBatch),
		outViews: make([]*onnx.Tensor[float32], maxBatch),
		inputs:   make([]onnx.Value, 1),
		outputs:  make([]onnx.Value, 1),
	}
}

// Share returns another Session over s's ONNX Runtime session, with input and output buffers
// of its own: the model's weights, prepacked kernels and graph are held once, however many
// instances run it. ONNX Runtime's Run is safe for concurrent calls on one session; with
// intra_op_threads 1 each call runs on its caller's thread. s must not be closed.
func (s *Session[T]) Share() *Session[T] {
	s.core.mu.Lock()
	s.core.refs++
	s.core.mu.Unlock()
	c := newInstance[T](s.core, s.inShape, s.rowIn, s.classes, len(s.inViews))
	if s.multi != nil {
		c.multi = newMultiOut(s.multi.specs, len(s.inViews))
		c.outputs = make([]onnx.Value, len(s.multi.specs))
	}
	return c
}

func find(infos []TensorInfo, name string) (TensorInfo, bool) {
	for _, x := range infos {
		if x.Name == name {
			return x, true
		}
	}
	return TensorInfo{}, false
}

func sessionOptions(cfg SessionConfig) (*onnx.SessionOptions, error) {
	opts, err := onnx.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("ort: cannot create session options: %w", err)
	}
	fail := func(what string, err error) (*onnx.SessionOptions, error) {
		opts.Destroy()
		return nil, fmt.Errorf("ort: cannot set %s: %w", what, err)
	}
	if cfg.IntraOp > 0 {
		if err := opts.SetIntraOpNumThreads(cfg.IntraOp); err != nil {
			return fail("intra_op_threads", err)
		}
	}
	if cfg.InterOp > 0 {
		if err := opts.SetInterOpNumThreads(cfg.InterOp); err != nil {
			return fail("inter_op_threads", err)
		}
	}
	level := onnx.GraphOptimizationLevel(onnx.GraphOptimizationLevelEnableAll)
	switch cfg.GraphOptimization {
	case "disabled":
		level = onnx.GraphOptimizationLevelDisableAll
	case "basic":
		level = onnx.GraphOptimizationLevelEnableBasic
	case "extended":
		level = onnx.GraphOptimizationLevelEnableExtended
	case "", "all":
	default:
		return fail("graph_optimization", fmt.Errorf("unknown level %q", cfg.GraphOptimization))
	}
	if err := opts.SetGraphOptimizationLevel(level); err != nil {
		return fail("graph_optimization", err)
	}
	if cfg.NoCPUMemArena {
		if err := opts.SetCpuMemArena(false); err != nil {
			return fail("cpu_mem_arena", err)
		}
	}
	if cfg.OptimizedModelPath != "" {
		if err := opts.SetOptimizedModelFilePath(cfg.OptimizedModelPath); err != nil {
			return fail("optimized_model_path", err)
		}
	}
	switch cfg.Provider {
	case "", "cpu":
	case "cuda":
		po, err := onnx.NewCUDAProviderOptions()
		if err != nil {
			return fail("execution_provider cuda", err)
		}
		defer po.Destroy()
		if err := opts.AppendExecutionProviderCUDA(po); err != nil {
			return fail("execution_provider cuda", err)
		}
	case "tensorrt":
		po, err := onnx.NewTensorRTProviderOptions()
		if err != nil {
			return fail("execution_provider tensorrt", err)
		}
		defer po.Destroy()
		if err := opts.AppendExecutionProviderTensorRT(po); err != nil {
			return fail("execution_provider tensorrt", err)
		}
	default:
		return fail("execution_provider", fmt.Errorf("unknown provider %q", cfg.Provider))
	}
	return opts, nil
}

// Classes is the number of scores per row.
func (s *Session[T]) Classes() int { return s.classes }

// RowLen is the number of input values per row.
func (s *Session[T]) RowLen() int { return s.rowIn }

// MaxBatchSize is the number of rows the buffers hold.
func (s *Session[T]) MaxBatchSize() int { return len(s.inViews) }

// Input returns row i of the input buffer, to be filled before Run. The slice is owned by the
// session and valid until Close.
func (s *Session[T]) Input(i int) []T {
	return s.in[i*s.rowIn : (i+1)*s.rowIn]
}

// Run runs the model on the first n input rows and returns their scores, n rows of Classes()
// values. The returned slice is owned by the session and overwritten by the next Run. A
// session made with OutputNames answers with RunOutputs instead.
func (s *Session[T]) Run(n int) ([]float32, error) {
	if s.multi != nil {
		return nil, fmt.Errorf("ort: the session runs outputs %v: call RunOutputs", s.multi.names())
	}
	if n < 1 || n > len(s.inViews) {
		return nil, fmt.Errorf("ort: batch of %d rows, the session holds 1 to %d", n, len(s.inViews))
	}
	if s.inViews[n-1] == nil {
		shape := append(onnx.NewShape(int64(n)), s.inShape...)
		in, err := onnx.NewTensor(shape, s.in[:n*s.rowIn])
		if err != nil {
			return nil, fmt.Errorf("ort: cannot create an input view of %d rows: %w", n, err)
		}
		out, err := onnx.NewTensor(onnx.NewShape(int64(n), int64(s.classes)), s.out[:n*s.classes])
		if err != nil {
			in.Destroy()
			return nil, fmt.Errorf("ort: cannot create an output view of %d rows: %w", n, err)
		}
		s.inViews[n-1], s.outViews[n-1] = in, out
	}
	s.inputs[0], s.outputs[0] = s.inViews[n-1], s.outViews[n-1]
	if err := s.core.sess.Run(s.inputs, s.outputs); err != nil {
		return nil, fmt.Errorf("ort: run of %d rows: %w", n, err)
	}
	return s.out[:n*s.classes], nil
}

// Close releases the session and its tensors. It may be called more than once.
func (s *Session[T]) Close() error {
	s.closeViews()
	if s.core != nil {
		err := s.core.release()
		s.core = nil
		return err
	}
	return nil
}

// closeViews destroys the session's tensors (not its ONNX Runtime session).
func (s *Session[T]) closeViews() {
	for i := range s.inViews {
		if s.inViews[i] != nil {
			s.inViews[i].Destroy()
			if s.outViews[i] != nil {
				s.outViews[i].Destroy()
			}
			s.inViews[i], s.outViews[i] = nil, nil
		}
	}
	if s.multi != nil {
		s.multi.destroy()
	}
}
