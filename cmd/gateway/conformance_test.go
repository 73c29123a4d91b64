package main_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The Open Inference Protocol conformance test. Every request is written here byte by byte
// from the protocol's text, not with the project's client or server code:
//
//   - KServe's "Predict Protocol - Version 2" (required_api.md): health (200 true, 4xx false),
//     server metadata {name, version, extensions}, model metadata {name, versions, platform,
//     inputs, outputs} of {name, datatype, shape} with -1 for variable dimensions, the
//     inference request {id, parameters, inputs [{name, shape, datatype, parameters, data}],
//     outputs [{name, parameters}]} and response {model_name, model_version, id, parameters,
//     outputs [{name, shape, datatype, parameters, data}]}, tensor data row-major, flat or
//     nested, errors as {"error": "..."} with an HTTP error status, versions in the path.
//   - Triton's binary tensor data extension (extension_binary_data.md): binary data after the
//     JSON in input/output order, little-endian, BYTES elements as a 4-byte little-endian
//     length then the bytes; inputs' "binary_data_size"; outputs' "binary_data" and the
//     request's "binary_data_output" (an output's own setting wins); the
//     Inference-Header-Content-Length header on requests and responses that carry binary
//     data; "binary_tensor_data" in the server's extensions.
//   - Triton's classification extension (extension_classification.md): an output's
//     "classification" k gives a BYTES tensor [batch, k] of "<value>:<index>[:<label>]",
//     highest value first; "classification" in the server's extensions.
//
// The gateway's own conventions checked here are those its README documents: BYTES elements
// are encoded images, base64 strings in JSON; {name}.tensor is the model's tensor interface.
// Every float reference is computed on this machine from the same server: the article API's
// softmax scores of the same photos, and the scores of an image against those of the tensor
// its preprocessing makes of it.

// conformance talks to one gateway serving the ImageNet model as "mobilenetv2".
type conformance struct {
	t      *testing.T
	g      *gateway
	labels []string
}

// exchange is one answer, split as the binary data extension says.
type exchange struct {
	status int
	header http.Header
	head   []byte // the JSON part
	bin    []byte // the bytes after it (Inference-Header-Content-Length)
}

// post sends body; headerLen >= 0 adds Inference-Header-Content-Length. Extra headers are
// name, value pairs.
func (c *conformance) post(path string, body []byte, headerLen int, extra ...string) exchange {
	c.t.Helper()
	ct := "application/json"
	if headerLen >= 0 {
		ct = "application/octet-stream"
		extra = append(extra, "Inference-Header-Content-Length", strconv.Itoa(headerLen))
	}
	a := c.g.do("POST", path, ct, body, extra...)
	if a.status < 0 {
		c.t.Fatalf("POST %s: %s", path, a.body)
	}
	x := exchange{status: a.status, header: a.header, head: a.body}
	if v := a.header.Get("Inference-Header-Content-Length"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > len(a.body) {
			c.t.Fatalf("POST %s: Inference-Header-Content-Length %q for a body of %d bytes", path, v, len(a.body))
		}
		x.head, x.bin = a.body[:n], a.body[n:]
	}
	return x
}

// specResponse is $inference_response; decoding refuses fields the protocol does not define.
type specResponse struct {
	ModelName    string           `json:"model_name"`
	ModelVersion *string          `json:"model_version"`
	ID           *string          `json:"id"`
	Parameters   map[string]any   `json:"parameters"`
	Outputs      []specOutputData `json:"outputs"`
}

// specOutputData is $response_output.
type specOutputData struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

// ok checks a successful inference answer's JSON against the schema and returns it.
func (c *conformance) ok(what string, x exchange) specResponse {
	c.t.Helper()
	if x.status != 200 {
		c.t.Fatalf("%s: status %d %s", what, x.status, x.head)
	}
	var r specResponse
	dec := json.NewDecoder(bytes.NewReader(x.head))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || dec.More() {
		c.t.Fatalf("%s: the response is not an $inference_response (%v): %.300s", what, err, x.head)
	}
	if !utf8.Valid(x.head) {
		c.t.Fatalf("%s: the response's JSON is not UTF-8 (RFC 8259): %q", what, x.head[:min(len(x.head), 200)])
	}
	if r.ModelName == "" || r.Outputs == nil {
		c.t.Fatalf("%s: model_name or outputs missing: %.300s", what, x.head)
	}
	binary := x.header.Get("Inference-Header-Content-Length") != ""
	if ct := x.header.Get("Content-Type"); binary && ct != "application/octet-stream" || !binary && !strings.HasPrefix(ct, "application/json") {
		c.t.Fatalf("%s: Content-Type %q with binary data %v", what, ct, binary)
	}
	// Binary outputs claim the bytes after the JSON, in order and exactly.
	total := 0
	for _, o := range r.Outputs {
		if o.Name == "" || o.Datatype == "" || o.Shape == nil {
			c.t.Fatalf("%s: output without name, datatype or shape: %.300s", what, x.head)
		}
		if raw, has := o.Parameters["binary_data_size"]; has {
			n, err := strconv.Atoi(string(raw))
			if err != nil || n < 0 || o.Data != nil {
				c.t.Fatalf("%s: output %s: binary_data_size %s with data %v", what, o.Name, raw, o.Data != nil)
			}
			total += n
		} else if o.Data == nil {
			c.t.Fatalf("%s: output %s has neither data nor binary_data_size", what, o.Name)
		}
	}
	if total != len(x.bin) || total > 0 && !binary {
		c.t.Fatalf("%s: outputs claim %d binary bytes, %d follow the JSON (header %v)", what, total, len(x.bin), binary)
	}
	return r
}

// refused checks an error answer: the status, and a body that is exactly {"error": "<text>"}.
func (c *conformance) refused(what string, x exchange, status int) {
	c.t.Helper()
	if x.status != status {
		c.t.Errorf("%s: status %d, want %d: %.300s", what, x.status, status, x.head)
		return
	}
	c.errorObject(what, x.header, x.head)
}

func (c *conformance) errorObject(what string, h http.Header, body []byte) {
	c.t.Helper()
	var e map[string]json.RawMessage
	var msg string
	if json.Unmarshal(body, &e) != nil || len(e) != 1 || json.Unmarshal(e["error"], &msg) != nil || msg == "" {
		c.t.Errorf("%s: body is not {\"error\": \"...\"}: %.300s", what, body)
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		c.t.Errorf("%s: error with Content-Type %q", what, h.Get("Content-Type"))
	}
	c.t.Logf("%s: %s", what, msg)
}

// numbers flattens JSON tensor data (nested arrays of numbers) in row-major order.
func (c *conformance) numbers(what string, raw json.RawMessage) []float64 {
	c.t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		c.t.Fatalf("%s: data %v", what, err)
	}
	var out []float64
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case float64:
			out = append(out, x)
		default:
			c.t.Fatalf("%s: data element %v is not a number", what, v)
		}
	}
	walk(v)
	return out
}

func (c *conformance) strings(what string, raw json.RawMessage) []string {
	c.t.Helper()
	var v []string
	if err := json.Unmarshal(raw, &v); err != nil {
		c.t.Fatalf("%s: data is not an array of strings: %v", what, err)
	}
	return v
}

// lengthPrefixed splits binary BYTES data: a 4-byte little-endian length, then the bytes.
func (c *conformance) lengthPrefixed(what string, b []byte) []string {
	c.t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) > len(b)-4 {
			c.t.Fatalf("%s: malformed binary BYTES data", what)
		}
		n := binary.LittleEndian.Uint32(b)
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

func littleEndianFloats(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

func appendLengthPrefixed(b []byte, elems ...[]byte) []byte {
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// topK is the k indices of the highest values, highest first (ties: lower index).
func topK(v []float64, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case v[a] > v[b]:
			return -1
		case v[a] < v[b]:
			return 1
		}
		return 0
	})
	return idx[:k]
}

var classRE = regexp.MustCompile(`^(-?[0-9]+\.[0-9]+):([0-9]+):(.+)$`)

// checkClasses checks a classification row against the scores it was made from.
func (c *conformance) checkClasses(what string, got []string, scores []float64) {
	c.t.Helper()
	want := topK(scores, len(got))
	for j, s := range got {
		m := classRE.FindStringSubmatch(s)
		if m == nil {
			c.t.Fatalf("%s: class %q is not <value>:<index>:<label>", what, s)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		idx, _ := strconv.Atoi(m[2])
		if idx != want[j] || m[3] != c.labels[idx] || math.Abs(v-scores[idx]) > 1e-4 { // scores of another request of the same images
			c.t.Fatalf("%s: class %d is %q, want %.6f:%d:%s", what, j, s, scores[want[j]], want[j], c.labels[want[j]])
		}
	}
}

func TestConformance(t *testing.T) {
	g := startGateway(t, "models:\n"+imagenetModelYAML(t, "{max_batch_size: 4, max_queue_delay: 2ms}"))
	c := &conformance{t: t, g: g, labels: imagenetLabels(t)}
	photos := sharedPhotos(t, "skimage_coffee.png", "skimage_chelsea_cat.png")
	coffee, cat := photos[0], photos[1]
	const infer = "/v2/models/mobilenetv2/infer"

	// Health: 200 is true, 4xx false.
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/mobilenetv2/ready",
		"/v2/models/mobilenetv2/versions/1/ready", "/v2/models/mobilenetv2.tensor/ready", "/v2/models/mobilenetv2.tensor/versions/1/ready"} {
		if a := g.do("GET", p, "", nil); a.status != 200 {
			t.Errorf("GET %s: %d %s", p, a.status, a.body)
		}
	}
	for _, p := range []string{"/v2/models/nope/ready", "/v2/models/mobilenetv2/versions/2/ready"} {
		if a := g.do("GET", p, "", nil); a.status < 400 || a.status > 499 {
			t.Errorf("GET %s: %d, want 4xx (false)", p, a.status)
		}
	}

	// Server metadata.
	a := g.do("GET", "/v2", "", nil)
	var sm struct {
		Name       *string
		Version    *string
		Extensions []string
	}
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	if a.status != 200 || dec.Decode(&sm) != nil || sm.Name == nil || *sm.Name == "" || sm.Version == nil || sm.Extensions == nil ||
		!slices.Contains(sm.Extensions, "binary_tensor_data") || !slices.Contains(sm.Extensions, "classification") {
		t.Fatalf("GET /v2: %d %s", a.status, a.body)
	}

	// Model metadata: the image interface and the tensor interface, with and without a version.
	type tensorMeta struct {
		Name       string
		Datatype   string
		Shape      []int64
		Parameters map[string]any
	}
	type modelMeta struct {
		Name       string
		Versions   []string
		Platform   string
		Inputs     []tensorMeta
		Outputs    []tensorMeta
		Properties map[string]string // optional: KServe's open_inference_rest.yaml, gRPC's properties
	}
	meta := func(path string) modelMeta {
		a := g.do("GET", path, "", nil)
		var m modelMeta
		dec := json.NewDecoder(bytes.NewReader(a.body))
		dec.DisallowUnknownFields()
		if a.status != 200 || dec.Decode(&m) != nil || m.Platform == "" || !slices.Contains(m.Versions, "1") || m.Inputs == nil || m.Outputs == nil {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		for _, tm := range append(slices.Clone(m.Inputs), m.Outputs...) {
			if tm.Name == "" || !slices.Contains([]string{"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
				"FP16", "FP32", "FP64", "BYTES"}, tm.Datatype) || tm.Shape == nil || slices.ContainsFunc(tm.Shape, func(d int64) bool { return d < -1 }) {
				t.Fatalf("GET %s: bad $metadata_tensor %+v", path, tm)
			}
		}
		return m
	}
	for _, p := range []string{"/v2/models/mobilenetv2", "/v2/models/mobilenetv2/versions/1"} {
		m := meta(p)
		if m.Name != "mobilenetv2" || len(m.Inputs) != 1 || m.Inputs[0].Name != "input" || m.Inputs[0].Datatype != "BYTES" ||
			!slices.Equal(m.Inputs[0].Shape, []int64{-1}) || len(m.Outputs) != 1 || m.Outputs[0].Name != "output" ||
			m.Outputs[0].Datatype != "FP32" || !slices.Equal(m.Outputs[0].Shape, []int64{-1, 1000}) {
			t.Fatalf("GET %s: %+v", p, m)
		}
	}
	if m := meta("/v2/models/mobilenetv2.tensor/versions/1"); m.Name != "mobilenetv2.tensor" || len(m.Inputs) != 1 ||
		m.Inputs[0].Datatype != "FP32" || !slices.Equal(m.Inputs[0].Shape, []int64{-1, 3, 224, 224}) ||
		len(m.Outputs) != 1 || !slices.Equal(m.Outputs[0].Shape, []int64{-1, 1000}) {
		t.Fatalf("tensor interface metadata: %+v", m)
	}
	// Triton's model configuration (extension_model_configuration.md), which perf_analyzer and
	// Triton's image client read first: per-sample dims, and max_batch_size the samples one
	// request may carry (max_batch_size 4 x 2 instances).
	type modelConfig struct {
		Name, Platform, Backend string
		MaxBatchSize            int `json:"max_batch_size"`
		Input, Output           []struct {
			Name     string
			DataType string `json:"data_type"`
			Format   string
			Dims     []int64
		}
		DynamicBatching *struct{} `json:"dynamic_batching"`
		// Parameters say where each setting came from (Triton's ModelParameter).
		Parameters map[string]struct {
			StringValue string `json:"string_value"`
		}
	}
	config := func(path string) modelConfig {
		a := g.do("GET", path, "", nil)
		var mc modelConfig
		dec := json.NewDecoder(bytes.NewReader(a.body))
		dec.DisallowUnknownFields()
		if a.status != 200 || dec.Decode(&mc) != nil || len(mc.Input) != 1 || len(mc.Output) != 1 || mc.DynamicBatching == nil ||
			mc.Platform != "onnxruntime_onnx" || mc.MaxBatchSize != 8 || mc.Output[0].Name != "output" ||
			mc.Output[0].DataType != "TYPE_FP32" || !slices.Equal(mc.Output[0].Dims, []int64{1000}) ||
			mc.Parameters["input.width"].StringValue != "224 (model)" {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		return mc
	}
	for _, p := range []string{"/v2/models/mobilenetv2/config", "/v2/models/mobilenetv2/versions/1/config"} {
		if in := config(p).Input[0]; in.Name != "input" || in.DataType != "TYPE_STRING" || !slices.Equal(in.Dims, []int64{1}) {
			t.Fatalf("GET %s: input %+v", p, in)
		}
	}
	if mc := config("/v2/models/mobilenetv2.tensor/config"); mc.Name != "mobilenetv2.tensor" || mc.Input[0].DataType != "TYPE_FP32" ||
		mc.Input[0].Format != "FORMAT_NCHW" || !slices.Equal(mc.Input[0].Dims, []int64{3, 224, 224}) {
		t.Fatalf("tensor interface configuration: %+v", mc)
	}
	nine := `{"inputs":[{"name":"input","shape":[9],"datatype":"BYTES","data":[` + strings.Repeat(`"aGk=",`, 8) + `"aGk="]}]}`
	if a := g.do("POST", "/v2/models/mobilenetv2/infer", "application/json", []byte(nine)); a.status != 400 || !strings.Contains(string(a.body), "at most 8") {
		t.Fatalf("9 samples, one more than max_batch_size: %d %s", a.status, a.body)
	}
	for _, p := range []string{"/v2/models/nope", "/v2/models/mobilenetv2/versions/2", "/v2/models/mobilenetv2/versions/2/ready", "/v2/models/mobilenetv2/versions/2/config"} {
		a := g.do("GET", p, "", nil)
		if a.status != 404 {
			t.Errorf("GET %s: %d, want 404", p, a.status)
		}
		c.errorObject("GET "+p, a.header, a.body)
	}

	// JSON inference: BYTES images as base64, flat [2] and nested [2, 1]; an id is echoed;
	// the scores' softmax equals the article API's for the same photos.
	refs := [][]float64{articleScores(t, g, coffee), articleScores(t, g, cat)}
	checkScores := func(what string, o specOutputData, data []float64, n int) {
		t.Helper()
		if o.Name != "output" || o.Datatype != "FP32" || !slices.Equal(o.Shape, []int64{int64(n), 1000}) || len(data) != n*1000 {
			t.Fatalf("%s: output %s %s %v with %d values", what, o.Name, o.Datatype, o.Shape, len(data))
		}
		for i := range n {
			row := make([]float32, 1000)
			for j := range row {
				row[j] = float32(data[i*1000+j])
			}
			if d := maxDiff(softmax64(row), refs[i]); d > 1e-4 {
				t.Fatalf("%s: sample %d: softmax of the scores differs from the article API's by %g", what, i, d)
			}
		}
	}
	var jsonScores []float64 // the two photos' scores from JSON
	for _, tc := range []struct{ name, shape, data string }{
		{"flat", "[2]", fmt.Sprintf(`["%s","%s"]`, b64(coffee), b64(cat))},
		{"nested", "[2,1]", fmt.Sprintf(`[["%s"],["%s"]]`, b64(coffee), b64(cat))},
	} {
		body := `{"id":"req-` + tc.name + `","inputs":[{"name":"input","shape":` + tc.shape + `,"datatype":"BYTES","data":` + tc.data + `}]}`
		r := c.ok(tc.name, c.post(infer, []byte(body), -1))
		if r.ModelName != "mobilenetv2" || r.ModelVersion == nil || *r.ModelVersion != "1" || r.ID == nil || *r.ID != "req-"+tc.name || len(r.Outputs) != 1 {
			t.Fatalf("%s: %+v", tc.name, r)
		}
		data := c.numbers(tc.name, r.Outputs[0].Data)
		checkScores("JSON "+tc.name, r.Outputs[0], data, 2)
		if jsonScores == nil {
			jsonScores = data
		} else if d := maxDiff(data, jsonScores); d > 1e-4 {
			t.Fatalf("nested BYTES: scores differ from flat by %g", d)
		}
	}
	// The id is echoed as a JSON parser reads it: escapes undone and written again, bytes
	// that are not UTF-8 as U+FFFD (the answer stays UTF-8 JSON).
	for id, want := range map[string]string{`"a\"b\\c\u00e9\n\u0001"`: "a\"b\\c\u00e9\n\u0001", "\"x\xff\xfey\"": "x\ufffd\ufffdy"} {
		body := `{"id":` + id + `,"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + b64(coffee) + `"]}],"outputs":[{"name":"output","parameters":{"classification":1}}]}`
		if r := c.ok("id "+id, c.post(infer, []byte(body), -1)); r.ID == nil || *r.ID != want {
			t.Errorf("id %q echoed as %v, want %q", id, r.ID, want)
		}
	}
	// Versions in the path: version 1 answers; an unknown version is a 404 {"error": ...}.
	one := []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + b64(coffee) + `"]}]}`)
	if r := c.ok("version 1", c.post("/v2/models/mobilenetv2/versions/1/infer", one, -1)); *r.ModelVersion != "1" {
		t.Fatalf("version 1 answered as %q", *r.ModelVersion)
	}
	c.refused("unknown version", c.post("/v2/models/mobilenetv2/versions/2/infer", one, -1), 404)
	c.refused("unknown model", c.post("/v2/models/nope/infer", one, -1), 404)
	// Refused from the path alone, a request is still answered while its client sends a large
	// body (the body is read and dropped, not reset under the client).
	large := make([]byte, 6<<20)
	copy(large, one)
	for range 3 {
		for _, p := range []string{"/v2/models/mobilenetv2/versions/2/infer", "/v2/models/nope/infer", "/v2/models/mobilenetv2/bogus", "/v2/bogus"} {
			c.refused("6 MiB body to "+p, c.post(p, large, -1), 404)
		}
	}

	// Binary BYTES input: two images, each a 4-byte little-endian length and its bytes; the
	// answer without binary outputs is plain JSON.
	binImages := appendLengthPrefixed(nil, coffee, cat)
	head := []byte(`{"inputs":[{"name":"input","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(len(binImages)) + `}}]}`)
	x := c.post(infer, append(slices.Clone(head), binImages...), len(head))
	if x.header.Get("Inference-Header-Content-Length") != "" {
		t.Fatalf("binary input, JSON output: the answer has Inference-Header-Content-Length")
	}
	r := c.ok("binary BYTES", x)
	checkScores("binary BYTES", r.Outputs[0], c.numbers("binary BYTES", r.Outputs[0].Data), 2)

	// Binary outputs: request-wide binary_data_output, per output binary_data, the output's
	// own setting winning over the request's; little-endian FP32 in output order.
	withOutputs := func(params, outputs string) []byte {
		h := `{"parameters":` + params + `,"inputs":[{"name":"input","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":` +
			strconv.Itoa(len(binImages)) + `}}]` + outputs + `}`
		return []byte(h)
	}
	for _, tc := range []struct {
		name, params, outputs string
		binary                bool
	}{
		{"binary_data_output", `{"binary_data_output":true}`, ``, true},
		{"per output binary_data", `{}`, `,"outputs":[{"name":"output","parameters":{"binary_data":true}}]`, true},
		{"binary_data false wins", `{"binary_data_output":true}`, `,"outputs":[{"name":"output","parameters":{"binary_data":false}}]`, false},
		{"binary_data_output false", `{"binary_data_output":false}`, `,"outputs":[{"name":"output"}]`, false},
	} {
		h := withOutputs(tc.params, tc.outputs)
		x := c.post(infer, append(h, binImages...), len(h))
		r := c.ok(tc.name, x)
		o := r.Outputs[0]
		var data []float64
		if tc.binary {
			if string(o.Parameters["binary_data_size"]) != "8000" || len(x.bin) != 8000 {
				t.Fatalf("%s: binary_data_size %s, %d bytes", tc.name, o.Parameters["binary_data_size"], len(x.bin))
			}
			data = littleEndianFloats(x.bin)
		} else {
			if x.header.Get("Inference-Header-Content-Length") != "" || o.Data == nil {
				t.Fatalf("%s: want JSON data, got binary", tc.name)
			}
			data = c.numbers(tc.name, o.Data)
		}
		checkScores(tc.name, o, data, 2)
		if d := maxDiff(data, jsonScores); d > 1e-4 {
			t.Fatalf("%s: scores differ from the JSON ones by %g", tc.name, d)
		}
	}

	// Classification: k classes of the scores, best first, as JSON and as binary BYTES. The
	// same two images in one request of two, as the scores above (jsonScores) were computed.
	cls := c.ok("classification", c.post(infer, []byte(`{"inputs":[{"name":"input","shape":[2],"datatype":"BYTES","data":["`+
		b64(coffee)+`","`+b64(cat)+`"]}],"outputs":[{"name":"output","parameters":{"classification":3}}]}`), -1))
	o := cls.Outputs[0]
	if len(cls.Outputs) != 1 || o.Datatype != "BYTES" || !slices.Equal(o.Shape, []int64{2, 3}) {
		t.Fatalf("classification output: %s %v", o.Datatype, o.Shape)
	}
	classes := c.strings("classification", o.Data)
	c.checkClasses("classification, coffee", classes[:3], jsonScores[:1000])
	c.checkClasses("classification, cat", classes[3:], jsonScores[1000:])
	if !strings.HasSuffix(classes[0], ":967:espresso") {
		t.Fatalf("coffee's best class is %q, want 967 espresso", classes[0])
	}
	h := withOutputs(`{"binary_data_output":true}`, `,"outputs":[{"name":"output","parameters":{"classification":2}}]`)
	x = c.post(infer, append(h, binImages...), len(h))
	r = c.ok("binary classification", x)
	cs := r.Outputs[0]
	if cs.Datatype != "BYTES" || !slices.Equal(cs.Shape, []int64{2, 2}) {
		t.Fatalf("binary classification: %+v", cs)
	}
	binClasses := c.lengthPrefixed("binary classification", x.bin)
	if n, _ := strconv.Atoi(string(cs.Parameters["binary_data_size"])); n != len(x.bin) || len(binClasses) != 4 {
		t.Fatalf("binary classification: binary_data_size %s, %d bytes, %d elements", cs.Parameters["binary_data_size"], len(x.bin), len(binClasses))
	}
	c.checkClasses("binary classification, coffee", binClasses[:2], jsonScores[:1000])
	c.checkClasses("binary classification, cat", binClasses[2:], jsonScores[1000:])
	// More classes than the model has: all of them, as Triton answers (its class count is
	// at most the output's). The same output twice is refused, as Triton refuses it: its
	// clients find a binary output's bytes by name and would read one output as the other.
	all := c.ok("classification 2000", c.post(infer, []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["`+
		b64(coffee)+`"]}],"outputs":[{"name":"output","parameters":{"classification":2000}}]}`), -1))
	if !slices.Equal(all.Outputs[0].Shape, []int64{1, 1000}) {
		t.Fatalf("classification 2000 of 1000 classes: shape %v", all.Outputs[0].Shape)
	}
	h = withOutputs(`{"binary_data_output":true}`, `,"outputs":[{"name":"output"},{"name":"output","parameters":{"classification":2}}]`)
	c.refused("the same output twice", c.post(infer, append(h, binImages...), len(h)), 400)
	k1 := c.ok("classification 1", c.post(infer, []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["`+
		b64(coffee)+`"]}],"outputs":[{"name":"output","parameters":{"classification":1}}]}`), -1))
	if got := c.strings("classification 1", k1.Outputs[0].Data); len(got) != 1 || !slices.Equal(k1.Outputs[0].Shape, []int64{1, 1}) || !strings.HasSuffix(got[0], ":967:espresso") {
		t.Fatalf("classification 1: %v %v", k1.Outputs[0].Shape, got)
	}

	// The tensor interface: FP32 [1, 3, 224, 224] in binary and in JSON (flat and in its
	// natural nesting), against the same pixels sent as an image. A 256x256 image of one
	// colour needs no resize; the tensor is (v/255 - mean)/std per channel.
	rgb := [3]uint8{30, 160, 90}
	img := image.NewNRGBA(image.Rect(0, 0, 256, 256))
	for i := 0; i < len(img.Pix); i += 4 {
		copy(img.Pix[i:], []uint8{rgb[0], rgb[1], rgb[2], 255})
	}
	var pngBuf bytes.Buffer
	png.Encode(&pngBuf, img)
	mean, std := [3]float64{0.485, 0.456, 0.406}, [3]float64{0.229, 0.224, 0.225}
	var chv [3]float32
	for ch := range 3 {
		chv[ch] = float32((float64(rgb[ch])/255 - mean[ch]) / std[ch])
	}
	asImage := c.ok("solid image", c.post(infer, []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["`+b64(pngBuf.Bytes())+`"]}]}`), -1))
	want := c.numbers("solid image", asImage.Outputs[0].Data)
	var binTensor []byte
	var flat, nested bytes.Buffer
	flat.WriteByte('[')
	nested.WriteByte('[')
	nested.WriteByte('[')
	for ch := range 3 {
		nested.WriteByte('[')
		for y := range 224 {
			nested.WriteByte('[')
			for x := range 224 {
				binTensor = binary.LittleEndian.AppendUint32(binTensor, math.Float32bits(chv[ch]))
				v := strconv.FormatFloat(float64(chv[ch]), 'g', -1, 32)
				if ch+y+x > 0 {
					flat.WriteByte(',')
				}
				if x > 0 {
					nested.WriteByte(',')
				}
				flat.WriteString(v)
				nested.WriteString(v)
			}
			nested.WriteByte(']')
			if y < 223 {
				nested.WriteByte(',')
			}
		}
		nested.WriteByte(']')
		if ch < 2 {
			nested.WriteByte(',')
		}
	}
	flat.WriteByte(']')
	nested.WriteString("]]")
	tensorHead := []byte(`{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","parameters":{"binary_data_size":602112}}],"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`)
	for _, tc := range []struct {
		name, path string
		body       []byte
		headerLen  int
	}{
		{"FP32 binary to the tensor interface", "/v2/models/mobilenetv2.tensor/infer", append(slices.Clone(tensorHead), binTensor...), len(tensorHead)},
		{"FP32 binary to the image interface", "/v2/models/mobilenetv2/versions/1/infer", append(slices.Clone(tensorHead), binTensor...), len(tensorHead)},
		{"FP32 JSON flat", "/v2/models/mobilenetv2.tensor/versions/1/infer", []byte(`{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","data":` + flat.String() + `}]}`), -1},
		{"FP32 JSON nested", "/v2/models/mobilenetv2.tensor/infer", []byte(`{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","data":` + nested.String() + `}]}`), -1},
	} {
		x := c.post(tc.path, tc.body, tc.headerLen)
		r := c.ok(tc.name, x)
		wantName := strings.TrimSuffix(strings.TrimPrefix(tc.path, "/v2/models/"), "/infer")
		wantName, _, _ = strings.Cut(wantName, "/versions/")
		if r.ModelName != wantName || len(r.Outputs) != 1 || !slices.Equal(r.Outputs[0].Shape, []int64{1, 1000}) {
			t.Fatalf("%s: %+v", tc.name, r)
		}
		got := x.bin
		var data []float64
		if tc.headerLen >= 0 {
			data = littleEndianFloats(got)
		} else {
			data = c.numbers(tc.name, r.Outputs[0].Data)
		}
		if d := maxDiff(data, want); d > 1e-3 || argmax(data) != argmax(want) {
			t.Fatalf("%s: scores differ from the image's by %g", tc.name, d)
		}
	}

	// Compressed request bodies (Content-Encoding gzip and deflate, as Triton's clients send).
	var gz, zl bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(one)
	gw.Close()
	zw := zlib.NewWriter(&zl)
	zw.Write(one)
	zw.Close()
	for enc, body := range map[string][]byte{"gzip": gz.Bytes(), "deflate": zl.Bytes()} {
		r := c.ok(enc, c.post(infer, body, -1, "Content-Encoding", enc))
		if d := maxDiff(c.numbers(enc, r.Outputs[0].Data), jsonScores[:1000]); d > 1e-4 {
			t.Fatalf("%s body: scores differ by %g", enc, d)
		}
	}

	// Malformed requests: 400 with {"error": "..."}; the server keeps serving.
	bytesIn := func(shape, data string) string {
		return `{"inputs":[{"name":"input","shape":` + shape + `,"datatype":"BYTES","data":` + data + `}]}`
	}
	img1 := `["` + b64(coffee) + `"]`
	for _, tc := range []struct {
		name, path, body string
		headerLen        int
	}{
		{"shape says 2, data holds 1", infer, bytesIn("[2]", img1), -1},
		{"shape says 1, data holds 2", infer, bytesIn("[1]", `["`+b64(coffee)+`","`+b64(cat)+`"]`), -1},
		{"BYTES shape [1, 2]", infer, bytesIn("[1,2]", `["`+b64(coffee)+`","`+b64(cat)+`"]`), -1},
		{"negative dimension", infer, bytesIn("[-1]", img1), -1},
		{"FP32 wrong shape", "/v2/models/mobilenetv2.tensor/infer", `{"inputs":[{"name":"input","shape":[1,3,224,223],"datatype":"FP32","data":[1]}]}`, -1},
		{"FP32 short data", "/v2/models/mobilenetv2.tensor/infer", `{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","data":[1,2,3]}]}`, -1},
		{"FP32 data not numbers", "/v2/models/mobilenetv2.tensor/infer", `{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","data":["a"]}]}`, -1},
		{"unknown input", infer, `{"inputs":[{"name":"inputz","shape":[1],"datatype":"BYTES","data":` + img1 + `}]}`, -1},
		{"two inputs", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":` + img1 + `},{"name":"input2","shape":[1],"datatype":"BYTES","data":` + img1 + `}]}`, -1},
		{"no inputs", infer, `{"inputs":[]}`, -1},
		{"unknown output", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":` + img1 + `}],"outputs":[{"name":"outputz"}]}`, -1},
		{"datatype INT64", "/v2/models/mobilenetv2.tensor/infer", `{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"INT64","data":[1]}]}`, -1},
		{"datatype in lower case", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"bytes","data":` + img1 + `}]}`, -1},
		{"BYTES to the tensor interface", "/v2/models/mobilenetv2.tensor/infer", bytesIn("[1]", img1), -1},
		{"UINT8 to an FP32 model", "/v2/models/mobilenetv2.tensor/infer", `{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"UINT8","data":[1]}]}`, -1},
		{"FP32 with shape [1] to the image interface", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"FP32","data":[1]}]}`, -1},
		{"BYTES element not base64", infer, bytesIn("[1]", `["not base64!"]`), -1},
		{"BYTES element a number", infer, bytesIn("[1]", `[7]`), -1},
		{"classification 0", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":` + img1 + `}],"outputs":[{"name":"output","parameters":{"classification":0}}]}`, -1},
		{"binary_data not a bool", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":` + img1 + `}],"outputs":[{"name":"output","parameters":{"binary_data":"yes"}}]}`, -1},
		{"malformed JSON", infer, `{"inputs":[{"name":"input"`, -1},
		{"empty body", infer, ``, -1},
		{"data and binary_data_size", infer, `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":0},"data":` + img1 + `}]}`, -1},
	} {
		c.refused(tc.name, c.post(tc.path, []byte(tc.body), tc.headerLen), 400)
	}
	// Binary data whose sizes do not match.
	binOne := appendLengthPrefixed(nil, coffee)
	sized := func(n int) []byte {
		return []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(n) + `}}]}`)
	}
	for _, tc := range []struct {
		name      string
		head, bin []byte
		headerLen int
	}{
		{"binary_data_size larger than the data", sized(len(binOne) + 1), binOne, -2},
		{"binary_data_size smaller than the data", sized(len(binOne) - 1), binOne, -2},
		{"BYTES length past the data", sized(len(binOne) - 1), binOne[:len(binOne)-1], -2},
		{"BYTES length cut short", sized(2), []byte{1, 0}, -2},
		{"binary data without Inference-Header-Content-Length", sized(len(binOne)), binOne, -1},
		{"Inference-Header-Content-Length past the body", sized(len(binOne)), binOne, 1 << 24},
		{"Inference-Header-Content-Length cuts the JSON", sized(len(binOne)), binOne, 10},
		{"FP32 binary size not the shape's", []byte(`{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","parameters":{"binary_data_size":602108}}]}`), binTensor[:602108], -2},
	} {
		hl := tc.headerLen
		if hl == -2 {
			hl = len(tc.head)
		}
		body := append(slices.Clone(tc.head), tc.bin...)
		path := infer
		if strings.HasPrefix(tc.name, "FP32") {
			path = "/v2/models/mobilenetv2.tensor/infer"
		}
		if hl == -1 {
			c.refused(tc.name, c.exchangeRaw(path, body, "application/octet-stream"), 400)
			continue
		}
		c.refused(tc.name, c.post(path, body, hl), 400)
	}
	// The image formats the metadata names: a GIF is decoded (its first frame); an image in
	// none of them is a 415.
	var gifBuf bytes.Buffer
	gif.Encode(&gifBuf, image.NewPaletted(image.Rect(0, 0, 32, 32), color.Palette{color.White, color.Black}), nil)
	if !strings.Contains(string(g.do("GET", "/v2/models/mobilenetv2", "", nil).body), "JPEG, PNG, WebP, GIF (first frame), BMP or TIFF") {
		t.Errorf("the metadata does not name the image formats")
	}
	c.ok("a GIF image", c.post(infer, []byte(bytesIn("[1]", `["`+b64(gifBuf.Bytes())+`"]`)), -1))
	c.refused("an ICO image", c.post(infer, []byte(bytesIn("[1]", `["`+b64([]byte("\x00\x00\x01\x00\x01\x00\x10\x10"))+`"]`)), -1), 415)
	// Not an inference method.
	if a := g.do("GET", infer, "", nil); a.status != 405 {
		t.Errorf("GET %s: %d", infer, a.status)
	}
	c.ok("after the malformed requests", c.post(infer, one, -1))
}

// exchangeRaw posts body with a Content-Type and nothing else.
func (c *conformance) exchangeRaw(path string, body []byte, contentType string) exchange {
	c.t.Helper()
	a := c.g.do("POST", path, contentType, body)
	return exchange{status: a.status, header: a.header, head: a.body}
}
