package gateway

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/modeldesc"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/preprocess"
)

// The Open Inference Protocol (KServe v2) over HTTP:
//
//	GET  /v2                                  server metadata (name, version, extensions)
//	GET  /v2/health/live, /v2/health/ready    liveness, readiness
//	GET  /v2/models/{m}[/versions/{v}]        model metadata
//	GET  /v2/models/{m}[/versions/{v}]/ready  model readiness
//	GET  /v2/models/{m}[/versions/{v}]/config model configuration (Triton's extension)
//	GET  /v2/models[/{m}[/versions/{v}]]/stats statistics (Triton's extension; stats.go)
//	POST /v2/models/{m}[/versions/{v}]/infer  inference
//
// Each model is served under two names. {name} is its image interface: one BYTES input of
// encoded images (JPEG, PNG, WebP, GIF, BMP, TIFF), preprocessed in the gateway; in JSON each
// element is a base64 string, in binary tensor data the image's raw bytes. It also takes an
// FP32/UINT8 tensor of the model's input shape, for clients that preprocess. {name}.tensor is
// its tensor interface: one FP32 (or UINT8) input of the model's shape [-1, ...], already
// preprocessed, which is what a generic client that sends every listed input (perf_analyzer)
// can act on. Both list exactly one input.
//
// Extensions: binary_tensor_data (requests: Inference-Header-Content-Length, each input's
// parameters.binary_data_size; responses in binary when the request asks with
// parameters.binary_data_output or an output's parameters.binary_data), classification (an
// output's parameters.classification k: a BYTES [n, k] tensor of "<score>:<index>:<label>",
// best first, the score being the model's raw output as Triton gives it), statistics (Triton's:
// stats.go). Request bodies may be
// gzip- or deflate-encoded. Versions are real: an unknown version is a 404.

// Version is the gateway's version, reported by /v2 (set at build time).
var Version = "dev"

// tensorSuffix names a model's tensor interface.
const tensorSuffix = ".tensor"

// v2Extensions are the protocol extensions the gateway supports on every listener; the model
// repository extension is listed where it is served (serverMetadata).
var v2Extensions = []string{"binary_tensor_data", "classification", "statistics"}

// serverMetadata answers GET /v2. A client checks the extensions on the address it was given:
// model_repository is listed on the admin listener, and on the public one only when an admin
// token lets requests that carry it use the repository API there (it was listed on the public
// listener, whose repository paths answered 404).
func (s *Server) serverMetadata(ctx *fasthttp.RequestCtx, admin bool) {
	ext := v2Extensions
	if admin || s.adminTok != nil {
		ext = append(slices.Clip(ext), "model_repository")
	}
	s.writeJSON(ctx, 200, map[string]any{"name": "imagegate", "version": Version, "extensions": ext})
}

func (s *Server) handleV2(ctx *fasthttp.RequestCtx, path string) {
	isGet := ctx.IsGet() || ctx.IsHead()
	switch {
	case path == "/v2" || path == "/v2/":
		if !isGet {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		s.serverMetadata(ctx, false)
	case path == "/v2/health/live":
		if live, why := s.Live(); !live {
			b := append([]byte(`{"live":false,"reason":`), wire.AppendJSONString(nil, why)...)
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetContentType("application/json")
			ctx.SetBody(append(b, '}'))
			return
		}
		writeJSONRaw(ctx, 200, `{"live":true}`)
	case path == "/v2/health/ready":
		if s.ready() {
			writeJSONRaw(ctx, 200, `{"ready":true}`)
		} else {
			writeJSONRaw(ctx, fasthttp.StatusServiceUnavailable, `{"ready":false}`)
		}
	case strings.HasPrefix(path, "/v2/models/"):
		s.handleV2Model(ctx, strings.TrimPrefix(path, "/v2/models/"), isGet)
	case strings.HasPrefix(path, "/v2/repository"):
		s.publicRepository(ctx, path)
	default:
		s.notFound(ctx, path)
	}
}

// v2ModelPath splits what follows /v2/models/: {name}[.tensor][/versions/{v}][/{tail}]. ok is
// false for an empty version.
func v2ModelPath(rest string) (name, version, tail string, tensorOnly, ok bool) {
	name, tail, _ = strings.Cut(rest, "/")
	if v, found := strings.CutPrefix(tail, "versions/"); found {
		version, tail, _ = strings.Cut(v, "/")
		if version == "" {
			return "", "", "", false, false
		}
	}
	if base, found := strings.CutSuffix(name, tensorSuffix); found {
		name, tensorOnly = base, true
	}
	return name, version, tail, tensorOnly, true
}

// handleV2Model serves /v2/models/{name}[/versions/{v}][/ready|/config|/stats|/infer], and
// /v2/models/stats (every model's statistics, as Triton: it hides the metadata of a model
// named "stats", whose statistics are at /v2/models/stats/stats).
func (s *Server) handleV2Model(ctx *fasthttp.RequestCtx, rest string, isGet bool) {
	if rest == "stats" {
		s.serveStats(ctx, "", "")
		return
	}
	name, version, tail, tensorOnly, ok := v2ModelPath(rest)
	if !ok {
		s.notFound(ctx, "/v2/models/"+rest)
		return
	}
	if tail == "stats" { // every version of the model when none is named: no lookup
		if tensorOnly {
			name += tensorSuffix
		}
		s.serveStats(ctx, name, version)
		return
	}
	m, err := s.lookup(name, version)
	if err != nil {
		s.lookupFailed(ctx, err, false) // metadata and readiness are not counted (inference: handleInference)
		return
	}
	defer m.done()
	if (tail == "" || tail == "ready" || tail == "config") && !isGet {
		s.methodNotAllowed(ctx, "GET")
		return
	}
	switch tail {
	case "":
		s.modelMetadata(ctx, m, tensorOnly)
	case "ready":
		ready := s.ready() && !m.closing.Load()
		status := 200
		if !ready {
			status = fasthttp.StatusServiceUnavailable
		}
		s.writeJSON(ctx, status, map[string]any{"name": m.name + map[bool]string{true: tensorSuffix}[tensorOnly], "ready": ready})
	case "config":
		s.modelConfig(ctx, m, tensorOnly)
	default: // infer is routed before (inferenceRoute)
		s.notFound(ctx, "/v2/models/"+rest)
	}
}

func (s *Server) modelMetadata(ctx *fasthttp.RequestCtx, m *model, tensorOnly bool) {
	d := describe(m, tensorOnly)
	d.Versions = s.versions(m.name)
	s.writeJSON(ctx, 200, modeldesc.JSONMetadata(d))
}

// modelConfig answers Triton's model configuration extension (GET .../config).
func (s *Server) modelConfig(ctx *fasthttp.RequestCtx, m *model, tensorOnly bool) {
	s.writeJSON(ctx, 200, modeldesc.JSONConfig(describe(m, tensorOnly)))
}

// describe is m as its metadata and configuration describe it, under the name of the
// interface asked for (NAME or NAME.tensor); without the versions served.
func describe(m *model, tensorOnly bool) modeldesc.Model {
	d := modeldesc.Model{Name: m.name, TensorOnly: tensorOnly, TensorName: m.name + tensorSuffix,
		Input: m.inputName, Output: m.outputName, Datatype: m.datatype, Shape: m.shape,
		NHWC: m.pre.Options().Layout == preprocess.NHWC, Classes: m.classes,
		MaxBatch: m.maxBatch * m.instances, Parameters: m.parameters, Triton: m.config}
	if tensorOnly {
		d.Name = d.TensorName
	}
	return d
}

// writeJSON writes v as the JSON body with status.
func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, 500, "cannot encode the response: "+err.Error())
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// v2API is the Open Inference Protocol's inference front end.
type v2API struct{ tensorOnly bool }

// v2State is an inference request as parsed (pooled with the request).
type v2State struct {
	wire.InferRequest
	binaryBody []byte // the binary part of the body
}

// decodes is false: a v2 request is as often a tensor as images (the decode gate still judges
// the images it decodes).
func (v2API) decodes() bool { return false }

func (a v2API) parse(r *request) error {
	err := a.parseBody(r)
	// The samples hold what the request needs (the id and output names are copies): its body
	// and image buffers go back before it waits for its batch.
	r.v2.binaryBody, r.v2.In.Data = nil, nil
	r.dropBody()
	r.dropImage()
	return err
}

func (a v2API) parseBody(r *request) error {
	v := &r.v2
	body := r.body
	hdr := body
	if h := r.http.fc.Request.Header.Peek("Inference-Header-Content-Length"); h != nil {
		n, err := parseCount(h)
		if err != nil || n > len(body) {
			return wire.Malformed("Inference-Header-Content-Length is %q; the body has %d bytes", wire.Truncate(string(h), 20), len(body))
		}
		hdr, v.binaryBody = body[:n], body[n:]
	}
	if err := v.Parse(hdr); err != nil {
		return err
	}
	if v.HasID {
		r.adoptRequestID(v.ID) // the request's ID when its transport brought none
	}
	return r.parseInput(a.tensorOnly, nil)
}

// typedData is an input's data as typed values (gRPC's InferTensorContents): the field of its
// datatype.
type typedData struct {
	elems [][]byte  // BYTES: one encoded image each
	fp32  []float32 // FP32
	uints []uint32  // UINT8
}

// parseInput checks the parsed request (r.v2: its header) against the model and fills the
// request's samples from its data: JSON "data", binary bytes (r.v2.binaryBody; gRPC's
// raw_input_contents) or typed values (gRPC's contents, typed non-nil). Every transport's
// Open Inference Protocol front end ends here.
func (r *request) parseInput(tensorOnly bool, typed *typedData) error {
	v := &r.v2
	m := r.m
	in := &v.In
	if v.Inputs != 1 {
		return wire.Malformed("the model takes one input (%q), the request has %d", m.inputName, v.Inputs)
	}
	if string(in.Name) != m.inputName {
		return wire.Malformed("unknown input %q (the model's input is %q)", wire.Truncate(string(in.Name), 60), m.inputName)
	}
	for i := range v.Outs {
		o := &v.Outs[i]
		if string(o.Name) != m.outputName {
			return wire.Malformed("unknown output %q (the model's output is %q)", wire.Truncate(string(o.Name), 60), m.outputName)
		}
		if i > 0 {
			// Triton refuses a second request for the same output, and its clients find a
			// binary output's bytes by name: two outputs of one name would be read one as
			// the other. Classes carry their scores ("<score>:<index>:<label>").
			return wire.Malformed("output %q is requested twice; request it once, as scores or with parameters.classification as classes (each class carries its score)", m.outputName)
		}
		if o.Classification > m.classes {
			o.Classification = m.classes // as Triton: the top k, k at most the classes there are
		}
	}
	if in.NDim == 0 || in.Shape[0] < 1 {
		return wire.Malformed("input shape %v: want [n, ...] with n >= 1", in.Shape[:in.NDim])
	}
	if limit := int64(m.maxBatch * m.instances); in.Shape[0] > limit {
		return wire.Malformed("input has %d samples; at most %d per request (batching.max_batch_size x runtime.instances)", in.Shape[0], limit)
	}
	n := int(in.Shape[0])
	// The data: JSON "data", or binary_data_size bytes after the JSON header.
	if in.HasBinary == (in.Data != nil || typed != nil) {
		return wire.Malformed("input %q needs its data in exactly one place: \"data\" or parameters.binary_data_size (HTTP), contents or raw_input_contents (gRPC)", m.inputName)
	}
	if in.HasBinary && in.BinarySize != int64(len(v.binaryBody)) {
		return wire.Malformed("input binary_data_size is %d; %d bytes follow the JSON header", in.BinarySize, len(v.binaryBody))
	}
	if !in.HasBinary && len(v.binaryBody) > 0 {
		return wire.Malformed("%d bytes follow the JSON header but no input has parameters.binary_data_size", len(v.binaryBody))
	}
	dt := string(in.Datatype)
	switch {
	case dt == "BYTES" && !tensorOnly:
		if in.NDim > 2 || in.NDim == 2 && in.Shape[1] != 1 {
			return wire.Malformed("BYTES input shape %v: want [n] or [n, 1] (one encoded image per element)", in.Shape[:in.NDim])
		}
		return r.decodeImages(n, typed)
	case dt == m.datatype:
		want := append([]int64{int64(n)}, m.shape...)
		if !equalShape(in.Shape[:in.NDim], want) {
			return wire.Malformed("%s input shape %v, the model takes [n %s] (n samples; %v for this request's first dimension)", dt, in.Shape[:in.NDim], strings.Trim(fmt.Sprint(m.shape), "[]"), want)
		}
		if err := r.expect(n); err != nil {
			return err
		}
		samples, err := r.rows(false)
		if err != nil {
			return err
		}
		if in.HasBinary {
			if want := int64(n) * m.rowBytes(); in.BinarySize != want {
				return wire.Malformed("binary_data_size is %d; shape %v of %s needs %d bytes", in.BinarySize, in.Shape[:in.NDim], dt, want)
			}
			return samples.tensorBinary(v.binaryBody)
		}
		if typed != nil {
			raw, err := r.typedRaw(typed, n*m.rowLen)
			if err != nil {
				return err
			}
			return samples.tensorBinary(raw)
		}
		return samples.tensorJSON(in.Data)
	case tensorOnly:
		return wire.Malformed("input datatype %q: %s%s takes %s of shape %v", wire.Truncate(dt, 20), m.name, tensorSuffix, m.datatype, append([]int64{-1}, m.shape...))
	}
	return wire.Malformed("input datatype %q: %s takes BYTES (encoded images) or %s of shape %v", wire.Truncate(dt, 20), m.name, m.datatype, append([]int64{-1}, m.shape...))
}

// decodeImages decodes a BYTES input of n encoded images into n samples. Elements are counted
// (and, in binary, sized) before any is decoded; each is decoded into the request's one image
// buffer, so only the body and the rows are held.
func (r *request) decodeImages(n int, typed *typedData) error {
	in := &r.v2.In
	var next func() ([]byte, error)
	switch {
	case typed != nil:
		elems := typed.elems
		if len(elems) != n || len(typed.fp32) > 0 || len(typed.uints) > 0 {
			return wire.Malformed("BYTES input shape says %d elements, contents.bytes_contents holds %d (and no other field may be set)", n, len(elems))
		}
		next = func() ([]byte, error) {
			e := elems[0]
			elems = elems[1:]
			return e, nil
		}
	case in.HasBinary:
		raw := r.v2.binaryBody
		count, err := wire.CountBytesElements(raw)
		if err != nil {
			return err
		}
		if count != n {
			return wire.Malformed("BYTES input shape says %d elements, the binary data holds %d", n, count)
		}
		next = func() ([]byte, error) {
			var e []byte
			e, raw = wire.NextBytesElement(raw)
			return e, nil
		}
	default:
		strs, err := wire.JSONStrings(in.Data, n)
		if err != nil {
			return err
		}
		longest := 0
		for _, s := range strs {
			longest = max(longest, len(s))
		}
		// One image buffer serves every element in turn: the budget holds the largest.
		if err := r.reserve(int64(base64.StdEncoding.DecodedLen(longest))); err != nil {
			return err
		}
		next = func() ([]byte, error) {
			s := strs[0]
			strs = strs[1:]
			f, err := wire.StripDataURL(s)
			if err != nil {
				return nil, err
			}
			if r.img == nil {
				r.img = r.s.imageBufs.get()
			}
			img, scratch, err := wire.DecodeBase64(r.img, r.scratch, f, r.reserve)
			r.scratch = scratch
			if err == nil {
				r.img = img
			}
			return img, err
		}
	}
	if err := r.expect(n); err != nil {
		return err
	}
	for i := range n {
		img, err := next()
		if err == nil {
			err = r.decodeImage(i, img)
		}
		if err != nil {
			if n > 1 {
				return fmt.Errorf("element %d: %w", i, err)
			}
			return err
		}
	}
	return nil
}

// typedRaw lays out typed tensor values of the model's datatype as little-endian bytes (what
// tensorBinary fills rows from), count values exactly, within the memory budget.
func (r *request) typedRaw(typed *typedData, count int) ([]byte, error) {
	dt := r.m.datatype
	var have int
	switch dt {
	case "FP32":
		have = len(typed.fp32)
		if len(typed.uints) > 0 || len(typed.elems) > 0 {
			have = -1
		}
	default: // UINT8
		have = len(typed.uints)
		if len(typed.fp32) > 0 || len(typed.elems) > 0 {
			have = -1
		}
	}
	if have < 0 {
		return nil, wire.Malformed("%s input: its contents go in the field of its datatype (fp32_contents for FP32, uint_contents for UINT8), and no other", dt)
	}
	if have != count {
		return nil, wire.Malformed("%s input: contents hold %d values, its shape needs %d", dt, have, count)
	}
	size := int64(count * r.m.elemSize)
	if err := r.reserve(size); err != nil {
		return nil, err
	}
	raw := make([]byte, 0, size)
	if dt == "FP32" {
		for _, f := range typed.fp32 {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
		}
		return raw, nil
	}
	for i, u := range typed.uints {
		if u > 255 {
			return nil, wire.Malformed("UINT8 input: value %d at %d is out of 0..255", u, i)
		}
		raw = append(raw, byte(u))
	}
	return raw, nil
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

// write answers in JSON, or with binary tensor data where the request asked for it.
func (a v2API) write(r *request) error {
	v, m := &r.v2, r.m
	n := r.samples.len()
	outs := v.Outs
	if len(outs) == 0 {
		outs = append(outs, wire.Output{Name: []byte(m.outputName), Binary: -1})
	}
	b := r.out[:0]
	var bin []byte
	b = append(b, `{"model_name":`...)
	b = wire.AppendJSONString(b, m.name+map[bool]string{true: tensorSuffix}[a.tensorOnly])
	b = append(b, `,"model_version":`...)
	b = wire.AppendJSONString(b, m.version)
	if v.HasID {
		b = append(b, `,"id":`...)
		b = wire.AppendJSONString(b, string(v.ID))
	}
	b = append(b, `,"outputs":[`...)
	for oi, o := range outs {
		if oi > 0 {
			b = append(b, ',')
		}
		binaryOut := o.Binary == 1 || o.Binary == -1 && v.BinaryOutput
		b = append(b, `{"name":`...)
		b = wire.AppendJSONString(b, m.outputName)
		start := len(bin)
		if k := o.Classification; k > 0 {
			b = append(b, `,"datatype":"BYTES","shape":[`...)
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(k), 10)
			b = append(b, ']')
			var data []byte
			for i := range n {
				sc := r.samples.output(i, scoresOutput)
				for _, idx := range topIndices(sc, k) {
					e := classString(sc[idx], idx, m.labels[idx])
					if binaryOut {
						bin = wire.AppendBytesElement(bin, []byte(e))
						continue
					}
					if len(data) > 0 {
						data = append(data, ',')
					}
					data = wire.AppendJSONString(data, e)
				}
			}
			if !binaryOut {
				b = append(b, `,"data":[`...)
				b = append(b, data...)
				b = append(b, ']')
			}
		} else {
			b = append(b, `,"datatype":"FP32","shape":[`...)
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(m.classes), 10)
			b = append(b, ']')
			if binaryOut {
				for i := range n {
					for _, f := range r.samples.output(i, scoresOutput) {
						bin = binary.LittleEndian.AppendUint32(bin, math.Float32bits(f))
					}
				}
			} else {
				b = append(b, `,"data":[`...)
				for i := range n {
					for j, f := range r.samples.output(i, scoresOutput) {
						if i > 0 || j > 0 {
							b = append(b, ',')
						}
						b = wire.AppendJSONFloat32(b, f)
					}
				}
				b = append(b, ']')
			}
		}
		if binaryOut {
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(bin)-start), 10)
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	fc := r.http.fc
	if len(bin) > 0 || hasBinaryOutput(outs, v.BinaryOutput) {
		fc.Response.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(b)))
		fc.SetContentType("application/octet-stream")
		b = append(b, bin...)
	} else {
		fc.SetContentType("application/json")
	}
	r.out = b
	fc.SetBody(b)
	return nil
}

func hasBinaryOutput(outs []wire.Output, def bool) bool {
	for _, o := range outs {
		if o.Binary == 1 || o.Binary == -1 && def {
			return true
		}
	}
	return false
}

// classString is the classification extension's element: the raw output value (as C's %f
// writes it, as Triton does), the class index and its label.
func classString(v float32, idx int, label string) string {
	return strconv.FormatFloat(float64(v), 'f', 6, 32) + ":" + strconv.Itoa(idx) + ":" + label
}
