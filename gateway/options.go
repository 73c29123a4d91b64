package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/postprocess"
	"github.com/imagegate/imagegate/preprocess"
)

// Options configures a Server: the HTTP front end and the bounds of the request pipeline.
// cmd/gateway translates the YAML configuration into it; every field must be set (the
// configuration's defaults are applied there), except Log and those of observability (the
// access log, tracing, the watchdog), whose zero values mean off and the defaults.
type Options struct {
	// MaxBodyBytes bounds a request body, as received and, with a Content-Encoding, as
	// decompressed: 413 above it, refused from the declared length before it is read.
	MaxBodyBytes int64
	// MaxInflightBytes is the memory budget shared by every request in flight: bodies as
	// their bytes arrive, decode buffers (each image's peak, known from its header before it
	// is decoded), input rows. A request that would exceed it is refused at once (503 with
	// Retry-After); one that could never fit is a 413.
	MaxInflightBytes int64
	// GRPCCallWindow is a gRPC call's HTTP/2 flow-control window (server.grpc_call_window);
	// 0: 64 KiB.
	GRPCCallWindow int64
	// ReadTimeout bounds reading a request (headers and body), WriteTimeout writing its
	// response, IdleTimeout a keep-alive connection's wait for its next request.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// DrainDelay: once Shutdown starts, readiness fails at once but the listener keeps
	// accepting and serving this long (so load balancers stop sending), then closes.
	DrainDelay time.Duration
	// DecodeWorkers images are decoded at once (CPU-bound: about the number of CPUs).
	DecodeWorkers int
	// DecodeQueue requests may wait for a decode worker; beyond it requests are refused at
	// once (503). Requests that could not be decoded and run before their deadline are
	// refused on arrival and dropped from the queue instead of being decoded.
	DecodeQueue int
	// QueueDiscipline is how the line keeps to each model's queue target
	// (ModelOptions.QueueTarget), beyond the floor of a closed loop's line (admit.Floor):
	// "lifo" (the zero value) takes a line longer than the floor for a spike and, during it,
	// admits a short line, serves the newest first and drops the waiters past the target;
	// "predict" refuses a request on its headers when its predicted wait exceeds the target
	// once the line stands (admit.Discipline).
	QueueDiscipline string
	// MaxConnections bounds open connections. At the limit the longest-idle keep-alive
	// connection is closed to admit a new one; when none is idle, a new connection is
	// served health, metrics and a JSON 503 for anything else, and closed. Each gRPC
	// listener bounds its connections to the same number, apart: over it a new one is closed.
	MaxConnections int
	// QueueFullStatus (503 or 429) answers a request refused because its model's queue is
	// full; every refusal carries Retry-After: RetryAfter, in whole seconds (at least 1).
	QueueFullStatus int
	RetryAfter      time.Duration
	// AdminToken, when set, is required as "Authorization: Bearer <token>" by the admin API
	// (ServeAdmin), which is then also served on the public listener to requests carrying it.
	AdminToken string
	// Console is where the console in the browser is served, at /ui/ (console.go):
	// ConsoleAdmin (the zero value) on the admin listener (ServeAdmin), which then also
	// serves what its Try it calls (model metadata and inference, through the same pipeline
	// as the public listener); ConsolePublic on the public listener too; ConsoleOff nowhere.
	Console string
	// Log receives the server's log lines (nil: slog.Default()).
	Log *slog.Logger
	// AccessLog, when not nil, receives one line per request (access.go): every failed one,
	// and AccessSample (in [0, 1]) of the successful ones.
	AccessLog    *slog.Logger
	AccessSample float64
	// TracerProvider, when not nil, traces every request and batch run (trace.go); nil: no
	// tracing, at no cost.
	TracerProvider trace.TracerProvider
	// Watchdog bounds a batch run before the server stops reporting live (watchdog.go).
	Watchdog WatchdogOptions
	// TLS is each listener's TLS (security.go); nil: plain text.
	TLS struct{ HTTP, GRPC, Admin *TLSOptions }
	// Keys, with a File, require an API key of the public API's requests (security.go).
	Keys KeyOptions
	// CredentialsPoll, when positive, is how often the TLS and key files are read again
	// (Reload reads them too); what changed and is valid is served from then on.
	CredentialsPoll time.Duration
}

func (o *Options) validate() error {
	var errs []error
	pos := func(name string, v int64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	pos("MaxBodyBytes", o.MaxBodyBytes)
	pos("MaxInflightBytes", o.MaxInflightBytes)
	pos("ReadTimeout", int64(o.ReadTimeout))
	pos("WriteTimeout", int64(o.WriteTimeout))
	pos("IdleTimeout", int64(o.IdleTimeout))
	pos("DecodeWorkers", int64(o.DecodeWorkers))
	pos("DecodeQueue", int64(o.DecodeQueue))
	pos("MaxConnections", int64(o.MaxConnections))
	if _, ok := admit.ParseDiscipline(o.QueueDiscipline); !ok {
		errs = append(errs, fmt.Errorf("QueueDiscipline must be predict or lifo, got %q", o.QueueDiscipline))
	}
	switch o.Console {
	case "", ConsoleAdmin, ConsolePublic, ConsoleOff:
	default:
		errs = append(errs, fmt.Errorf("Console must be admin, public or off, got %q", o.Console))
	}
	if o.DrainDelay < 0 || o.RetryAfter < 0 {
		errs = append(errs, errors.New("DrainDelay and RetryAfter must not be negative"))
	}
	if o.QueueFullStatus != 503 && o.QueueFullStatus != 429 {
		errs = append(errs, fmt.Errorf("QueueFullStatus must be 503 or 429, got %d", o.QueueFullStatus))
	}
	if o.AccessSample < 0 || o.AccessSample > 1 {
		errs = append(errs, fmt.Errorf("AccessSample must be in [0, 1], got %v", o.AccessSample))
	}
	if err := o.Watchdog.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxBodyBytes > o.MaxInflightBytes {
		errs = append(errs, fmt.Errorf("MaxBodyBytes (%d) must not exceed MaxInflightBytes (%d)", o.MaxBodyBytes, o.MaxInflightBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gateway: invalid options: %w", err)
	}
	return nil
}

// Elem is the element type of a model's input tensor: float32 (normalized values), or uint8
// for models that take raw 0..255 pixels.
type Elem interface{ float32 | uint8 }

// Runner runs one instance of a model: a session with input rows to fill and a Run over the
// first n of them that hands back each of the model's outputs. The gateway calls each Runner
// from one batch loop only; it need not be safe for concurrent use.
type Runner[T Elem] interface {
	// Input returns row i (RowLen values) of the input buffer, to be filled before Run.
	Input(i int) []T
	// Run runs the first n rows. It returns one slice per output, in Outputs' order, each
	// holding the n samples' values one after another (sample i's are [i*size, (i+1)*size),
	// size being Output.Size), valid until the next Run.
	Run(n int) ([][]float32, error)
	// Outputs describes the model's outputs: names and per-sample shapes. A classifier's
	// first output is its scores, one per label.
	Outputs() []Output
	RowLen() int
	MaxBatchSize() int
}

// Output is one of a model's output tensors: its name, one sample's shape (without the batch
// axis: [1000] for a classifier's scores, [N, 4] for a detector's boxes) and its element type.
// A detect model's output may have one dynamic dimension (-1: a model with NMS built in that
// answers as many rows as it kept); Run's slice then holds n equal parts, whose length tells it.
type Output struct {
	Name  string
	Shape []int64
	// Datatype is the model's element type as the Open Inference Protocol names it: FP32 (""
	// reads as FP32), INT64 or INT32. Run hands every output as float32 values; an integer
	// output's (class indices, counts) are exact up to 2^24 and answered as integers again.
	Datatype string
}

// Size is the number of values of one sample (the product of Shape; 0 with an unknown
// dimension).
func (o Output) Size() int {
	n := 1
	for _, d := range o.Shape {
		if d <= 0 {
			return 0
		}
		n *= int(d)
	}
	return n
}

// Runners are a model's instances, one batch loop each: a RunnersOf[float32] or a
// RunnersOf[uint8], the element type of the model's input.
type Runners interface{ runners() }

// RunnersOf is a list of runners of element type T.
type RunnersOf[T Elem] []Runner[T]

func (RunnersOf[T]) runners() {}

// ModelOptions configures one served model version.
type ModelOptions struct {
	// Name is the model's name in URLs and metric labels; Version its version ("1" if empty).
	// Requests without a version go to the newest (the highest number).
	Name, Version string
	// Labels name the output classes, in index order (a detector's classes beyond them are
	// named by their index; an embedding model has none).
	Labels []string
	// InputName is the input tensor's name the Open Inference Protocol shows (the outputs'
	// are the runners', Runner.Outputs).
	InputName string
	// Preprocess turns an encoded image into one input row (its Width, Height and Layout are
	// the input's shape).
	Preprocess preprocess.Options
	// Batching configures the model's batcher (its Instances is the number of runners). Its
	// batch loops run on model threads of their own (a niceness between the decodes' and the
	// rest's) unless StartLoop is set.
	Batching batcher.Config
	// QueueTarget bounds the time a request may wait in line, for a decode worker and in the
	// batcher, by Options.QueueDiscipline (0: no bound but its deadline).
	QueueTarget time.Duration
	// DefaultTimeout is a request's deadline; a request may only shorten it.
	DefaultTimeout time.Duration
	// Runners run the model, one batch loop each.
	Runners Runners
	// Release, optional, frees the runners once the model is closed and no batch runs.
	Release func()
	// Parameters, optional, are shown as the parameters of GET /v2/models/{m}/config (how the
	// model's settings were chosen).
	Parameters map[string]string
	// Config, optional, is the model's configuration in Triton's schema, answered as it is by
	// GET /v2/models/{m}/config and the ModelConfig RPC (a model of a Triton model repository:
	// its config.pbtxt as read, completed); nil: the gateway describes the model itself.
	// The server keeps it and never changes it.
	Config *inference.ModelConfig
	// BatchCurve, optional, is the run time per image measured at each batch size when the
	// model loaded, from which its Batching.MaxBatchSize was chosen (max_batch_size: auto);
	// exported as metrics.
	BatchCurve []BatchCost
	// Task is what the model answers (the zero value: TaskClassify), and so how its runners'
	// outputs are read (task.go): a classifier's first output is its scores, one per label;
	// an embedding model's one output its vector; a detector's are its decoder's.
	Task Task
	// Normalize (TaskEmbed) scales each vector to unit length (L2) before it is answered.
	Normalize bool
	// Detect configures TaskDetect.
	Detect DetectOptions
}

// Task is what a model answers.
type Task uint8

const (
	// TaskClassify: scores per class (the first output), answered as the best label, or the
	// top k, and as the raw scores over the Open Inference Protocol.
	TaskClassify Task = iota
	// TaskEmbed: a feature vector per image (the one output), answered as it is or L2-normalized.
	TaskEmbed
	// TaskDetect: boxes with scores and classes, decoded from the outputs, thresholded,
	// suppressed and mapped back to the original image's pixels.
	TaskDetect
)

// String is the task's configuration name: classify, embed or detect.
func (t Task) String() string {
	switch t {
	case TaskEmbed:
		return "embed"
	case TaskDetect:
		return "detect"
	}
	return "classify"
}

// DetectOptions configure a detector's answers.
type DetectOptions struct {
	// Decoder reads the model's outputs for one image (its InputWidth and InputHeight are the
	// model input's); it is checked when the model is made.
	Decoder postprocess.Decoder
	// Params are the selection's defaults; a request may override them
	// (postprocess.Params.Override: query parameters of /predict/, parameters of an Open
	// Inference Protocol request).
	Params postprocess.Params
	// Boxes, Scores, Classes and Count name the runners' outputs the decoder reads as
	// postprocess.Sample's fields ("": the model has none; Boxes is always set).
	Boxes, Scores, Classes, Count string
}

// BatchCost is a model's run time per image measured at one batch size.
type BatchCost struct {
	Batch    int
	PerImage time.Duration
}
