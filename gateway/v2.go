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

	"github.com/imagegate/imagegate/preprocess"
)

// The Open Inference Protocol (KServe v2) over HTTP:
//
//	GET  /v2                                  server metadata (name, version, extensions)
//	GET  /v2/health/live, /v2/health/ready    liveness, readiness
//	GET  /v2/models/{m}[/versions/{v}]        model metadata
//	GET  /v2/models/{m}[/versions/{v}]/ready  model readiness
//	GET  /v2/models/{m}[/versions/{v}]/config model configuration (Triton's extension)
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
// best first, the score being the model's raw output as Triton gives it). Request bodies may be
// gzip- or deflate-encoded. Versions are real: an unknown version is a 404.

// Version is the gateway's version, reported by /v2 (set at build time).
var Version = "dev"

// tensorSuffix names a model's tensor interface.
const tensorSuffix = ".tensor"

// v2Extensions are the protocol extensions the gateway supports on every listener; the model
// repository extension is listed where it is served (serverMetadata).
var v2Extensions = []string{"binary_tensor_data", "classification"}

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
		writeJSONRaw(ctx, 200, `{"live":true}`)
	case path == "/v2/health/ready":
		if s.ready.Load() {
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

// handleV2Model serves /v2/models/{name}[/versions/{v}][/ready|/infer].
func (s *Server) handleV2Model(ctx *fasthttp.RequestCtx, rest string, isGet bool) {
	name, version, tail, tensorOnly, ok := v2ModelPath(rest)
	if !ok {
		s.notFound(ctx, "/v2/models/"+rest)
		return
	}
	m, err := s.lookup(name, version)
	if err != nil {
		s.lookupFailed(ctx, err, tail == "infer") // inference requests are counted; metadata and readiness are not
		return
	}
	defer m.done()
	switch tail {
	case "":
		if !isGet {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		s.modelMetadata(ctx, m, tensorOnly)
	case "ready":
		if !isGet {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		ready := s.ready.Load() && !m.closing.Load()
		status := 200
		if !ready {
			status = fasthttp.StatusServiceUnavailable
		}
		s.writeJSON(ctx, status, map[string]any{"name": m.name + map[bool]string{true: tensorSuffix}[tensorOnly], "ready": ready})
	case "config":
		if !isGet {
			s.methodNotAllowed(ctx, "GET")
			return
		}
		s.modelConfig(ctx, m, tensorOnly)
	case "infer":
		if !ctx.IsPost() {
			m.met.req.observe(fasthttp.StatusMethodNotAllowed, reasonNotFound, 0)
			s.methodNotAllowed(ctx, "POST")
			return
		}
		s.serveInference(ctx, m, v2API{tensorOnly: tensorOnly})
	default:
		s.notFound(ctx, "/v2/models/"+rest)
	}
}

func (s *Server) modelMetadata(ctx *fasthttp.RequestCtx, m *model, tensorOnly bool) {
	versions := s.versions(m.name)
	input := map[string]any{"name": m.inputName, "datatype": "BYTES", "shape": []int64{-1},
		"parameters": map[string]any{
			"content":         "encoded image: JPEG, PNG, WebP, GIF (first frame), BMP or TIFF",
			"json_encoding":   "base64 string per image (a data: URL prefix is accepted)",
			"binary_encoding": "the image's raw bytes",
			"tensor_model":    m.name + tensorSuffix,
		}}
	name := m.name
	if tensorOnly {
		name += tensorSuffix
		input = map[string]any{"name": m.inputName, "datatype": m.datatype, "shape": append([]int64{-1}, m.shape...)}
	}
	s.writeJSON(ctx, 200, map[string]any{
		"name":     name,
		"versions": versions,
		"platform": "onnxruntime_onnx",
		"inputs":   []any{input},
		"outputs":  []any{map[string]any{"name": m.outputName, "datatype": "FP32", "shape": []int64{-1, int64(m.classes)}}},
	})
}

// modelConfig answers Triton's model configuration extension (GET .../config), which its
// tools read before they send anything (perf_analyzer stops without it; Triton's image
// client takes max_batch_size from it). Dimensions are per sample, as in Triton's
// configuration: the image interface takes one encoded image per sample (shape [n] or
// [n, 1]), the tensor interface the model's input. max_batch_size is what one request may
// carry (batching.max_batch_size times runtime.instances).
func (s *Server) modelConfig(ctx *fasthttp.RequestCtx, m *model, tensorOnly bool) {
	name := m.name
	input := map[string]any{"name": m.inputName, "data_type": "TYPE_STRING", "format": "FORMAT_NONE", "dims": []int64{1}}
	if tensorOnly {
		name += tensorSuffix
		format := "FORMAT_NCHW"
		if m.pre.Options().Layout == preprocess.NHWC {
			format = "FORMAT_NHWC"
		}
		dt := "TYPE_FP32"
		if m.datatype == "UINT8" {
			dt = "TYPE_UINT8"
		}
		input = map[string]any{"name": m.inputName, "data_type": dt, "format": format, "dims": m.shape}
	}
	params := make(map[string]any, len(m.parameters))
	for k, v := range m.parameters {
		params[k] = map[string]string{"string_value": v} // Triton's ModelParameter
	}
	s.writeJSON(ctx, 200, map[string]any{
		"name":             name,
		"platform":         "onnxruntime_onnx",
		"backend":          "onnxruntime",
		"max_batch_size":   m.maxBatch * m.instances,
		"input":            []any{input},
		"output":           []any{map[string]any{"name": m.outputName, "data_type": "TYPE_FP32", "dims": []int64{int64(m.classes)}}},
		"dynamic_batching": map[string]any{},
		"parameters":       params,
	})
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

// Limits of an inference request's JSON header.
const (
	maxIDBytes   = 256
	maxNameBytes = 256
	maxDims      = 8
	maxOutputs   = 8
)

// v2State is an inference request as parsed (pooled with the request).
type v2State struct {
	id           []byte
	hasID        bool
	binaryOutput bool
	inputs       int
	in           v2Input
	outs         []v2Output
	binaryBody   []byte // the binary part of the body
}

type v2Input struct {
	name, datatype []byte
	shape          [maxDims]int64
	ndim           int
	data           []byte // the raw JSON value of "data"
	binarySize     int64
	hasBinary      bool
}

type v2Output struct {
	name           []byte
	binary         int8 // -1 unset, 0 false, 1 true
	classification int
}

func (v v2State) reset() v2State {
	return v2State{id: v.id[:0], outs: v.outs[:0], in: v2Input{name: v.in.name[:0], datatype: v.in.datatype[:0]}}
}

// decodes is false: a v2 request is as often a tensor as images (the decode gate still judges
// the images it decodes).
func (v2API) decodes() bool { return false }

func (a v2API) parse(r *request) error {
	err := a.parseBody(r)
	// The samples hold what the request needs (the id and output names are copies): its body
	// and image buffers go back before it waits for its batch.
	r.v2.binaryBody, r.v2.in.data = nil, nil
	r.dropBody()
	r.dropImage()
	return err
}

func (a v2API) parseBody(r *request) error {
	v := &r.v2
	body := r.body
	hdr := body
	if h := r.fc.Request.Header.Peek("Inference-Header-Content-Length"); h != nil {
		n, err := parseCount(h)
		if err != nil || n > len(body) {
			return bodyErr("Inference-Header-Content-Length is %q; the body has %d bytes", truncate(string(h), 20), len(body))
		}
		hdr, v.binaryBody = body[:n], body[n:]
	}
	if err := v.parseHeader(hdr); err != nil {
		return err
	}
	m := r.m
	in := &v.in
	if v.inputs != 1 {
		return bodyErr("the model takes one input (%q), the request has %d", m.inputName, v.inputs)
	}
	if string(in.name) != m.inputName {
		return bodyErr("unknown input %q (the model's input is %q)", truncate(string(in.name), 60), m.inputName)
	}
	for i := range v.outs {
		o := &v.outs[i]
		if string(o.name) != m.outputName {
			return bodyErr("unknown output %q (the model's output is %q)", truncate(string(o.name), 60), m.outputName)
		}
		if i > 0 {
			// Triton refuses a second request for the same output, and its clients find a
			// binary output's bytes by name: two outputs of one name would be read one as
			// the other. Classes carry their scores ("<score>:<index>:<label>").
			return bodyErr("output %q is requested twice; request it once, as scores or with parameters.classification as classes (each class carries its score)", m.outputName)
		}
		if o.classification > m.classes {
			o.classification = m.classes // as Triton: the top k, k at most the classes there are
		}
	}
	if in.ndim == 0 || in.shape[0] < 1 {
		return bodyErr("input shape %v: want [n, ...] with n >= 1", in.shape[:in.ndim])
	}
	if limit := int64(m.maxBatch * m.instances); in.shape[0] > limit {
		return bodyErr("input has %d samples; at most %d per request (batching.max_batch_size x runtime.instances)", in.shape[0], limit)
	}
	n := int(in.shape[0])
	// The data: JSON "data", or binary_data_size bytes after the JSON header.
	if in.hasBinary == (in.data != nil) {
		return bodyErr("input %q needs exactly one of \"data\" and parameters.binary_data_size", m.inputName)
	}
	if in.hasBinary && in.binarySize != int64(len(v.binaryBody)) {
		return bodyErr("input binary_data_size is %d; %d bytes follow the JSON header", in.binarySize, len(v.binaryBody))
	}
	if !in.hasBinary && len(v.binaryBody) > 0 {
		return bodyErr("%d bytes follow the JSON header but no input has parameters.binary_data_size", len(v.binaryBody))
	}
	dt := string(in.datatype)
	switch {
	case dt == "BYTES" && !a.tensorOnly:
		if in.ndim > 2 || in.ndim == 2 && in.shape[1] != 1 {
			return bodyErr("BYTES input shape %v: want [n] or [n, 1] (one encoded image per element)", in.shape[:in.ndim])
		}
		return r.decodeImages(n)
	case dt == m.datatype:
		want := append([]int64{int64(n)}, m.shape...)
		if !equalShape(in.shape[:in.ndim], want) {
			return bodyErr("%s input shape %v, the model takes [n %s] (n samples; %v for this request's first dimension)", dt, in.shape[:in.ndim], strings.Trim(fmt.Sprint(m.shape), "[]"), want)
		}
		if err := r.expect(n); err != nil {
			return err
		}
		samples, err := r.rows(false)
		if err != nil {
			return err
		}
		if in.hasBinary {
			if want := int64(n) * m.rowBytes(); in.binarySize != want {
				return bodyErr("binary_data_size is %d; shape %v of %s needs %d bytes", in.binarySize, in.shape[:in.ndim], dt, want)
			}
			return samples.tensorBinary(v.binaryBody)
		}
		return samples.tensorJSON(in.data)
	case a.tensorOnly:
		return bodyErr("input datatype %q: %s%s takes %s of shape %v", truncate(dt, 20), m.name, tensorSuffix, m.datatype, append([]int64{-1}, m.shape...))
	}
	return bodyErr("input datatype %q: %s takes BYTES (encoded images) or %s of shape %v", truncate(dt, 20), m.name, m.datatype, append([]int64{-1}, m.shape...))
}

// decodeImages decodes a BYTES input of n encoded images into n samples. Elements are counted
// (and, in binary, sized) before any is decoded; each is decoded into the request's one image
// buffer, so only the body and the rows are held.
func (r *request) decodeImages(n int) error {
	in := &r.v2.in
	var next func() ([]byte, error)
	if in.hasBinary {
		raw := r.v2.binaryBody
		count := 0
		for p := raw; len(p) > 0; count++ {
			if len(p) < 4 {
				return bodyErr("binary BYTES data: element %d has a truncated length", count)
			}
			l := binary.LittleEndian.Uint32(p)
			if uint64(l) > uint64(len(p)-4) {
				return bodyErr("binary BYTES data: element %d declares %d bytes, %d remain", count, l, len(p)-4)
			}
			p = p[4+l:]
		}
		if count != n {
			return bodyErr("BYTES input shape says %d elements, the binary data holds %d", n, count)
		}
		next = func() ([]byte, error) {
			l := binary.LittleEndian.Uint32(raw)
			e := raw[4 : 4+l]
			raw = raw[4+l:]
			return e, nil
		}
	} else {
		strs, err := jsonStrings(in.data, n)
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
			f, err := stripDataURL(s)
			if err != nil {
				return nil, err
			}
			if r.img == nil {
				r.img = r.s.imageBufs.get()
			}
			img, scratch, err := decodeBase64Budget(r.img, r.scratch, f, r.reserve)
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
	outs := v.outs
	if len(outs) == 0 {
		outs = append(outs, v2Output{name: []byte(m.outputName), binary: -1})
	}
	b := r.out[:0]
	var bin []byte
	b = append(b, `{"model_name":`...)
	b = appendJSONString(b, m.name+map[bool]string{true: tensorSuffix}[a.tensorOnly])
	b = append(b, `,"model_version":`...)
	b = appendJSONString(b, m.version)
	if v.hasID {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, string(v.id))
	}
	b = append(b, `,"outputs":[`...)
	for oi, o := range outs {
		if oi > 0 {
			b = append(b, ',')
		}
		binaryOut := o.binary == 1 || o.binary == -1 && v.binaryOutput
		b = append(b, `{"name":`...)
		b = appendJSONString(b, m.outputName)
		start := len(bin)
		if k := o.classification; k > 0 {
			b = append(b, `,"datatype":"BYTES","shape":[`...)
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(k), 10)
			b = append(b, ']')
			var data []byte
			for i := range n {
				sc := r.samples.scores(i)
				for _, idx := range topIndices(sc, k) {
					e := classString(sc[idx], idx, m.labels[idx])
					if binaryOut {
						bin = binary.LittleEndian.AppendUint32(bin, uint32(len(e)))
						bin = append(bin, e...)
						continue
					}
					if len(data) > 0 {
						data = append(data, ',')
					}
					data = appendJSONString(data, e)
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
					for _, f := range r.samples.scores(i) {
						bin = binary.LittleEndian.AppendUint32(bin, math.Float32bits(f))
					}
				}
			} else {
				b = append(b, `,"data":[`...)
				for i := range n {
					for j, f := range r.samples.scores(i) {
						if i > 0 || j > 0 {
							b = append(b, ',')
						}
						b = appendJSONFloat32(b, f)
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
	fc := r.fc
	if len(bin) > 0 || hasBinaryOutput(outs, v.binaryOutput) {
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

func hasBinaryOutput(outs []v2Output, def bool) bool {
	for _, o := range outs {
		if o.binary == 1 || o.binary == -1 && def {
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

func appendJSONFloat32(b []byte, f float32) []byte {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, float64(f), 'g', -1, 32)
}

// parseHeader reads the inference request's JSON header strictly, within its limits: one
// pass, no value kept but the fields below (the input's "data" as its raw span).
func (v *v2State) parseHeader(b []byte) error {
	p := jsonScanner{b: b}
	var seen uint16
	return p.object(func(key []byte, esc bool) error {
		switch {
		case keyEquals(key, esc, "id"):
			if err := once(&seen, 1, "id"); err != nil {
				return err
			}
			s, err := p.stringValue(maxIDBytes, "id")
			if err != nil {
				return err
			}
			v.id, v.hasID = append(v.id[:0], s...), true
		case keyEquals(key, esc, "parameters"):
			if err := once(&seen, 2, "parameters"); err != nil {
				return err
			}
			var pseen uint16
			return p.object(func(k []byte, esc bool) error {
				if keyEquals(k, esc, "binary_data_output") {
					if err := once(&pseen, 1, "parameters.binary_data_output"); err != nil {
						return err
					}
					b, err := p.boolValue("parameters.binary_data_output")
					v.binaryOutput = b
					return err
				}
				return p.skipValue(0)
			}, false)
		case keyEquals(key, esc, "inputs"):
			if err := once(&seen, 4, "inputs"); err != nil {
				return err
			}
			return p.array(func() error {
				v.inputs++
				if v.inputs > 1 {
					return p.skipValue(0) // counted; the model takes one
				}
				return v.parseInput(&p)
			})
		case keyEquals(key, esc, "outputs"):
			if err := once(&seen, 8, "outputs"); err != nil {
				return err
			}
			return p.array(func() error {
				if len(v.outs) >= maxOutputs {
					return bodyErr("more than %d outputs requested", maxOutputs)
				}
				v.outs = append(v.outs, v2Output{binary: -1})
				return v.parseOutput(&p, &v.outs[len(v.outs)-1])
			})
		default:
			return p.skipValue(0)
		}
		return nil
	}, true)
}

// once marks bit in *seen for a key of the object being read, and refuses the key a second
// time: which of two values counts is left open by JSON, so the request is ambiguous (the
// article's API refuses a second "image" likewise).
func once(seen *uint16, bit uint16, key string) error {
	if *seen&bit != 0 {
		return bodyErr("the key %q appears twice", key)
	}
	*seen |= bit
	return nil
}

func (v *v2State) parseInput(p *jsonScanner) error {
	in := &v.in
	var seen uint16
	return p.object(func(key []byte, esc bool) error {
		switch {
		case keyEquals(key, esc, "name"):
			if err := once(&seen, 1, "inputs[].name"); err != nil {
				return err
			}
			s, err := p.stringValue(maxNameBytes, "input name")
			in.name = append(in.name[:0], s...)
			return err
		case keyEquals(key, esc, "datatype"):
			if err := once(&seen, 2, "inputs[].datatype"); err != nil {
				return err
			}
			s, err := p.stringValue(16, "datatype")
			in.datatype = append(in.datatype[:0], s...)
			return err
		case keyEquals(key, esc, "shape"):
			if err := once(&seen, 4, "inputs[].shape"); err != nil {
				return err
			}
			in.ndim = 0
			return p.array(func() error {
				if in.ndim == maxDims {
					return bodyErr("shape has more than %d dimensions", maxDims)
				}
				d, err := p.intValue("shape")
				if err == nil && d < 0 {
					err = bodyErr("shape dimensions must not be negative, got %d", d)
				}
				in.shape[in.ndim] = d
				in.ndim++
				return err
			})
		case keyEquals(key, esc, "parameters"):
			if err := once(&seen, 8, "inputs[].parameters"); err != nil {
				return err
			}
			var pseen uint16
			return p.object(func(k []byte, esc bool) error {
				if keyEquals(k, esc, "binary_data_size") {
					if err := once(&pseen, 1, "inputs[].parameters.binary_data_size"); err != nil {
						return err
					}
					d, err := p.intValue("binary_data_size")
					if err == nil && d < 0 {
						err = bodyErr("binary_data_size must not be negative")
					}
					in.binarySize, in.hasBinary = d, true
					return err
				}
				return p.skipValue(0)
			}, false)
		case keyEquals(key, esc, "data"):
			if err := once(&seen, 16, "inputs[].data"); err != nil {
				return err
			}
			start := p.i
			if err := p.skipValue(0); err != nil {
				return err
			}
			in.data = p.b[start:p.i]
			return nil
		}
		return p.skipValue(0)
	}, false)
}

func (v *v2State) parseOutput(p *jsonScanner, o *v2Output) error {
	var seen uint16
	return p.object(func(key []byte, esc bool) error {
		switch {
		case keyEquals(key, esc, "name"):
			if err := once(&seen, 1, "outputs[].name"); err != nil {
				return err
			}
			s, err := p.stringValue(maxNameBytes, "output name")
			o.name = append(o.name[:0], s...)
			return err
		case keyEquals(key, esc, "parameters"):
			if err := once(&seen, 2, "outputs[].parameters"); err != nil {
				return err
			}
			var pseen uint16
			return p.object(func(k []byte, esc bool) error {
				switch {
				case keyEquals(k, esc, "binary_data"):
					if err := once(&pseen, 1, "outputs[].parameters.binary_data"); err != nil {
						return err
					}
					b, err := p.boolValue("binary_data")
					o.binary = 0
					if b {
						o.binary = 1
					}
					return err
				case keyEquals(k, esc, "classification"):
					if err := once(&pseen, 2, "outputs[].parameters.classification"); err != nil {
						return err
					}
					d, err := p.intValue("classification")
					if err == nil && (d < 1 || d > math.MaxInt32) {
						err = bodyErr("classification must be a positive count, got %d", d)
					}
					o.classification = int(d)
					return err
				}
				return p.skipValue(0)
			}, false)
		}
		return p.skipValue(0)
	}, false)
}
