package openapitest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// The document the gateway serves (api/openapi/openapi.json, generated from docs/openapi.yaml).
const document = "../api/openapi/openapi.json"

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newValidator(t *testing.T) (validator.Validator, []byte) {
	t.Helper()
	spec, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatalf("%s: %v", document, err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", document, errs)
	}
	return v, spec
}

// TestDocumentValid: the document is a valid OpenAPI 3.1 document (its schema, and every
// reference resolved).
func TestDocumentValid(t *testing.T) {
	v, spec := newValidator(t)
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("%s", e.Error())
			for _, s := range e.SchemaValidationErrors {
				t.Errorf("  %s: %s", s.FieldPath+" "+s.KeywordLocation, s.Reason)
			}
		}
	}
	var d struct {
		OpenAPI string `json:"openapi"`
	}
	if json.Unmarshal(spec, &d) != nil || d.OpenAPI != "3.1.0" {
		t.Errorf("openapi: %q", d.OpenAPI)
	}
}

// operations lists the document's operations as "METHOD /path/{template}".
func operations(t *testing.T, spec []byte) []string {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(spec, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, item := range d.Paths {
		for m := range item {
			switch m {
			case "get", "post", "put", "delete", "head", "patch":
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

type gateway struct {
	public, admin string
	cmd           *exec.Cmd
	mu            sync.Mutex
	log           bytes.Buffer
}

// start runs bin/gateway with config and waits for its listeners.
func start(t *testing.T, config string) *gateway {
	t.Helper()
	bin := os.Getenv("GATEWAY_BIN")
	if bin == "" {
		bin = filepath.Join(root(t), "bin", "gateway")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("the gateway binary (make build, or GATEWAY_BIN) is needed:", err)
	}
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		lib = filepath.Join(root(t), ".deps", "onnxruntime", "libonnxruntime.so")
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skip("ONNX Runtime (scripts/setup-onnxruntime.sh, or ONNXRUNTIME_LIB) is needed:", err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &gateway{cmd: exec.Command(bin, "-config", path, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-grpc-listen", "off")}
	g.cmd.Env = append(os.Environ(), "ONNXRUNTIME_LIB="+lib)
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cmd.Process.Kill(); g.cmd.Wait() })
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		serving := regexp.MustCompile(`msg=serving addr=(\S+)`)
		admin := regexp.MustCompile(`msg=admin addr=(\S+)`)
		for sc.Scan() {
			g.mu.Lock()
			g.log.WriteString(sc.Text() + "\n")
			if m := admin.FindStringSubmatch(sc.Text()); m != nil {
				g.admin = "http://" + m[1]
			}
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				g.public = "http://" + m[1]
				up <- true
			}
			g.mu.Unlock()
		}
		close(up)
	}()
	select {
	case ok := <-up:
		if !ok {
			g.mu.Lock()
			defer g.mu.Unlock()
			t.Fatalf("the gateway exited:\n%s", g.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not start in 60 s")
	}
	return g
}

// call is one request of the test: the operation it exercises (as the document names it),
// and the status it must get.
type call struct {
	op, method, path string
	admin            bool
	ctype            string
	header           []string
	body             []byte
	status           int
	// invalid: the request itself breaks the document (the test of an error answer): the
	// validator must say so, and the answer must still match the document.
	invalid bool
}

func TestAnswersMatchTheDocument(t *testing.T) {
	shared := filepath.Join(root(t), "..", "shared")
	model := filepath.Join(shared, "models", "mobilenetv2-12-int8")
	if _, err := os.Stat(filepath.Join(model, "mobilenetv2-12-int8.onnx")); err != nil {
		t.Skip("../shared (the ImageNet model and the photos) is not beside the checkout:", err)
	}
	// The ImageNet classifier from the file, the committed model from a Triton repository.
	repo := t.TempDir()
	for src, dst := range map[string]string{
		filepath.Join(root(t), "models", "mobilenet_v3_small", "model.onnx"): filepath.Join(repo, "weather", "1", "model.onnx"),
		filepath.Join(root(t), "models", "mobilenet_v3_small", "labels.txt"): filepath.Join(repo, "weather", "labels.txt"),
	} {
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.Symlink(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(repo, "weather", "config.pbtxt"), []byte("max_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 500 }\ninstance_group [{ count: 1 kind: KIND_CPU }]\n"), 0o644)
	// A detector's answers: ../shared's face detector. (An embedding's answer is checked
	// against the document by cmd/gateway's tests; this module has no model writer.)
	faces := filepath.Join(shared, "models", "ultraface-rfb-320", "version-RFB-320.onnx")
	if _, err := os.Stat(faces); err != nil {
		t.Skip("../shared's face detector is absent:", err)
	}
	g := start(t, fmt.Sprintf(`models:
  - name: imagenet
    path: %s/mobilenetv2-12-int8.onnx
    labels: %s/imagenet-simple-labels.json
    batching: {max_batch_size: 4, max_queue_delay: 1ms}
  - name: faces
    path: %s
    task: detect
    detect: {score_threshold: 0.5}
repository: {path: %s}
`, model, model, faces, repo))

	f, err := os.Open(filepath.Join(shared, "images", "skimage_coffee.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var jb bytes.Buffer
	jpeg.Encode(&jb, img, &jpeg.Options{Quality: 90})
	photo := jb.Bytes()
	calls := append(testRequests(photo), detectRequests(photo)...)
	v, spec := newValidator(t)
	covered := map[string]bool{}
	for _, c := range calls {
		base := g.public
		if c.admin {
			base = g.admin
		}
		req, err := http.NewRequest(c.method, base+c.path, bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		for i := 0; i+1 < len(c.header); i += 2 {
			req.Header.Set(c.header[i], c.header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d: %.300s", c.method, c.path, resp.StatusCode, c.status, body)
			continue
		}
		if c.path == "/openapi.json" {
			if !bytes.Equal(body, spec) {
				t.Errorf("GET /openapi.json is not %s", document)
			}
		}
		// The validator reads both bodies again.
		req, _ = http.NewRequest(c.method, base+c.path, bytes.NewReader(c.body))
		req.Header = resp.Request.Header.Clone()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		validate := v.ValidateHttpRequestResponse
		if c.invalid {
			if ok, _ := v.ValidateHttpRequest(req); ok {
				t.Errorf("%s %s: the document accepts a request the gateway refuses", c.method, c.path)
			}
			req, _ = http.NewRequest(c.method, base+c.path, bytes.NewReader(c.body))
			validate = v.ValidateHttpResponse
		}
		if ok, errs := validate(req, resp); !ok {
			for _, e := range errs {
				t.Errorf("%s %s (%d): %s", c.method, c.path, resp.StatusCode, e.Error())
				for _, s := range e.SchemaValidationErrors {
					t.Errorf("    %s: %s", s.FieldPath+" "+s.KeywordLocation, s.Reason)
				}
			}
			continue
		}
		covered[c.op] = true
	}
	for _, op := range operations(t, spec) {
		if !covered[op] {
			t.Errorf("%s: no answer of the gateway was checked against it", op)
		}
	}
	for op := range covered {
		if !slices.Contains(operations(t, spec), op) {
			t.Errorf("the test names %s, which the document does not have", op)
		}
	}
}

// detectRequests are a detector's answers: /predict/'s, its selection in the query (one out of
// range, which the document refuses too), its detections over the protocol, its metadata.
func detectRequests(photo []byte) []call {
	b64 := base64.StdEncoding.EncodeToString(photo)
	return []call{
		{op: "POST /models/{model}/predict", method: "POST", path: "/models/faces/predict?score_threshold=0.2&iou_threshold=0.4&max_detections=3", ctype: "image/jpeg", body: photo, status: 200},
		{op: "POST /models/{model}/predict", method: "POST", path: "/models/faces/predict?score_threshold=2", ctype: "image/jpeg", body: photo, status: 400, invalid: true},
		{op: "POST /v2/models/{model}/infer", method: "POST", path: "/v2/models/faces/infer", ctype: "application/json", status: 200,
			body: []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + b64 + `"]}],"parameters":{"detections":true}}`)},
		{op: "GET /v2/models/{model}", method: "GET", path: "/v2/models/faces", status: 200},
	}
}

// testRequests are the test's requests, each with the operation it exercises: one at least for
// every operation of the document, and error answers (404, 400, 415) too.
func testRequests(photo []byte) []call {
	b64 := base64.StdEncoding.EncodeToString(photo)
	inferJSON := []byte(`{"id":"a","inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + b64 + `"]}],"outputs":[{"name":"output","parameters":{"classification":3}}]}`)
	// Binary tensor data both ways: the image's bytes after the JSON, the scores likewise.
	head := []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":` + fmt.Sprint(4+len(photo)) + `}}],"parameters":{"binary_data_output":true}}`)
	inferBinary := append(append([]byte{}, head...), binary.LittleEndian.AppendUint32(nil, uint32(len(photo)))...)
	inferBinary = append(inferBinary, photo...)
	tensor := make([]byte, 4*3*224*224)
	tensorJSON := []byte(`{"inputs":[{"name":"input","shape":[1,3,224,224],"datatype":"FP32","parameters":{"binary_data_size":` + fmt.Sprint(len(tensor)) + `}}]}`)
	inferTensor := append(append([]byte{}, tensorJSON...), tensor...)

	return []call{
		{op: "GET /", method: "GET", path: "/", status: 200},
		{op: "POST /predict", method: "POST", path: "/predict?top_k=3", ctype: "image/jpeg", body: photo, status: 200, header: []string{"X-Request-ID", "openapi-1", "X-Request-Timeout", "20000"}},
		{op: "POST /predict/", method: "POST", path: "/predict/", ctype: "application/json", body: []byte(`{"image":"` + b64 + `"}`), status: 200},
		{op: "POST /models/{model}/predict", method: "POST", path: "/models/imagenet/predict?priority=0", ctype: "application/x-www-form-urlencoded", body: photo, status: 200}, // curl's default type
		{op: "POST /models/{model}/predict", method: "POST", path: "/models/weather/predict", ctype: "application/octet-stream", body: photo, status: 200},
		{op: "POST /models/{model}/predict", method: "POST", path: "/models/nope/predict", ctype: "image/jpeg", body: photo, status: 404},
		{op: "POST /predict", method: "POST", path: "/predict", ctype: "text/plain", body: []byte("not an image"), status: 415},
		{op: "POST /predict", method: "POST", path: "/predict?top_k=x", ctype: "image/jpeg", body: photo, status: 400, invalid: true},
		{op: "GET /models/{model}", method: "GET", path: "/models/imagenet", status: 200},
		{op: "GET /v2", method: "GET", path: "/v2", status: 200},
		{op: "GET /v2/", method: "GET", path: "/v2/", status: 200},
		{op: "GET /v2", method: "GET", path: "/v2", admin: true, status: 200},
		{op: "GET /v2/health/live", method: "GET", path: "/v2/health/live", status: 200},
		{op: "GET /v2/health/ready", method: "GET", path: "/v2/health/ready", status: 200},
		{op: "GET /v2/models/{model}", method: "GET", path: "/v2/models/imagenet", status: 200},
		{op: "GET /v2/models/{model}", method: "GET", path: "/v2/models/imagenet.tensor", status: 200},
		{op: "GET /v2/models/{model}", method: "GET", path: "/v2/models/nope", status: 404},
		{op: "GET /v2/models/{model}/versions/{version}", method: "GET", path: "/v2/models/weather/versions/1", status: 200},
		{op: "GET /v2/models/{model}/versions/{version}", method: "GET", path: "/v2/models/weather/versions/9", status: 404},
		{op: "GET /v2/models/{model}/ready", method: "GET", path: "/v2/models/imagenet/ready", status: 200},
		{op: "GET /v2/models/{model}/versions/{version}/ready", method: "GET", path: "/v2/models/imagenet/versions/1/ready", status: 200},
		{op: "GET /v2/models/{model}/config", method: "GET", path: "/v2/models/imagenet/config", status: 200},
		{op: "GET /v2/models/{model}/config", method: "GET", path: "/v2/models/weather/config", status: 200},
		{op: "GET /v2/models/{model}/versions/{version}/config", method: "GET", path: "/v2/models/imagenet.tensor/versions/1/config", status: 200},
		{op: "POST /v2/models/{model}/infer", method: "POST", path: "/v2/models/imagenet/infer", ctype: "application/json", body: inferJSON, status: 200},
		{op: "POST /v2/models/{model}/infer", method: "POST", path: "/v2/models/imagenet/infer", ctype: "application/json", body: []byte(`{"inputs":[`), status: 400, invalid: true},
		{op: "POST /v2/models/{model}/versions/{version}/infer", method: "POST", path: "/v2/models/imagenet/versions/1/infer", ctype: "application/octet-stream",
			header: []string{"Inference-Header-Content-Length", fmt.Sprint(len(head))}, body: inferBinary, status: 200},
		{op: "POST /v2/models/{model}/infer", method: "POST", path: "/v2/models/weather.tensor/infer", ctype: "application/octet-stream",
			header: []string{"Inference-Header-Content-Length", fmt.Sprint(len(tensorJSON))}, body: inferTensor, status: 200},
		{op: "GET /v2/models/stats", method: "GET", path: "/v2/models/stats", status: 200},
		{op: "GET /v2/models/{model}/stats", method: "GET", path: "/v2/models/imagenet/stats", status: 200},
		{op: "GET /v2/models/{model}/versions/{version}/stats", method: "GET", path: "/v2/models/imagenet/versions/1/stats", admin: true, status: 200},
		{op: "GET /metrics", method: "GET", path: "/metrics", status: 200},
		{op: "GET /openapi.json", method: "GET", path: "/openapi.json", status: 200},
		{op: "POST /v2/repository/index", method: "POST", path: "/v2/repository/index", admin: true, status: 200},
		{op: "POST /v2/repository/index", method: "POST", path: "/v2/repository/index", admin: true, ctype: "application/json", body: []byte(`{"ready":true}`), status: 200},
		{op: "POST /v2/repository/models/{model}/unload", method: "POST", path: "/v2/repository/models/weather/unload", admin: true, status: 200},
		{op: "POST /v2/repository/models/{model}/unload", method: "POST", path: "/v2/repository/models/weather/unload", admin: true, status: 404},
		{op: "POST /v2/repository/models/{model}/load", method: "POST", path: "/v2/repository/models/weather/load", admin: true, ctype: "application/json", body: []byte(`{"parameters":{}}`), status: 200},
		{op: "POST /v2/repository/models/{model}/load", method: "POST", path: "/v2/repository/models/weather/load", admin: true, ctype: "application/json", body: []byte(`{"parameters":{"config":"{}"}}`), status: 400},
		{op: "POST /v2/repository/reload", method: "POST", path: "/v2/repository/reload", admin: true, status: 200},
		{op: "GET /debug/pprof/", method: "GET", path: "/debug/pprof/", admin: true, status: 200},
		{op: "GET /ui/", method: "GET", path: "/ui/", admin: true, status: 200},
		{op: "GET /ui/{asset}", method: "GET", path: "/ui/console.js", admin: true, status: 200},
		{op: "GET /ui/{asset}", method: "GET", path: "/ui/nope.js", admin: true, status: 404},
		{op: "GET /ui/api/snapshot", method: "GET", path: "/ui/api/snapshot", admin: true, status: 200},
		{op: "GET /debug/pprof/{profile}", method: "GET", path: "/debug/pprof/goroutine?debug=1", admin: true, status: 200},
		{op: "GET /debug/pprof/{profile}", method: "GET", path: "/debug/pprof/heap", admin: true, status: 200},
	}
}
