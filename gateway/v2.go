package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/batcher"
)

// The Open Inference Protocol (KServe v2) over HTTP/JSON:
//   GET  /v2                        server metadata
//   GET  /v2/health/live            liveness
//   GET  /v2/health/ready           readiness (every model loaded, not draining)
//   GET  /v2/models/{name}          model metadata
//   GET  /v2/models/{name}/ready    model readiness
//   POST /v2/models/{name}/infer    inference: one input, either BYTES (encoded images, as
//                                   base64 strings) or FP32 already preprocessed to the
//                                   model's input shape [n, ...]; one FP32 output [n, classes].

// Version is the gateway's version, reported by /v2.
var Version = "dev"

func (s *Server) handleV2(ctx *fasthttp.RequestCtx, path, method []byte) {
	isGet := bytes.Equal(method, strGET) || bytes.Equal(method, strHEAD)
	p := string(path)
	switch {
	case p == "/v2" || p == "/v2/":
		if !isGet {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		writeJSON(ctx, 200, map[string]any{"name": "imagegate", "version": Version, "extensions": []string{}})
	case p == "/v2/health/live":
		writeJSON(ctx, 200, map[string]any{"live": true})
	case p == "/v2/health/ready":
		ready := s.ready.Load()
		status := 200
		if !ready {
			status = fasthttp.StatusServiceUnavailable
		}
		writeJSON(ctx, status, map[string]any{"ready": ready})
	case strings.HasPrefix(p, "/v2/models/"):
		rest := strings.TrimPrefix(p, "/v2/models/")
		name, tail, _ := strings.Cut(rest, "/")
		if i := strings.Index(tail, "versions/"); i == 0 { // /v2/models/{name}/versions/{v}/...
			_, tail, _ = strings.Cut(tail[len("versions/"):], "/")
		}
		m := s.models[name]
		if m == nil {
			s.notFound.observe(fasthttp.StatusNotFound, 0)
			writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("unknown model %q", truncate(name, 100)))
			return
		}
		switch tail {
		case "":
			s.modelMetadata(ctx, m)
		case "ready":
			ready := s.ready.Load()
			status := 200
			if !ready {
				status = fasthttp.StatusServiceUnavailable
			}
			writeJSON(ctx, status, map[string]any{"name": m.name, "ready": ready})
		case "infer":
			if !bytes.Equal(method, strPOST) {
				s.methodNotAllowed(ctx, "POST")
				return
			}
			start := time.Now()
			status, err := s.infer(ctx, m, start)
			if err != nil {
				status = s.writeFailure(ctx, err)
			}
			m.req.observe(status, time.Since(start))
		default:
			writeError(ctx, fasthttp.StatusNotFound, "not found: "+truncate(p, 100))
		}
	default:
		writeError(ctx, fasthttp.StatusNotFound, "not found: "+truncate(p, 100))
	}
}

type v2Tensor struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

type v2Request struct {
	ID         string          `json:"id,omitempty"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Inputs     []v2Tensor      `json:"inputs"`
	Outputs    []v2RequestedOp `json:"outputs,omitempty"`
}

type v2RequestedOp struct {
	Name string `json:"name"`
}

type v2Output struct {
	Name     string    `json:"name"`
	Shape    []int64   `json:"shape"`
	Datatype string    `json:"datatype"`
	Data     []float32 `json:"data"`
}

type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version,omitempty"`
	ID           string     `json:"id,omitempty"`
	Outputs      []v2Output `json:"outputs"`
}

func (s *Server) modelMetadata(ctx *fasthttp.RequestCtx, m *model) {
	in := []int64{-1, 3, int64(m.cfg.Input.Height), int64(m.cfg.Input.Width)}
	if m.cfg.Input.Layout == "NHWC" {
		in = []int64{-1, int64(m.cfg.Input.Height), int64(m.cfg.Input.Width), 3}
	}
	writeJSON(ctx, 200, map[string]any{
		"name":     m.name,
		"versions": []string{"1"},
		"platform": "onnxruntime_onnx",
		"inputs": []map[string]any{
			{"name": m.cfg.Input.Name, "datatype": m.datatype(), "shape": in},
			{"name": m.cfg.Input.Name, "datatype": "BYTES", "shape": []int64{-1}, "parameters": map[string]any{"content": "encoded image (JPEG, PNG, WebP) as base64"}},
		},
		"outputs":         []map[string]any{{"name": m.cfg.Output.Name, "datatype": "FP32", "shape": []int64{-1, int64(m.classes)}}},
		"labels":          m.labels,
		"max_batch_size":  m.cfg.Batching.MaxBatchSize,
		"max_queue_delay": m.cfg.Batching.MaxQueueDelay.String(),
	})
}

func (s *Server) infer(ctx *fasthttp.RequestCtx, m *model, start time.Time) (int, error) {
	opts, err := s.parsePredictOptions(ctx, m)
	if err != nil {
		return 0, err
	}
	var req v2Request
	if err := json.Unmarshal(ctx.Request.Body(), &req); err != nil {
		return 0, bodyErr("cannot parse the inference request: %v", err)
	}
	if len(req.Inputs) != 1 {
		return 0, bodyErr("want exactly one input, got %d", len(req.Inputs))
	}
	for _, o := range req.Outputs {
		if o.Name != m.cfg.Output.Name {
			return 0, bodyErr("unknown output %q (the model has %q)", o.Name, m.cfg.Output.Name)
		}
	}
	in := req.Inputs[0]
	if in.Name != m.cfg.Input.Name {
		return 0, bodyErr("unknown input %q (the model has %q)", in.Name, m.cfg.Input.Name)
	}
	if len(in.Shape) == 0 || in.Shape[0] < 1 {
		return 0, bodyErr("input shape %v: want [n, ...] with n >= 1", in.Shape)
	}
	n := int(in.Shape[0])
	if limit := m.maxInferSamples(); n > limit {
		return 0, bodyErr("input has %d samples; at most %d per request (batching.max_batch_size x runtime.instances)", n, limit)
	}
	// Check and decode the data before any per-sample buffer is taken.
	var (
		images []string
		flat   []float32
		flatU8 []uint8
		row    = m.rowLen
	)
	switch in.Datatype {
	case "BYTES":
		if err := json.Unmarshal(in.Data, &images); err != nil {
			return 0, bodyErr("BYTES input data must be a flat array of base64 strings: %v", err)
		}
		if len(images) != n {
			return 0, bodyErr("input shape says %d samples, data holds %d", n, len(images))
		}
	case "FP32", "UINT8":
		if (in.Datatype == "UINT8") != m.uint8Input {
			return 0, bodyErr("input datatype %s, the model takes %s (or BYTES: encoded images)", in.Datatype, m.datatype())
		}
		want := append([]int64{int64(n)}, metadataShape(m)...)
		if !equalShape(in.Shape, want) {
			return 0, bodyErr("%s input shape %v, the model takes %v", in.Datatype, in.Shape, want)
		}
		if m.uint8Input {
			if err := json.Unmarshal(in.Data, &flatU8); err != nil || len(flatU8) != n*row {
				return 0, bodyErr("UINT8 input data must be a flat array of %d integers 0..255 in row-major order", n*row)
			}
			break
		}
		if err := json.Unmarshal(in.Data, &flat); err != nil {
			return 0, bodyErr("FP32 input data must be a flat array of numbers in row-major order: %v", err)
		}
		if len(flat) != n*row {
			return 0, bodyErr("FP32 input has %d values, shape %v needs %d", len(flat), in.Shape, n*row)
		}
		for i, v := range flat {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return 0, bodyErr("FP32 input holds NaN or Inf in sample %d", i/row)
			}
		}
	default:
		return 0, bodyErr("input datatype %q is not supported; send BYTES (encoded images) or %s", in.Datatype, m.datatype())
	}

	rctx, cancel := context.WithDeadline(context.Background(), start.Add(opts.timeout))
	defer cancel()
	jobs := make([]*job, n)
	for i := range jobs {
		jobs[i] = m.getJob()
	}
	defer func() {
		for _, j := range jobs {
			m.putJob(j)
		}
	}()
	for i, j := range jobs {
		switch {
		case images != nil:
			img, scratch, err := decodeBase64(j.img, j.scratch, []byte(images[i]))
			j.scratch = scratch
			if err != nil {
				return 0, fmt.Errorf("sample %d: %w", i, err)
			}
			j.img = img
			if err := s.preprocess(rctx, m, img, j); err != nil {
				return 0, fmt.Errorf("sample %d: %w", i, err)
			}
		case flatU8 != nil:
			copy(j.slotU8, flatU8[i*row:(i+1)*row])
		default:
			copy(j.slot, flat[i*row:(i+1)*row])
		}
	}

	// The samples are submitted together so that they can share a batch; the first failure
	// cancels the others (the request fails as a whole).
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, errs[i] = m.batcher.Submit(rctx, j, batcher.SubmitOptions{Priority: opts.priority}); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	var firstErr error
	for _, err := range errs {
		if err != nil && (firstErr == nil || errors.Is(firstErr, context.Canceled)) {
			firstErr = err
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	out := make([]float32, 0, n*m.classes)
	for _, j := range jobs {
		out = append(out, j.scores...)
	}
	return writeJSON(ctx, 200, v2Response{
		ModelName:    m.name,
		ModelVersion: "1",
		ID:           req.ID,
		Outputs:      []v2Output{{Name: m.cfg.Output.Name, Shape: []int64{int64(n), int64(m.classes)}, Datatype: "FP32", Data: out}},
	}), nil
}

// datatype is the model input's Open Inference Protocol datatype.
func (m *model) datatype() string {
	if m.uint8Input {
		return "UINT8"
	}
	return "FP32"
}

func metadataShape(m *model) []int64 {
	if m.cfg.Input.Layout == "NHWC" {
		return []int64{int64(m.cfg.Input.Height), int64(m.cfg.Input.Width), 3}
	}
	return []int64{3, int64(m.cfg.Input.Height), int64(m.cfg.Input.Width)}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// writeJSON writes v as the JSON body with status, and returns the status it wrote (500 if v
// cannot be encoded, e.g. a model output holding NaN or Inf).
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, 500, "cannot encode the response: "+err.Error())
		return 500
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return status
}
