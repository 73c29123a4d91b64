package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is the whole gateway configuration. The first model is the default one, served on
// /predict/.
type Config struct {
	Server      Server      `yaml:"server"`
	Log         Log         `yaml:"log"`
	ONNXRuntime ONNXRuntime `yaml:"onnxruntime"`
	Repository  Repository  `yaml:"repository"`
	Models      []Model     `yaml:"models"`

	// FailedModels are the models of the Triton repository (repository.path) that cannot be
	// served as their folders stand: their loads fail, saying why (Models holds the others).
	FailedModels []FailedModel `yaml:"-"`

	// keys holds every key the configuration set ("server.listen", "models[0].input.width")
	// and whether its value spells zero: a zero that is not meaningful for its key is an
	// error rather than silently the default.
	keys map[string]bool
}

// Server configures the HTTP front end.
type Server struct {
	// Listen is the HOST:PORT of the public API. The -listen flag and the IMAGEGATE_LISTEN
	// environment variable override it, in that order.
	Listen string `yaml:"listen"`
	// MaxBodyBytes bounds a request body: 413 above it, refused from the declared length
	// before it is read, and counted as bytes arrive (also after gzip or deflate).
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// MaxInflightBytes is the memory budget of the requests in flight (bodies as received,
	// decode buffers, input rows); a request that would exceed it is refused at once (503 with
	// Retry-After). 0: a quarter of the memory limit (the cgroup's, else the machine's),
	// within 64MiB..1GiB.
	MaxInflightBytes ByteSize `yaml:"max_inflight_bytes"`
	// ReadTimeout bounds reading a request (headers and body): 408 after it.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a response.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle longer than this.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// DrainDelay is how long connections are still accepted and served after SIGTERM, while
	// readiness already fails (load balancers stop sending meanwhile); then the listener
	// closes. 0: none.
	DrainDelay Duration `yaml:"drain_delay"`
	// ShutdownTimeout bounds the wait for the requests in flight after drain_delay; those
	// still waiting then are answered 503.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// DecodeWorkers bounds how many images are decoded at once. 0: the CPUs the process may
	// use (the container's CPU limit where there is one, else the CPUs it may run on).
	DecodeWorkers int `yaml:"decode_workers"`
	// DecodeQueue is how many requests may wait for a decode worker; beyond it they are refused
	// at once (and earlier when their deadline cannot be met). 0: 128 per decode worker, at
	// least 256.
	DecodeQueue int `yaml:"decode_queue"`
	// QueueDiscipline is how the line (requests waiting for a decode worker and in the batcher)
	// keeps to each model's batching.queue_target beyond a closed loop's reach: a line of 64
	// requests or fewer is served oldest first and never refused for its time (a benchmark's
	// 50 connections are normal operation). lifo (the default) takes a longer line for an
	// open-loop spike and acts at once: while it lasts and 500 ms after, a request is admitted
	// only with a predicted wait within a quarter of the target, the line is served newest
	// first, and a waiter past the target is dropped when a worker frees up (503, X-Refusal:
	// expired).
	// predict refuses a request on its headers when its predicted wait exceeds the target once
	// the line has stood over it (64 in line or more) for 100 ms, and serves oldest first
	// (docs/operations.md compares the two).
	QueueDiscipline string `yaml:"queue_discipline"`
	// MaxConnections bounds concurrent connections; at the limit the longest-idle keep-alive
	// connection is closed to admit a new one. The gRPC listener has its own count, bounded
	// alike: over it a new connection is closed at once (clients see UNAVAILABLE).
	MaxConnections int `yaml:"max_connections"`
	// QueueFullStatus is the status of a request refused because a queue is full: 503 or 429.
	QueueFullStatus int `yaml:"queue_full_status"`
	// RetryAfter is the Retry-After value, in whole seconds, sent with every refusal.
	RetryAfter Duration `yaml:"retry_after"`
	// AdminListen is the HOST:PORT of the admin API (the model repository: index, load,
	// unload; reload), or "off". The -admin-listen flag overrides it.
	AdminListen string `yaml:"admin_listen"`
	// GRPCListen is the HOST:PORT of the gRPC API (the Open Inference Protocol's
	// GRPCInferenceService, grpc.health.v1.Health and reflection), or "off". The -grpc-listen
	// flag and the IMAGEGATE_GRPC_LISTEN environment variable override it, in that order.
	GRPCListen string `yaml:"grpc_listen"`
	// GRPCCallWindow is a gRPC call's HTTP/2 flow-control window: what a client may send of a
	// call before the server has read it. A call refused at the door costs the upload of this
	// much at most; a message larger than it waits a round trip per window for the server's
	// window updates (raise it for clients far away). 0: 64KiB, HTTP/2's own default.
	GRPCCallWindow ByteSize `yaml:"grpc_call_window"`
	// AdminTokenFile, when set, names a file holding a bearer token: the admin API then
	// requires "Authorization: Bearer <token>" on the admin listener, and is also served on the
	// public listener to requests that carry it.
	AdminTokenFile string `yaml:"admin_token_file"`
	// Console is where the console in the browser is served, at /ui/ (docs/console.md): admin
	// on the admin listener, which then also serves what its Try it calls (model metadata and
	// inference); public on the public listener too; off nowhere.
	Console string `yaml:"console"`
	// Watchdog bounds a model's batch run: while one runs past its bound, /v2/health/live
	// answers 503 (and the log says which run), so that the pod is restarted.
	Watchdog Watchdog `yaml:"watchdog"`
	// TLS serves the listeners over TLS (docs/security.md).
	TLS TLS `yaml:"tls"`
	// APIKeys requires a key of the public API's requests (docs/security.md).
	APIKeys APIKeys `yaml:"api_keys"`
	// CredentialsPoll is how often the TLS and key files are read again: a new certificate
	// or key file is served from then on without a restart (SIGHUP reads them too), one that
	// does not load is refused with a log line and what is in use stays. 0: only on SIGHUP.
	CredentialsPoll Duration `yaml:"credentials_poll"`
}

// TLS configures the listeners' TLS. Its keys apply to every listener (the public API's, the
// gRPC API's and the admin API's); http, grpc and admin change them for one listener, or turn
// TLS off for it. A listener is served over TLS when its cert_file is set.
type TLS struct {
	// CertFile is a PEM file of the server's certificate, followed by its intermediates
	// (relative to this file).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM file of the certificate's private key.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, when set, is a PEM file of the CAs whose client certificates are
	// accepted (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is require (a client without a certificate of client_ca_file is refused),
	// optional (a certificate a client sends is verified) or none. Empty: require with a
	// client_ca_file, else none.
	ClientAuth string `yaml:"client_auth"`
	// MinVersion is the oldest TLS version served: "1.2" or "1.3".
	MinVersion string `yaml:"min_version"`
	// HTTP changes these keys for the public listener (server.listen).
	HTTP TLSListener `yaml:"http"`
	// GRPC changes them for the gRPC listener (server.grpc_listen).
	GRPC TLSListener `yaml:"grpc"`
	// Admin changes them for the admin listener (server.admin_listen).
	Admin TLSListener `yaml:"admin"`
}

// TLSListener changes server.tls's keys for one listener: each key set here replaces
// server.tls's for this listener.
type TLSListener struct {
	// CertFile replaces server.tls.cert_file.
	CertFile string `yaml:"cert_file"`
	// KeyFile replaces server.tls.key_file.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile replaces server.tls.client_ca_file.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth replaces server.tls.client_auth.
	ClientAuth string `yaml:"client_auth"`
	// MinVersion replaces server.tls.min_version.
	MinVersion string `yaml:"min_version"`
	// Off serves this listener in plain text whatever server.tls says.
	Off bool `yaml:"off"`
}

// For is the TLS of a listener (http, grpc or admin) as server.tls and its block combine:
// ok false when it is served in plain text.
func (t TLS) For(listener string) (TLSListener, bool) {
	l := map[string]TLSListener{"http": t.HTTP, "grpc": t.GRPC, "admin": t.Admin}[listener]
	if l.Off {
		return TLSListener{}, false
	}
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	out := TLSListener{CertFile: or(l.CertFile, t.CertFile), KeyFile: or(l.KeyFile, t.KeyFile),
		ClientCAFile: or(l.ClientCAFile, t.ClientCAFile), ClientAuth: or(l.ClientAuth, t.ClientAuth), MinVersion: or(l.MinVersion, t.MinVersion)}
	return out, out.CertFile != "" || out.KeyFile != ""
}

// APIKeys configures the keys of the public API (HTTP and gRPC).
type APIKeys struct {
	// File, when set, is the key file: each key's name, its SHA-256 (or the key), the models
	// it may use and its limits (docs/security.md). Every request then needs a key
	// (Authorization: Bearer <key>, X-API-Key, or gRPC's authorization metadata), but the
	// open ones: 401 without. Empty: no keys.
	File string `yaml:"file"`
	// Open lists what is answered without a key: health (health and readiness, model
	// readiness, gRPC health), metrics (/metrics), metadata (server and model metadata,
	// configuration, statistics, gRPC reflection). [] opens nothing.
	Open []string `yaml:"open"`
}

// Watchdog bounds a batch run before the gateway stops reporting live: a run is hung once it
// has run run_multiple times its model's typical run (the mean of its recent runs), but never
// before min_hang nor later than max_run. A model that has not finished a run yet (its
// warm-up) has max_run. A run is timed from when its model thread starts it, not while its
// batch waits in the queue.
type Watchdog struct {
	// RunMultiple is how many typical runs a run may take.
	RunMultiple float64 `yaml:"run_multiple"`
	// MinHang is the least a run may take before it counts as hung: longer than any healthy
	// run on a saturated CPU.
	MinHang Duration `yaml:"min_hang"`
	// MaxRun is the most a run may take, whatever its typical run.
	MaxRun Duration `yaml:"max_run"`
}

// Log configures the gateway's log (standard error).
type Log struct {
	// Level is the lowest level logged: debug, info, warn or error. The -log-level flag
	// overrides it.
	Level string `yaml:"level"`
	// Format is text (key=value pairs) or json (one object per line). The -log-format flag
	// overrides it.
	Format string `yaml:"format"`
	// Access configures the access log: one line per request.
	Access AccessLog `yaml:"access"`
}

// AccessLog configures the access log (docs/observability.md lists its fields): one line per
// request, with its client, model, status, sizes, stage times, batch, request and trace IDs.
type AccessLog struct {
	// Mode is off, errors (every request answered with an error status or dropped) or all
	// (errors, and sample of the successful requests).
	Mode string `yaml:"mode"`
	// Sample is the fraction of successful requests logged in mode all, in (0, 1], drawn at
	// random per request.
	Sample float64 `yaml:"sample"`
	// Format is text or json. Empty: log.format (or -log-format).
	Format string `yaml:"format"`
	// Output is stderr or stdout.
	Output string `yaml:"output"`
}

// Repository configures where models come from besides models (a Triton model repository)
// and how the served models follow the configuration and their files (Triton's model control).
type Repository struct {
	// Path is a Triton model repository: every folder under it is a model,
	// <path>/<model>/<version>/model.onnx, configured by its config.pbtxt, read with Triton's
	// schema (docs/triton.md says what is honoured and what is refused), or without one from
	// its ONNX file as -model does. Served beside models (the names must differ). The
	// -model-repository flag sets it.
	Path string `yaml:"path"`
	// ModelControlMode is Triton's: none (every model is loaded at start; SIGHUP and the
	// repository API reload), poll (the configuration, the repository and the model files are
	// checked every poll, and what changed is loaded, reloaded or unloaded, as SIGHUP does) or
	// explicit (only load_models are loaded at start; the repository API loads and unloads any
	// model the configuration or the repository holds). Empty: poll when poll is set, else
	// none. The -model-control-mode flag sets it.
	ModelControlMode string `yaml:"model_control_mode"`
	// Poll is how often model_control_mode poll checks. 0: 15s (Triton's
	// --repository-poll-secs) in poll mode; a positive value with no mode means poll.
	Poll Duration `yaml:"poll"`
	// LoadModels are the models loaded at start in explicit mode ("*": all of them). The
	// -load-model flag adds to it.
	LoadModels []string `yaml:"load_models"`
	// Strict makes a config.pbtxt field that the gateway does not honour fail its model's
	// load; otherwise one start-up warning per model names such fields.
	Strict bool `yaml:"strict"`
}

// ONNXRuntime locates the ONNX Runtime shared library.
type ONNXRuntime struct {
	// Library is the path of libonnxruntime.so. Empty: the ONNXRUNTIME_LIB environment variable,
	// then .deps/onnxruntime/ beside the binary's parent folder, then the system's search path.
	Library string `yaml:"library"`
}

// Model configures one served model. Keys left empty or 0 are taken from the model file
// where it tells them, else their defaults.
type Model struct {
	// Name is the model's name in URLs and metric labels: letters, digits, '.', '_' and '-',
	// starting with a letter or digit, not ending in .tensor.
	Name string `yaml:"name"`
	// Path is an ONNX file (served as version 1), or a model repository directory whose
	// numeric subfolders hold the versions, Triton's layout: <path>/<version>/model.onnx.
	Path string `yaml:"path"`
	// VersionPolicy chooses the versions served from a repository directory.
	VersionPolicy VersionPolicy `yaml:"version_policy"`
	// Labels is a label file: one label per line (a synset.txt's WordNet ids are dropped), or
	// a JSON array. Empty: labels.txt, labels.json or synset.txt beside the model (a version
	// folder's own first), else the labels in the model's metadata, else the class indices.
	Labels string `yaml:"labels"`
	// Task is what the model answers: classify (scores per class), embed (a feature vector per
	// image) or detect (objects with their boxes). Empty: from the model's outputs where they
	// leave no doubt (one [batch, classes] output: classify; one [batch, D] output named like
	// an embedding or features: embed; boxes and scores, a YOLO output, or an NMS model's
	// detections: detect), else a start-up error naming the key to set.
	Task       string     `yaml:"task"`
	Input      Input      `yaml:"input"`
	Output     Output     `yaml:"output"`
	Embed      Embed      `yaml:"embed"`
	Detect     Detect     `yaml:"detect"`
	Preprocess Preprocess `yaml:"preprocess"`
	Batching   Batching   `yaml:"batching"`
	Runtime    Runtime    `yaml:"runtime"`
	// Warning, when set, is logged as a warning each time the model loads: what its users
	// must know (an untrained model, a deprecated one).
	Warning string `yaml:"warning"`

	// field is how errors name the model ("models[0] (resnet)").
	field string
	// set holds the keys the configuration set, relative to the model ("input.width").
	set map[string]bool
	// origin names what set them: "yaml", or "flag" for -model, -labels and -name.
	origin string
	// labelsFound: Labels is a file found beside the model, not one the configuration named.
	labelsFound bool

	// Triton, for a model of the Triton model repository (repository.path): its folder and
	// what its config.pbtxt holds; nil for the models the configuration lists.
	Triton *TritonModel `yaml:"-"`
}

// VersionPolicy is Triton's: at most one of latest, all and specific (default: latest 1).
type VersionPolicy struct {
	// Latest serves the N highest versions.
	Latest int `yaml:"latest"`
	// All serves every version.
	All bool `yaml:"all"`
	// Specific serves these versions.
	Specific []int `yaml:"specific"`
}

// Input describes the model's image input. Empty keys come from the model's input.
type Input struct {
	// Name is the input tensor's name. Empty: the model's only input.
	Name string `yaml:"name"`
	// Width is the input's width in pixels. 0: the model's, when its input has a fixed size.
	Width int `yaml:"width"`
	// Height is the input's height in pixels. 0: the model's, else width.
	Height int `yaml:"height"`
	// Layout is NCHW or NHWC. Empty: where the model's input has its 3 channels.
	Layout string `yaml:"layout"`
	// Type is the input's element type: float32 or uint8 (raw 0..255 pixels, no
	// normalization). Empty: the model's; when set, the model must match.
	Type string `yaml:"type"`
}

// Output names the model's score output, [batch, classes].
type Output struct {
	// Name is the output tensor's name. Empty: the model's only output, or its only output
	// shaped [batch, classes].
	Name string `yaml:"name"`
}

// Embed configures the embed task: the answer is the model's output vector for each image.
type Embed struct {
	// Output is the output holding the vector, [batch, D] (or [batch, D, 1, 1]). Empty: the
	// model's only output, else its only output whose name holds embed, feature, pool, vector
	// or descriptor.
	Output string `yaml:"output"`
	// Normalize scales each vector to unit length (L2), as similarity search by cosine wants.
	Normalize bool `yaml:"normalize"`
}

// Detect configures the detect task: the model's outputs are decoded into boxes (in the
// original image's pixels), scored, suppressed per class and cut to a count. The model's
// class names are the model's labels (labels, a label file beside it, or its metadata),
// indexed as the model numbers its classes (a background class included).
type Detect struct {
	// Decoder is the layout of the model's outputs: boxes_scores (SSD-style: boxes [batch, N,
	// 4] and scores [batch, N, classes]), yolo (one output [batch, 4+classes, N] or [batch,
	// N, 4+classes], with an objectness column or not) or nms (a model with NMS built in:
	// boxes, scores, classes and optionally a count, or one [batch, K, 6] output of rows x1,
	// y1, x2, y2, score, class). Empty: from the model's outputs.
	Decoder string `yaml:"decoder"`
	// Boxes is the output holding the boxes (yolo: the one output). Empty: from the outputs'
	// names and shapes.
	Boxes string `yaml:"boxes"`
	// Scores is the output holding the scores (boxes_scores, nms). Empty: from the outputs'
	// names and shapes.
	Scores string `yaml:"scores"`
	// Classes is the output holding an NMS model's class indices. Empty: from the outputs'
	// names and shapes (none: every detection is class 0).
	Classes string `yaml:"classes"`
	// Count is the output holding an NMS model's number of valid rows per image. Empty: from
	// the outputs' names (none: every row above the threshold).
	Count string `yaml:"count"`
	// BoxFormat is how boxes_scores and nms boxes are written: xyxy (corners), cxcywh
	// (center, size) or yxyx. Empty: xyxy. YOLO's are always cxcywh.
	BoxFormat string `yaml:"box_format"`
	// BoxUnits is normalized (fractions of the input's width and height) or pixels (of the
	// model's input). Empty: normalized for boxes_scores, pixels for yolo and nms.
	BoxUnits string `yaml:"box_units"`
	// Background: on when the scores' class 0 is the background (never answered), off when
	// it is a class; auto: on for boxes_scores with two classes or more.
	Background string `yaml:"background"`
	// Objectness: on when a YOLO output holds an objectness column before the class scores
	// (YOLOv5), off when not (v8, v11); auto: from the labels' count where they are known,
	// else on for [batch, N, values] outputs (v5's layout), off for [batch, values, N].
	Objectness string `yaml:"objectness"`
	// ScoreThreshold drops detections scoring at or below it; a request may set its own
	// (score_threshold).
	ScoreThreshold float64 `yaml:"score_threshold"`
	// IOUThreshold is the non-maximum suppression's: a detection overlapping a better one of
	// its class by more intersection over union is dropped; a request may set its own
	// (iou_threshold).
	IOUThreshold float64 `yaml:"iou_threshold"`
	// MaxDetections bounds the detections answered per image (the best ones); a request may
	// lower it (max_detections).
	MaxDetections int `yaml:"max_detections"`
	// ClassAgnostic suppresses overlapping detections across classes too.
	ClassAgnostic bool `yaml:"class_agnostic"`
}

// Preprocess describes how an image becomes the model's input. Empty keys come from the
// model's metadata where an exporter wrote them (docs/configuration.md lists the keys read),
// else torchvision's ImageNet convention.
type Preprocess struct {
	// Mode is shorter_side (torchvision: resize the shorter side to resize, center crop),
	// stretch (resize to the input size, ignoring the aspect ratio) or letterbox (scale to fit
	// keeping the aspect ratio, centered, padded with pad). Empty: shorter_side, except for
	// detectors: letterbox for yolo and nms, stretch for boxes_scores.
	Mode string `yaml:"mode"`
	// Pad is the letterbox's padding value (0..255, every channel, before normalization):
	// YOLO's exporters pad with 114.
	Pad int `yaml:"pad"`
	// Resize is the shorter side's length before the crop (shorter_side mode). 0: crop x
	// 256/224, torchvision's ratio.
	Resize int `yaml:"resize"`
	// Crop is the center crop's size; it must equal the input's width and height. 0: the
	// input's width.
	Crop int `yaml:"crop"`
	// Mean is subtracted from each channel (R, G, B) of x/255.
	Mean []float32 `yaml:"mean"`
	// Std divides each channel (R, G, B) after the mean is subtracted.
	Std []float32 `yaml:"std"`
	// Scale is normalized, (x/255-mean)/std, or raw: 0..255 values, for models that embed
	// their own normalization.
	Scale string `yaml:"scale"`
	// FullDecode decodes JPEGs at full size instead of the smallest DCT scale that covers the
	// resize target: bit-identical to torchvision (PIL), and slower. The embed task turns it on
	// unless the configuration sets it: the scaled decode moves a large photo's embedding.
	FullDecode bool `yaml:"full_decode"`
	// MaxPixels refuses images whose header declares more pixels (413), before any pixel is
	// allocated. 0: the decoder's default, Pillow's MAX_IMAGE_PIXELS.
	MaxPixels int64 `yaml:"max_pixels"`
}

// Batching configures the model's dynamic batcher.
type Batching struct {
	// MaxBatchSize is the most images one model run takes: a number, or auto. Empty: auto,
	// measured when the model loads (a model whose batch axis is fixed at 1 gets 1). Auto times
	// the model at batch sizes 1, 2, 4, ... on this machine, with its runtime settings and
	// execution provider (the curve is kept in runtime.cache_dir, so a later start reads it),
	// and takes the smallest size within 5 % of the lowest time per image among those whose
	// run takes at most half of queue_target (and of adaptive.latency_target when set); at
	// least 2 where a run of 2 fits, and at least the largest of preferred_batch_sizes.
	MaxBatchSize BatchSize `yaml:"max_batch_size"`
	// MaxQueueDelay is a fixed batch window counted from the oldest queued request; with the
	// adaptive window it caps that window. 0: no fixed window (requests queued while a run is
	// in progress still form the next batch).
	MaxQueueDelay Duration `yaml:"max_queue_delay"`
	// MaxQueueSize is how many images may wait beyond those running; beyond it requests are
	// refused at once (503 or 429).
	MaxQueueSize int `yaml:"max_queue_size"`
	// PreferredBatchSizes: dispatch as soon as one of these sizes can be formed.
	PreferredBatchSizes []int `yaml:"preferred_batch_sizes"`
	// DefaultTimeout bounds a request's wait and run; a request may only shorten it.
	DefaultTimeout Duration `yaml:"default_timeout"`
	// QueueTarget bounds the time a request waits in line (for a decode worker and in the
	// batcher, predicted from the measured decode and run times) beyond a closed loop's reach,
	// as server.queue_discipline says: refused before its body is read (503 or 429 queue_full,
	// gateway_refusals_total{stage="queue_time"}), or, during a spike under lifo, dropped once
	// it has waited this long (gateway_decode_expired_total). A request's deadline may only
	// shorten its wait further.
	QueueTarget Duration `yaml:"queue_target"`
	// Priorities is the number of priority levels (0 or 1: none).
	Priorities int `yaml:"priorities"`
	// Adaptive sizes the window from measured service time.
	Adaptive Adaptive `yaml:"adaptive"`
}

// Adaptive configures the adaptive batch window.
type Adaptive struct {
	// LatencyTarget, when positive, turns the adaptive window on: it waits for more requests
	// only while a larger batch is measured to be cheaper per image and the oldest request's
	// wait stays within this target. 0: off (max_queue_delay alone sets the window). A
	// configuration that sets max_queue_delay and not this key gets 0.
	LatencyTarget Duration `yaml:"latency_target"`
}

// Runtime configures the ONNX Runtime sessions of a model.
type Runtime struct {
	// Instances is the number of batch loops, each with its own input and output buffers (and,
	// with sessions per_instance, its own ONNX Runtime session). A request carries at most
	// max_batch_size x instances images.
	Instances int `yaml:"instances"`
	// IntraOpThreads is ONNX Runtime's intra-op thread count per session.
	IntraOpThreads int `yaml:"intra_op_threads"`
	// InterOpThreads is ONNX Runtime's inter-op thread count per session.
	InterOpThreads int `yaml:"inter_op_threads"`
	// GraphOptimization is ONNX Runtime's level: disabled, basic, extended or all.
	GraphOptimization string `yaml:"graph_optimization"`
	// OptimizedModelPath, when set, makes ONNX Runtime write the optimized graph there.
	OptimizedModelPath string `yaml:"optimized_model_path"`
	// ExecutionProvider is cpu, cuda or tensorrt (these need an ONNX Runtime build with them).
	ExecutionProvider string `yaml:"execution_provider"`
	// CPUMemArena: on keeps ONNX Runtime's CPU memory arena (activations reused across runs,
	// the arena as large as the largest batch run); off allocates them per run.
	CPUMemArena string `yaml:"cpu_mem_arena"`
	// HardSwishRewrite: on rewrites the model's HardSwish activations, before ONNX Runtime
	// loads it, into operators its blocked (NCHWc) layout keeps (x86-64, cpu, graph
	// optimization all; the logits move by float32 rounding); off loads the model as it is;
	// auto is on where that was measured to pay, x86-64 CPUs with AVX-512.
	HardSwishRewrite string `yaml:"hardswish_rewrite"`
	// Sessions: shared runs every instance on one ONNX Runtime session (weights, prepacked
	// kernels and graph held once; each instance has its own buffers and batch loop);
	// per_instance gives each instance a session of its own.
	Sessions string `yaml:"sessions"`
	// CacheDir keeps ONNX Runtime's optimized graph of the model between starts, keyed by the
	// model's contents, the ONNX Runtime version, these settings and the CPU (a later start
	// loads it instead of optimizing again): a folder (relative to this file), auto
	// ($XDG_CACHE_HOME/imagegate or ~/.cache/imagegate) or off. A folder that cannot be
	// written costs a warning at start-up, never the model.
	CacheDir string `yaml:"cache_dir"`
}

// ShareSession reports whether the model's instances share one ONNX Runtime session.
func (r Runtime) ShareSession() bool { return r.Sessions != "per_instance" }

// Load reads, defaults and validates the configuration file at path.
func Load(path string) (*Config, error) { return LoadWith(path, nil) }

// LoadWith is Load with apply changing the configuration as ParseWith does.
func LoadWith(path string, apply func(*Config)) (*Config, error) {
	data, err := ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("cannot read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve config path %q: %w", path, err)
	}
	cfg, err := ParseWith(data, filepath.Dir(abs), apply)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML strictly, resolves relative paths against dir, applies defaults and
// validates the result. Keys a model can tell (its input, output and preprocessing) stay
// empty where the YAML leaves them so: Complete fills them from the model file.
func Parse(data []byte, dir string) (*Config, error) { return ParseWith(data, dir, nil) }

// ParseWith is Parse with apply, when not nil, changing the decoded configuration before its
// paths are resolved, the defaults applied and the whole validated: what flags set over the
// file (their paths absolute).
func ParseWith(data []byte, dir string, apply func(*Config)) (*Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty")
		}
		return nil, fmt.Errorf("cannot parse config: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("cannot parse config: more than one YAML document")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("cannot parse config: %w", err)
	}
	cfg.keys = setKeys(&doc)
	if apply != nil {
		apply(&cfg)
	}
	if err := cfg.finish(dir, "yaml"); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// ForRepository is the configuration of the gateway serving the Triton model repository
// at dir with every other setting at its default (-model-repository without -config); apply,
// when not nil, sets what other flags give.
func ForRepository(dir string, apply func(*Config)) (*Config, error) {
	cfg := Config{Repository: Repository{Path: dir}, keys: map[string]bool{"repository.path": false}}
	if apply != nil {
		apply(&cfg)
	}
	wd, err := filepath.Abs(".")
	if err != nil {
		return nil, err
	}
	if err := cfg.finish(wd, "flag"); err != nil {
		return nil, fmt.Errorf("-model-repository %s: %w", dir, err)
	}
	return &cfg, nil
}

// ForModel is the configuration of the gateway serving one model file (or repository
// directory) with every other setting at its default: what -model, -labels and -name give.
// name "" derives the name from the path (the file's name without .onnx; for model.onnx, its
// folder's name).
func ForModel(path, labels, name string) (*Config, error) {
	if name == "" {
		var err error
		if name, err = nameFromPath(path); err != nil {
			return nil, err
		}
	}
	cfg := Config{Models: []Model{{Name: name, Path: path, Labels: labels}}, keys: map[string]bool{
		"models[0].name": false, "models[0].path": false}}
	if labels != "" {
		cfg.keys["models[0].labels"] = false
	}
	wd, err := filepath.Abs(".")
	if err != nil {
		return nil, err
	}
	if err := cfg.finish(wd, "flag"); err != nil {
		return nil, fmt.Errorf("-model %s: %w", path, err)
	}
	return &cfg, nil
}

// nameFromPath derives a model's name from its file: resnet50.onnx is resnet50;
// models/mobilenetv2/model.onnx (or a repository folder) is mobilenetv2.
func nameFromPath(path string) (string, error) {
	p := filepath.Clean(path)
	base := strings.TrimSuffix(filepath.Base(p), ".onnx")
	if base == "model" {
		if abs, err := filepath.Abs(p); err == nil {
			base = filepath.Base(filepath.Dir(abs))
		}
	}
	if base == "" || len(base) > MaxModelName || !validName(base) || base[0] == '_' || base[0] == '.' {
		return "", fmt.Errorf("cannot name the model after its file %s (%q): give -name", path, base)
	}
	return base, nil
}

// finish resolves paths against dir, applies the defaults and validates: the common end of
// Parse and ForModel. origin says what set the keys (yaml or flag).
func (c *Config) finish(dir, origin string) error {
	for i := range c.Models {
		m := &c.Models[i]
		m.field = fmt.Sprintf("models[%d]", i)
		if name := m.Name; name != "" {
			if len(name) > 64 {
				name = name[:64] + "…"
			}
			m.field = fmt.Sprintf("models[%d] (%s)", i, name)
		}
		if m.Triton != nil { // a model of the Triton repository: named by its folder
			m.field = m.Triton.field()
		}
		m.origin = origin
		m.set = map[string]bool{}
		prefix := fmt.Sprintf("models[%d].", i)
		for k := range c.keys {
			if rest, ok := strings.CutPrefix(k, prefix); ok {
				m.set[rest] = true
			}
		}
	}
	c.resolvePaths(dir)
	c.setDefaults()
	c.resolveAuto(thisMachine())
	if err := c.Validate(); err != nil {
		return err
	}
	return c.readRepository()
}

// setKeys returns the paths (e.g. "server.read_timeout", "models[0].batching.max_queue_size")
// of the keys a YAML document sets, each with whether its value spells zero ("0", "0s",
// "0MiB"...). A key set to a mapping or a list is a key too.
func setKeys(doc *yaml.Node) map[string]bool {
	out := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			if path != "" {
				out[path] = false
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if path != "" {
					k = path + "." + k
				}
				walk(n.Content[i+1], k)
			}
		case yaml.SequenceNode:
			out[path] = false
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.ScalarNode:
			out[path] = isZeroScalar(n.Value)
		case yaml.AliasNode:
			if n.Alias != nil {
				walk(n.Alias, path)
			}
		}
	}
	walk(doc, "")
	return out
}

// explicitZero reports whether the configuration set key to a zero.
func (c *Config) explicitZero(key string) bool { return c.keys[key] }

func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c.ONNXRuntime.Library = abs(c.ONNXRuntime.Library)
	c.Repository.Path = abs(c.Repository.Path)
	c.Server.AdminTokenFile = abs(c.Server.AdminTokenFile)
	c.Server.APIKeys.File = abs(c.Server.APIKeys.File)
	for _, f := range []*string{&c.Server.TLS.CertFile, &c.Server.TLS.KeyFile, &c.Server.TLS.ClientCAFile} {
		*f = abs(*f)
	}
	for _, l := range []*TLSListener{&c.Server.TLS.HTTP, &c.Server.TLS.GRPC, &c.Server.TLS.Admin} {
		l.CertFile, l.KeyFile, l.ClientCAFile = abs(l.CertFile), abs(l.KeyFile), abs(l.ClientCAFile)
	}
	for i := range c.Models {
		m := &c.Models[i]
		m.Path = abs(m.Path)
		m.Labels = abs(m.Labels)
		m.Runtime.OptimizedModelPath = abs(m.Runtime.OptimizedModelPath)
		if d := m.Runtime.CacheDir; d != "auto" && d != "off" {
			m.Runtime.CacheDir = abs(d)
		}
	}
}

// Marshal writes the configuration as YAML that Parse reads back to the same values. The
// models of the Triton repository are left out: repository.path reads them again.
func (c *Config) Marshal() ([]byte, error) {
	out := *c
	out.Models = slices.DeleteFunc(slices.Clone(c.Models), func(m Model) bool { return m.Triton != nil })
	var doc yaml.Node
	if err := doc.Encode(&out); err != nil {
		return nil, err
	}
	flowLists(&doc)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// flowLists writes lists of scalars on one line: mean: [0.485, 0.456, 0.406].
func flowLists(n *yaml.Node) {
	if n.Kind == yaml.SequenceNode && !slices.ContainsFunc(n.Content, func(c *yaml.Node) bool { return c.Kind != yaml.ScalarNode }) {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flowLists(c)
	}
}

// Field is how errors name the model: "models[0] (resnet)".
func (m *Model) Field() string {
	if m.field == "" {
		return "models[?]"
	}
	return m.field
}

// MaxModelName bounds a model's name (it is a metric label on every series of the model).
const MaxModelName = 128

// Limits of the files ReadFile reads.
const (
	MaxConfigBytes = 16 << 20
	MaxLabelBytes  = 16 << 20
	MaxTokenBytes  = 4 << 10
)
