package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/preprocess"
)

// These tests exercise the gateway's routing, error mapping, metrics and admission with a
// fake Runner over an in-memory listener: no ONNX Runtime, no network. (cmd/gateway tests the
// real binary with the real runtime.)

// fakeRunner answers, for each row, classes scores: score k = mean(row) + k/1000, so each
// request's answer depends on its own image; its second output, "sum", is the row's sum. With
// gate set, Run waits for a receive on it.
type fakeRunner[T Elem] struct {
	rowLen, classes, maxBatch int
	in                        []T
	out, sum                  []float32
	gate                      chan struct{}
	entered                   atomic.Int64 // runs begun (before the gate)
	runs                      chan int     // batch sizes, when set
	rows                      chan []T     // copies of the input rows of each run, when set
	fail                      error
}

func newFake[T Elem](rowLen, classes, maxBatch int) *fakeRunner[T] {
	return &fakeRunner[T]{rowLen: rowLen, classes: classes, maxBatch: maxBatch,
		in: make([]T, rowLen*maxBatch), out: make([]float32, classes*maxBatch), sum: make([]float32, maxBatch)}
}

func (f *fakeRunner[T]) Input(i int) []T { return f.in[i*f.rowLen : (i+1)*f.rowLen] }
func (f *fakeRunner[T]) Outputs() []Output {
	return []Output{{Name: "output", Shape: []int64{int64(f.classes)}}, {Name: "sum", Shape: []int64{1}}}
}
func (f *fakeRunner[T]) RowLen() int { return f.rowLen }
func (f *fakeRunner[T]) MaxBatchSize() int {
	return f.maxBatch
}

func (f *fakeRunner[T]) Run(n int) ([][]float32, error) {
	f.entered.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	if f.runs != nil {
		f.runs <- n
	}
	if f.fail != nil {
		return nil, f.fail
	}
	if f.rows != nil {
		for i := range n {
			f.rows <- append([]T(nil), f.Input(i)...)
		}
	}
	for i := range n {
		sum := 0.0
		for _, v := range f.Input(i) {
			sum += float64(v)
		}
		mean := float32(sum / float64(f.rowLen))
		for k := range f.classes {
			f.out[i*f.classes+k] = mean + float32(k)/1000
		}
		f.sum[i] = float32(sum)
	}
	return [][]float32{f.out[:n*f.classes], f.sum[:n]}, nil
}

const side = 8 // the fake model's input: 8x8 RGB

func testOptions() Options {
	return Options{
		MaxBodyBytes: 1 << 20, MaxInflightBytes: 64 << 20, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: 5 * time.Second, DecodeWorkers: 2, DecodeQueue: 8, MaxConnections: 64, QueueFullStatus: 503, RetryAfter: time.Second,
	}
}

func modelOpts(name string, runners Runners) ModelOptions {
	return ModelOptions{
		Name: name, Labels: []string{"a", "b", "c"}, InputName: "input",
		Preprocess:     preprocess.Options{Width: side, Height: side, Resize: side, Mode: preprocess.ModeStretch, Scale: preprocess.ScaleRaw},
		Batching:       batcher.Config{MaxBatchSize: 4, MaxQueueSize: 8},
		DefaultTimeout: 10 * time.Second,
		Runners:        runners,
	}
}

// testServer serves s on an in-memory listener and returns a client for it.
type testServer struct {
	t      *testing.T
	s      *Server
	ln     *fasthttputil.InmemoryListener
	client *fasthttp.Client
	served chan error
}

func serve(t *testing.T, s *Server) *testServer {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	ts := &testServer{t: t, s: s, ln: ln, served: make(chan error, 1),
		client: &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }, ReadTimeout: 20 * time.Second}}
	go func() { ts.served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-ts.served
	})
	return ts
}

type reply struct {
	status int
	header map[string]string
	body   []byte
}

func (ts *testServer) do(method, path, ct string, body []byte, hdr ...string) reply {
	ts.t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw" + path)
	req.Header.SetMethod(method)
	if ct != "" {
		req.Header.SetContentType(ct)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.SetBody(body)
	if err := ts.client.Do(req, resp); err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	r := reply{status: resp.StatusCode(), header: map[string]string{}, body: append([]byte(nil), resp.Body()...)}
	for _, k := range []string{"Retry-After", "Allow", "Inference-Header-Content-Length", "Content-Type", "Connection", "X-Request-ID", "Server-Timing", "X-Refusal"} {
		if v := resp.Header.Peek(k); v != nil {
			r.header[k] = string(v)
		}
	}
	return r
}

// metric returns a series' value from /metrics, or -1 when it is absent.
func (ts *testServer) metric(series string) float64 {
	ts.t.Helper()
	var b bytes.Buffer
	ts.s.WriteMetrics(&b)
	for line := range strings.Lines(b.String()) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// solidPNG is a w x h PNG of one gray level.
func solidPNG(t testing.TB, w, h int, v uint8) []byte {
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = v
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newTestServer(t *testing.T, o Options, models ...ModelOptions) *testServer {
	t.Helper()
	s, err := New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if err := s.AddModel(m); err != nil {
			t.Fatal(err)
		}
	}
	return serve(t, s)
}

func TestRoutingAndAnswers(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 4)
	u8 := newFake[uint8](3*side*side, 3, 4)
	v2 := modelOpts("m", RunnersOf[float32]{f})
	v2.Version = "2"
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}), v2,
		modelOpts("bytes", RunnersOf[uint8]{u8}))
	img := solidPNG(t, 20, 10, 100)
	js, _ := json.Marshal(map[string]string{"image": base64.StdEncoding.EncodeToString(img)})

	// The article's API: raw and JSON bodies, on the default model (newest version) and by name.
	for _, c := range []struct{ path, ct string }{{"/predict/", "image/png"}, {"/predict", "application/json"}, {"/models/m/predict?top_k=2", "image/png"},
		{"/predict/", "IMAGE/PNG"}, {"/predict/", "Application/JSON; charset=utf-8"}} { // media types ignore case
		body := img
		if strings.HasPrefix(strings.ToLower(c.ct), "application/json") {
			body = js
		}
		r := ts.do("POST", c.path, c.ct, body)
		var p struct {
			Prediction string
			TopK       []struct{ Score float64 } `json:"top_k"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &p) != nil || p.Prediction != "c" {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
		if strings.Contains(c.path, "top_k") && (len(p.TopK) != 2 || p.TopK[0].Score <= p.TopK[1].Score || math.Abs(p.TopK[0].Score+p.TopK[1].Score-0.667) > 0.01) {
			t.Fatalf("top_k: %s", r.body)
		}
	}
	// A uint8 model gets raw pixels: mean 100.
	r := ts.do("POST", "/v2/models/bytes/infer", "application/json",
		[]byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["`+base64.StdEncoding.EncodeToString(img)+`"]}]}`))
	if r.status != 200 || !strings.Contains(string(r.body), `"data":[100,100.001,100.002]`) || !strings.Contains(string(r.body), `"model_version":"1"`) {
		t.Fatalf("uint8 v2 infer: %d %s", r.status, r.body)
	}
	// Versions: the newest by default, an existing one by path, a 404 for others.
	if r := ts.do("GET", "/v2/models/m", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"versions":["1","2"]`) {
		t.Fatalf("metadata: %d %s", r.status, r.body)
	}
	if r := ts.do("GET", "/v2/models/m/versions/1/ready", "", nil); r.status != 200 {
		t.Fatalf("version 1 ready: %d %s", r.status, r.body)
	}
	if r := ts.do("GET", "/v2/models/m/versions/999", "", nil); r.status != 404 || !strings.Contains(string(r.body), `"error"`) {
		t.Fatalf("version 999: %d %s", r.status, r.body)
	}
	// The tensor interface lists one FP32 input of the model's shape.
	if r := ts.do("GET", "/v2/models/m.tensor", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"datatype":"FP32","name":"input","shape":[-1,3,8,8]`) ||
		strings.Contains(string(r.body), "BYTES") {
		t.Fatalf("tensor metadata: %d %s", r.status, r.body)
	}
	// Routing errors.
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/predict/", 405}, {"POST", "/models/none/predict", 404}, {"GET", "/models/m/predict", 405},
		{"GET", "/v2/models/m/infer", 405}, {"POST", "/v2/models/none/infer", 404}, {"GET", "/nowhere", 404},
		{"GET", "/v2/models/m/versions/", 404}, {"POST", "/v2/health/ready", 200}, {"GET", "/", 200},
	} {
		if r := ts.do(c.method, c.path, "image/png", nil); r.status != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, c.want)
		} else if c.want == 405 && r.header["Allow"] == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
	// Metrics: every answer counted once, by model, version and code.
	if v := ts.metric(`gateway_requests_total{model="m",version="2",code="200"}`); v != 5 {
		t.Errorf("requests_total{m,2,200} = %v, want 5", v)
	}
	// (inference paths only: GET /predict/ counts on the default model; the metadata of an
	// unknown version is not an inference request)
	if v := ts.metric(`gateway_requests_total{model="m",version="2",code="405"}`); v != 3 {
		t.Errorf("requests_total{m,2,405} = %v, want 3", v)
	}
	// (an unknown version counts as an unknown model: version labels stay a closed set)
	if v := ts.metric(`gateway_requests_total{model="_unknown",version="",code="404"}`); v != 2 {
		t.Errorf("requests_total{_unknown,404} = %v, want 2", v)
	}
	if v := ts.metric(`gateway_request_failures_total{model="_unknown",version="",reason="not_found"}`); v != 2 {
		t.Errorf("failures{_unknown,not_found} = %v, want 2", v)
	}
	if v := ts.metric(`gateway_batch_items_total{model="bytes",version="1"}`); v != 1 {
		t.Errorf("batch_items{bytes} = %v", v)
	}
}

// TestBodiesRecognisedByTheirBytes: a body whose Content-Type says nothing about an image (curl
// --data-binary's application/x-www-form-urlencoded, text/plain) is classified by its first
// bytes: an image by its magic, the article's JSON by its opening brace; anything else is a 415
// that says what was looked for.
func TestBodiesRecognisedByTheirBytes(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 20, 10, 100)
	js, _ := json.Marshal(map[string]string{"image": base64.StdEncoding.EncodeToString(img)})
	want := ts.do("POST", "/predict/", "image/png", img)
	if want.status != 200 {
		t.Fatalf("image/png: %d %s", want.status, want.body)
	}
	for _, c := range []struct {
		name, ct string
		body     []byte
	}{
		{"png as a form", "application/x-www-form-urlencoded", img},
		{"png as text", "text/plain", img},
		{"json as a form", "application/x-www-form-urlencoded", js},
		{"json after white space, as text", "text/plain; charset=utf-8", append([]byte(" \n"), js...)},
	} {
		if r := ts.do("POST", "/predict/", c.ct, c.body); r.status != 200 || string(r.body) != string(want.body) {
			t.Errorf("%s: %d %s, want 200 %s", c.name, r.status, r.body, want.body)
		}
	}
	r := ts.do("POST", "/predict/", "application/x-www-form-urlencoded", []byte("image=abc"))
	if r.status != 415 || !strings.Contains(string(r.body), "neither a JSON object nor an image") {
		t.Errorf("a form that is no image: %d %s, want 415", r.status, r.body)
	}
}

func TestClassifyMapsEveryError(t *testing.T) {
	s := &Server{opts: Options{QueueFullStatus: 429}}
	for _, c := range []struct {
		err    error
		status int
		reason string
	}{
		{wire.Malformed("x"), 400, reasonBadInput},
		{fmt.Errorf("y: %w", preprocess.ErrBadImage), 400, reasonBadInput},
		{preprocess.ErrUnsupportedFormat, 415, reasonBadInput},
		{errUnsupportedMedia, 415, reasonBadInput},
		{preprocess.ErrTooLarge, 413, reasonBadInput},
		{errBodyTooLarge, 413, reasonBadInput},
		{errTooLarge, 413, reasonBadInput},
		{errNotFound, 404, reasonNotFound},
		{errMethod, 405, reasonNotFound},
		{errQueueFull, 429, reasonQueueFull},
		{batcher.ErrQueueFull, 429, reasonQueueFull},
		{errShed, 503, reasonShed},
		{batcher.ErrWouldMissDeadline, 503, reasonShed},
		{errOverloaded, 503, reasonOverloaded},
		{errDraining, 503, reasonDraining},
		{batcher.ErrClosed, 503, reasonDraining},
		{errReadTimeout, 408, reasonTimeout},
		{context.DeadlineExceeded, 504, reasonTimeout},
		{errClientGone, 499, reasonCanceled},
		{context.Canceled, 499, reasonCanceled},
		{&batcher.RunError{Err: errors.New("boom")}, 500, reasonInternal},
	} {
		status, reason := s.classify(fmt.Errorf("wrapped: %w", c.err))
		if status != c.status || reason != c.reason {
			t.Errorf("%v: %d %s, want %d %s", c.err, status, reason, c.status, c.reason)
		}
	}
}

func TestBadInputAndRunFailure(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 4)
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{f}))
	for _, c := range []struct {
		name, ct string
		body     []byte
		want     int
	}{
		{"not an image", "image/png", []byte("hello"), 415},
		{"truncated png", "image/png", solidPNG(t, 20, 20, 1)[:40], 400},
		{"bad json", "application/json", []byte(`{"image":`), 400},
		{"bad base64", "application/json", []byte(`{"image":"!!"}`), 400},
		{"text", "text/plain", []byte("x"), 415},
		{"empty", "image/png", nil, 400},
	} {
		r := ts.do("POST", "/predict/", c.ct, c.body)
		if r.status != c.want || !strings.HasPrefix(string(r.body), `{"error":`) {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.want)
		}
	}
	// A body over max_body_bytes, declared: 413 before it is read.
	if r := ts.do("POST", "/predict/", "image/png", make([]byte, 2<<20)); r.status != 413 {
		t.Errorf("2 MiB body: %d %s", r.status, r.body)
	}
	// A gzip bomb: decompressed beyond max_body_bytes is a 413 too.
	var z bytes.Buffer
	zw := newGzip(&z)
	zw.Write(make([]byte, 4<<20))
	zw.Close()
	if r := ts.do("POST", "/predict/", "image/png", z.Bytes(), "Content-Encoding", "gzip"); r.status != 413 {
		t.Errorf("gzip bomb: %d %s", r.status, r.body)
	}
	if r := ts.do("POST", "/predict/", "image/png", []byte("x"), "Content-Encoding", "br"); r.status != 415 {
		t.Errorf("brotli: %d %s", r.status, r.body)
	}
	// A run that fails is a 500 for every request of its batch, and the server goes on.
	f.fail = errors.New("device lost")
	if r := ts.do("POST", "/predict/", "image/png", solidPNG(t, 9, 9, 3)); r.status != 500 || !strings.Contains(string(r.body), "device lost") {
		t.Errorf("failed run: %d %s", r.status, r.body)
	}
	f.fail = nil
	if r := ts.do("POST", "/predict/", "image/png", solidPNG(t, 9, 9, 3)); r.status != 200 {
		t.Errorf("after a failed run: %d %s", r.status, r.body)
	}
	if v := ts.metric(`gateway_request_failures_total{model="m",version="1",reason="internal"}`); v != 1 {
		t.Errorf("failures{internal} = %v", v)
	}
	if v := ts.metric(`gateway_request_failures_total{model="m",version="1",reason="bad_input"}`); v != 9 {
		t.Errorf("failures{bad_input} = %v, want 9", v)
	}
}

// TestAdmission: a full queue, a deadline that cannot be met and an exhausted memory budget
// are refused at once, with Retry-After; the refused requests never run.
func TestAdmission(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 1)
	o := testOptions()
	mo := modelOpts("m", RunnersOf[float32]{f})
	mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 2}
	ts := newTestServer(t, o, mo)
	f.gate = make(chan struct{})
	img := solidPNG(t, 16, 16, 7)
	// 1 running (blocked in Run) + 2 queued fill the model: max_queue_size plus a batch. The
	// first is running before the others are sent: until then it is one of the queue's 2
	// places, and the third would be refused.
	var wg sync.WaitGroup
	results := make([]reply, 3)
	warm := f.entered.Load()
	for i := range results {
		wg.Go(func() { results[i] = ts.do("POST", "/predict/", "image/png", img) })
		if i == 0 {
			waitUntil(t, func() bool { return f.entered.Load() > warm })
		}
	}
	waitUntil(t, func() bool { return ts.metric(`gateway_pending_samples{model="m",version="1"}`) == 3 })
	r := ts.do("POST", "/predict/", "image/png", img)
	if r.status != 503 || r.header["Retry-After"] != "1" || !strings.Contains(string(r.body), "max_queue_size") {
		t.Fatalf("full queue: %d %v %s", r.status, r.header, r.body)
	}
	for range 3 {
		f.gate <- struct{}{}
	}
	wg.Wait()
	for i, r := range results {
		if r.status != 200 {
			t.Fatalf("queued request %d: %d %s", i, r.status, r.body)
		}
	}
	if v := ts.metric(`gateway_request_failures_total{model="m",version="1",reason="queue_full"}`); v != 1 {
		t.Errorf("failures{queue_full} = %v", v)
	}
	if v := ts.metric(`gateway_refusals_total{stage="queue"}`); v != 1 {
		t.Errorf(`refusals_total{stage="queue"} = %v`, v)
	}
	// A deadline shorter than the predicted run time, once runs have been measured: refused
	// before its body is decoded.
	f.gate = nil
	for range 4 {
		ts.do("POST", "/predict/", "image/png", img)
	}
	f.gate = make(chan struct{})
	go func() { time.Sleep(30 * time.Millisecond); close(f.gate) }()
	// (the fake runs in about no time, so only a deadline already passed is sure to miss)
	if r := ts.do("POST", "/predict/", "image/png", img, "X-Request-Timeout", "0.000001"); r.status != 503 && r.status != 504 {
		t.Fatalf("a 1 ns deadline: %d %s", r.status, r.body)
	}
}

func TestMemoryBudgetRefusesAtOnce(t *testing.T) {
	o := testOptions()
	o.MaxInflightBytes = 8 << 20
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	s := ts.s
	if !s.adm.Mem.Reserve(8<<20 - 1000) { // held by "other requests"
		t.Fatal("reserve")
	}
	r := ts.do("POST", "/predict/", "image/png", solidPNG(t, 300, 300, 1))
	if r.status != 503 || r.header["Retry-After"] == "" || !strings.Contains(string(r.body), "max_inflight_bytes") {
		t.Fatalf("budget exhausted: %d %v %s", r.status, r.header, r.body)
	}
	s.adm.Mem.Release(8<<20 - 1000)
	if r := ts.do("POST", "/predict/", "image/png", solidPNG(t, 300, 300, 1)); r.status != 200 {
		t.Fatalf("budget free: %d %s", r.status, r.body)
	}
	if s.adm.Mem.Used() != 0 {
		t.Fatalf("%d bytes still reserved after every request finished", s.adm.Mem.Used())
	}
	if v := ts.metric(`gateway_refusals_total{stage="memory"}`); v != 1 {
		t.Errorf("refusals{memory} = %v", v)
	}
}

// TestV2BinaryAndClassification: binary tensor data in and out, and the classification
// extension, through the whole pipeline.
func TestV2BinaryAndClassification(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img1, img2 := solidPNG(t, 10, 10, 10), solidPNG(t, 10, 10, 20)
	var bin []byte
	for _, im := range [][]byte{img1, img2} {
		bin = binary.LittleEndian.AppendUint32(bin, uint32(len(im)))
		bin = append(bin, im...)
	}
	hdr := fmt.Sprintf(`{"id":"r1","inputs":[{"name":"input","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":%d}}],`+
		`"outputs":%s}`, len(bin), "%s")
	type response struct {
		ID      string
		Outputs []struct {
			Name, Datatype string
			Shape          []int
			Data           []string
			Parameters     struct {
				BinaryDataSize int `json:"binary_data_size"`
			}
		}
	}
	infer := func(outputs string, want int) (response, []byte) {
		t.Helper()
		h := fmt.Sprintf(hdr, outputs)
		r := ts.do("POST", "/v2/models/m/infer", "application/octet-stream", append([]byte(h), bin...),
			"Inference-Header-Content-Length", fmt.Sprint(len(h)))
		if r.status != want {
			t.Fatalf("binary infer, outputs %s: %d %s, want %d", outputs, r.status, r.body, want)
		}
		if want != 200 {
			return response{}, r.body
		}
		hl := len(r.body) // no binary output: all JSON, without the header
		if h, ok := r.header["Inference-Header-Content-Length"]; ok {
			hl = 0
			fmt.Sscan(h, &hl)
		}
		if hl <= 0 || hl > len(r.body) {
			t.Fatalf("Inference-Header-Content-Length %q for %d bytes", r.header["Inference-Header-Content-Length"], len(r.body))
		}
		var resp response
		if err := json.Unmarshal(r.body[:hl], &resp); err != nil {
			t.Fatal(err)
		}
		return resp, r.body[hl:]
	}
	resp, scores := infer(`[{"name":"output","parameters":{"binary_data":true}}]`, 200)
	if resp.ID != "r1" || len(resp.Outputs) != 1 || resp.Outputs[0].Parameters.BinaryDataSize != 2*3*4 || len(scores) != 2*3*4 {
		t.Fatalf("binary response: %+v, %d bytes after the header", resp, len(scores))
	}
	for i, want := range []float32{10, 10.001, 10.002, 20, 20.001, 20.002} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(scores[4*i:])); math.Abs(float64(got-want)) > 1e-4 {
			t.Fatalf("score %d = %v, want %v", i, got, want)
		}
	}
	resp, _ = infer(`[{"name":"output","parameters":{"classification":2}}]`, 200)
	cls := resp.Outputs[0]
	if cls.Datatype != "BYTES" || fmt.Sprint(cls.Shape) != "[2 2]" || len(cls.Data) != 4 || cls.Data[0] != "10.002000:2:c" || cls.Data[1] != "10.001000:1:b" {
		t.Fatalf("classification: %+v", cls)
	}
	// More classes asked for than the model has: all of them, as Triton answers.
	resp, _ = infer(`[{"name":"output","parameters":{"classification":20}}]`, 200)
	if cls := resp.Outputs[0]; fmt.Sprint(cls.Shape) != "[2 3]" || len(cls.Data) != 6 || cls.Data[5] != "20.000000:0:a" {
		t.Fatalf("classification 20 of 3 classes: %+v", cls)
	}
	// The same output twice (scores and classes): Triton's clients find a binary output's
	// bytes by its name, and would read one as the other. Refused, as Triton does.
	if body := string(mustSecond(infer(`[{"name":"output","parameters":{"binary_data":true}},{"name":"output","parameters":{"classification":2}}]`, 400))); !strings.Contains(body, "requested twice") {
		t.Fatalf("the same output twice: %s", body)
	}
	// Nested JSON tensor data into the tensor interface, and its errors.
	vals := make([]string, 3*side*side)
	for i := range vals {
		vals[i] = "0.5"
	}
	flat := strings.Join(vals, ",")
	nested := "[" + strings.Join([]string{"[" + flat[:len(flat)] + "]"}, ",") + "]"
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"inputs":[{"name":"input","shape":[1,3,8,8],"datatype":"FP32","data":[` + flat + `]}]}`, 200},
		{`{"inputs":[{"name":"input","shape":[1,3,8,8],"datatype":"FP32","data":` + nested + `}]}`, 200},
		{`{"inputs":[{"name":"input","shape":[1,3,8,8],"datatype":"FP32","data":[` + flat + `,1]}]}`, 400},
		{`{"inputs":[{"name":"input","shape":[1,3,8,8],"datatype":"FP32","data":[1,2]}]}`, 400},
		{`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["aGk="]}]}`, 400},
		{`{"inputs":[{"name":"x","shape":[1,3,8,8],"datatype":"FP32","data":[1]}]}`, 400},
		{`{"inputs":[{"name":"input","shape":[1,3,8,8],"datatype":"INT64","data":[1]}]}`, 400},
		{`{"id":"` + strings.Repeat("x", 300) + `","inputs":[]}`, 400},
	} {
		r := ts.do("POST", "/v2/models/m.tensor/infer", "application/json", []byte(c.body))
		if r.status != c.want {
			t.Errorf("%.80s: %d %s, want %d", c.body, r.status, r.body, c.want)
		}
	}
}

func mustSecond[A, B any](_ A, b B) B { return b }

// TestImageRowsReachTheTensor: a float32 model's images wait for their batch as bytes and are
// expanded into the input tensor when it runs; what the model gets is, bit for bit, what
// preprocessing straight into float32 gives. Tensor data still fills float32 rows, and a
// uint8 model gets its bytes. Requests of each kind alternate on the same pools, and the
// input tensor holds NaN before every run, so a value left unwritten shows.
func TestImageRowsReachTheTensor(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 4)
	f.rows = make(chan []float32, 16)
	u := newFake[uint8](3*side*side, 3, 4)
	u.rows = make(chan []uint8, 16)
	norm := modelOpts("m", RunnersOf[float32]{f})
	norm.Preprocess.Scale = preprocess.ScaleNormalized // ImageNet mean and std
	ts := newTestServer(t, testOptions(), norm, modelOpts("bytes", RunnersOf[uint8]{u}))
	for range 4 { // the warm-up runs, at the full batch size
		<-f.rows
		<-u.rows
	}
	pre, err := preprocess.New(norm.Preprocess)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	noise := func(w, h int) []byte {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for i := range img.Pix {
			img.Pix[i] = uint8(rng.Uint32())
		}
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	poison := func() {
		for i := range f.in {
			f.in[i] = float32(math.NaN())
		}
	}
	for round := range 3 {
		poison()
		img := noise(23+round, 17)
		if r := ts.do("POST", "/models/m/predict", "image/png", img); r.status != 200 {
			t.Fatalf("image: %d %s", r.status, r.body)
		}
		want := make([]float32, pre.SlotLen())
		if err := pre.Process(img, want); err != nil {
			t.Fatal(err)
		}
		got := <-f.rows
		for k := range want {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("round %d: image value %d reached the model as %v, preprocessing gives %v", round, k, got[k], want[k])
			}
		}
		poison()
		vals := make([]string, 3*side*side)
		for i := range vals {
			vals[i] = fmt.Sprint(float32(i*(round+1)) / 7)
		}
		body := `{"inputs":[{"name":"input","shape":[1,3,8,8],"datatype":"FP32","data":[` + strings.Join(vals, ",") + `]}]}`
		if r := ts.do("POST", "/v2/models/m.tensor/infer", "application/json", []byte(body)); r.status != 200 {
			t.Fatalf("tensor: %d %s", r.status, r.body)
		}
		got = <-f.rows
		for i := range vals {
			if want := float32(i*(round+1)) / 7; got[i] != want {
				t.Fatalf("round %d: tensor value %d reached the model as %v, want %v", round, i, got[i], want)
			}
		}
		if r := ts.do("POST", "/models/bytes/predict", "image/png", img); r.status != 200 {
			t.Fatalf("uint8 model: %d %s", r.status, r.body)
		}
		wantU := make([]uint8, pre.SlotLen())
		if err := pre.ProcessUint8(img, wantU); err != nil {
			t.Fatal(err)
		}
		if gotU := <-u.rows; !bytes.Equal(gotU, wantU) {
			t.Fatalf("round %d: the uint8 model got other bytes than preprocessing gives", round)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newGzip(w *bytes.Buffer) *gzip.Writer { return gzip.NewWriter(w) }

// TestSlowDecodesDoNotShedTightDeadlines: after a few images that took seconds to decode (a
// progressive JPEG with hundreds of scans), a request with a 200 ms deadline on an idle server
// is still served: the outliers barely move the decode-time average, and an idle decode
// gate predicts no wait. (Before, one such image got every later 200 ms request refused
// before its body, until requests without a deadline brought the average down.)
func TestSlowDecodesDoNotShedTightDeadlines(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 16, 16, 9)
	for range 5 {
		if r := ts.do("POST", "/models/m/predict", "image/png", img, "X-Request-Timeout", "200"); r.status != 200 {
			t.Fatalf("before: %d %s", r.status, r.body)
		}
	}
	for range 3 { // three decodes of 2 s each, as the gate sees them
		if err := ts.s.adm.Gate.Acquire(context.Background(), time.Now().Add(time.Hour), 0, 0, false, 0); err != nil {
			t.Fatal(err)
		}
		ts.s.adm.Gate.Release(0, false, 2*time.Second)
	}
	for range 5 {
		if r := ts.do("POST", "/models/m/predict", "image/png", img, "X-Request-Timeout", "200"); r.status != 200 {
			t.Fatalf("after slow decodes: %d %s", r.status, r.body)
		}
	}
}

// TestBrokenChunkedBodyIsAnsweredAtOnce: a chunk size that does not parse gets its 400 at
// once and the connection closes; the server does not read on, taking the bytes that follow
// for another chunk header, until server.read_timeout.
func TestBrokenChunkedBodyIsAnsweredAtOnce(t *testing.T) {
	_, r := answerWithinReadTimeout(t, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"fffffffffffffffff\r\nabc\r\n0\r\n\r\n")
	if r.StatusCode != 400 || !r.Close {
		t.Fatalf("%d, connection close %v; want 400 and close", r.StatusCode, r.Close)
	}
}

// TestDefaultModelStaysTheFirst: /predict/ serves the first model. While it is unloaded
// through the repository API, /predict/ answers 503 naming it, never another model's answer (it
// fell back to another model, with that model's labels under a 200, and kept serving it after
// the first was loaded again); once loaded again, /predict/ serves it.
func TestDefaultModelStaysTheFirst(t *testing.T) {
	first := modelOpts("first", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
	first.Labels = []string{"first-0", "first-1", "first-2"}
	other := modelOpts("other", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
	other.Labels = []string{"other-0", "other-1", "other-2"}
	ts := newTestServer(t, testOptions(), first, other)
	img := solidPNG(t, 20, 10, 100)
	served := func(want string) {
		t.Helper()
		r := ts.do("POST", "/predict/", "image/png", img)
		if r.status != 200 || !strings.Contains(string(r.body), want) {
			t.Fatalf("/predict/: %d %s; want 200 from %s", r.status, r.body, want)
		}
	}
	served("first-")
	if err := ts.s.UnloadModel("first"); err != nil {
		t.Fatal(err)
	}
	r := ts.do("POST", "/predict/", "image/png", img)
	if r.status != 503 || !strings.Contains(string(r.body), `default model \"first\" is not loaded`) {
		t.Fatalf("/predict/ with its model unloaded: %d %s; want 503 naming it", r.status, r.body)
	}
	if v := ts.metric(`gateway_request_failures_total{model="_unknown",version="",reason="unavailable"}`); v != 1 {
		t.Fatalf("the refusal is not counted: unavailable = %v", v)
	}
	if r := ts.do("POST", "/models/other/predict", "image/png", img); r.status != 200 || !strings.Contains(string(r.body), "other-") {
		t.Fatalf("the other model: %d %s", r.status, r.body)
	}
	first.Runners = RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}
	if err := ts.s.AddModel(first); err != nil {
		t.Fatal(err)
	}
	served("first-")
}

// TestShutdownPastItsTimeoutSucceeds: when shutdown_timeout passes with a batch still running
// and a request queued, the queued one is answered 503 draining, the running one once its batch
// ends, and Shutdown returns nil (the process exits 0): every accepted request was answered.
// It returned the models' "context canceled" from the aborted close, and the process exited 1.
func TestShutdownPastItsTimeoutSucceeds(t *testing.T) {
	f := newFake[float32](3*side*side, 3, 4)
	o := modelOpts("m", RunnersOf[float32]{f})
	o.Batching.MaxBatchSize = 1
	ts := newTestServer(t, testOptions(), o)
	f.gate = make(chan struct{}) // after the model's warm-up run
	img := solidPNG(t, 16, 16, 3)
	answers := make(chan reply, 2)
	for range 2 {
		go func() { answers <- ts.do("POST", "/models/m/predict", "image/png", img) }()
	}
	for ts.s.inflight.Load() < 2 || ts.s.models.Load().byName["m"][0].impl.queueLen() < 1 {
		time.Sleep(time.Millisecond)
	}
	// An idle keep-alive connection, whose client sends a request after the timeout (within the
	// drain's last moment): it is answered, not closed under the client.
	idle, err := ts.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(idle)
	live := "GET /v2/health/live HTTP/1.1\r\nHost: gw\r\n\r\n"
	io.WriteString(idle, live)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v %v", r, err)
	} else {
		io.Copy(io.Discard, r.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- ts.s.Shutdown(ctx) }()
	// Past the timeout, the queued request is answered first (the batch still runs, its gate
	// shut); then the batch may end, and its request gets its answer.
	first := <-answers
	if first.status != 503 || !strings.Contains(string(first.body), "draining") {
		t.Fatalf("the queued request: %d %s; want 503 draining", first.status, first.body)
	}
	io.WriteString(idle, live)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 || !r.Close {
		t.Fatalf("a request on an idle keep-alive connection after the timeout: %v %v; want 200 and close", r, err)
	}
	close(f.gate) // the running batch outlasted the timeout
	if r := <-answers; r.status != 200 && r.status != 503 {
		t.Fatalf("the running request: %d %s; want its result or 503", r.status, r.body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v; want nil, every request answered", err)
	}
}

// TestShutdownDoesNotWaitForAStuckReload: a reload that does not end (a model load or warm-up
// taking minutes; it hashed /dev/zero forever) holds the drain for abortGrace at most, not until
// it ends.
func TestShutdownDoesNotWaitForAStuckReload(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	ts.s.applyMu.Lock() // a reload in progress
	defer ts.s.applyMu.Unlock()
	done := make(chan error, 1)
	go func() { done <- ts.s.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain waits for the reload")
	}
}

// TestAdminHeadersAsThePublicListener: the admin listener reads header blocks up to the public
// listener's 16 KiB and answers a larger one 431 in our words; fasthttp's 4 KiB default reset a
// 5 KiB one and answered every parse error "malformed".
func TestAdminHeadersAsThePublicListener(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	ln := fasthttputil.NewInmemoryListener()
	go ts.s.ServeAdmin(ln)
	defer ln.Close()
	for _, c := range []struct {
		pad    int
		status int
	}{{5000, 200}, {20000, 431}} {
		conn, err := ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(conn, "POST /v2/repository/index HTTP/1.1\r\nHost: gw\r\nX-Pad: "+strings.Repeat("a", c.pad)+"\r\nContent-Length: 0\r\n\r\n")
		r, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || r.StatusCode != c.status {
			t.Fatalf("a %d-byte header on the admin listener: %v %v; want %d", c.pad, r, err, c.status)
		}
		conn.Close()
	}
}

// TestCountsAreDigitsOnly: top_k, the priority and Inference-Header-Content-Length are decimal
// digits; "+3" and " 3" are refused (strconv.Atoi took "+3"). A timeout is digits with an
// optional fraction, or "inf" (strconv.ParseFloat took "1_000", hex floats, "infinity").
func TestCountsAreDigitsOnly(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 16, 16, 3)
	for _, q := range []string{"top_k=2&priority=1", "timeout=2500.5", "timeout=inf", "timeout=Inf"} {
		if r := ts.do("POST", "/models/m/predict?"+q, "image/png", img); r.status != 200 {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
	}
	for _, q := range []string{"top_k=%2B2", "top_k=%202", "priority=%2B1", "top_k=0x2", "top_k=1234567890123456789",
		"timeout=1_000", "timeout=0x1p-2", "timeout=infinity", "timeout=5.", "timeout=.5", "timeout=1e3"} {
		if r := ts.do("POST", "/models/m/predict?"+q, "image/png", img); r.status != 400 {
			t.Errorf("%s: %d %s; want 400", q, r.status, r.body)
		}
	}
	body := `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + base64.StdEncoding.EncodeToString(img) + `"]}]}`
	if r := ts.do("POST", "/v2/models/m/infer", "application/json", []byte(body), "Inference-Header-Content-Length", strconv.Itoa(len(body))); r.status != 200 {
		t.Fatalf("Inference-Header-Content-Length: %d %s", r.status, r.body)
	}
	if r := ts.do("POST", "/v2/models/m/infer", "application/json", []byte(body), "Inference-Header-Content-Length", "+"+strconv.Itoa(len(body))); r.status != 400 {
		t.Errorf("Inference-Header-Content-Length with a sign: %d %s; want 400", r.status, r.body)
	}
}

// TestOpeningsThatAreNotHTTPAreAnsweredAtOnce: a TLS handshake sent to this plain-HTTP port
// (an https:// URL), bytes that cannot begin a request, and a request line ended by a bare LF
// (printf | nc) each get a 400 that says what was wrong, at once: fasthttp waited for a
// CRLFCRLF that never comes, until read_timeout, then answered 408. A request whose CR and LF
// arrive in separate reads is still served.
func TestOpeningsThatAreNotHTTPAreAnsweredAtOnce(t *testing.T) {
	clientHello := "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + strings.Repeat("\x2a", 32)
	for _, tc := range []struct{ name, raw, says string }{
		{"tls", clientHello, "TLS"},
		{"binary", "\x00\x01\x02\x03", "not an HTTP/1.x request"},
		{"bare LF", "GET /v2/health/ready HTTP/1.1\nHost: gw\n\n", "bare LF"},
		{"bare LF, HTTP/1.0", "GET /v2/health/live HTTP/1.0\n\n", "bare LF"},
		{"bare LF after an empty line", "\r\nGET /v2/health/live HTTP/1.1\nHost: gw\n\n", "bare LF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, r := answerWithinReadTimeout(t, tc.raw)
			body, _ := io.ReadAll(r.Body)
			if r.StatusCode != 400 || !r.Close || !strings.Contains(string(body), tc.says) {
				t.Fatalf("%d, connection close %v, %s; want 400, close and %q", r.StatusCode, r.Close, body, tc.says)
			}
		})
	}
	t.Run("CR and LF apart", func(t *testing.T) {
		o := testOptions()
		ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
		c, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		for _, piece := range []string{"\r", "\n\r\nGET /v2/health/live HTTP/1.1\r", "\nHost: gw\r\n", "\r\n"} { // empty lines first
			if _, err := io.WriteString(c, piece); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // separate reads
		}
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("%v %v; want 200", r, err)
		}
	})
}

// TestBodyErrorsDoNotEchoTheRequest: a malformed chunk size or trailer line is answered with
// our words only; fasthttp's error text, which quoted the line (a 3 KB Authorization trailer
// came back whole), is neither sent nor logged.
func TestBodyErrorsDoNotEchoTheRequest(t *testing.T) {
	for _, tail := range []string{
		"3\r\nabc\r\n0\r\nAuthorization Bearer-secret-token\r\n\r\n", // a trailer line without a colon
		"3 secret-token\r\nabc\r\n0\r\n\r\n",                         // a chunk size followed by junk
	} {
		_, r := answerWithinReadTimeout(t, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n"+tail)
		body, _ := io.ReadAll(r.Body)
		if r.StatusCode != 400 || strings.Contains(string(body), "secret") || !strings.Contains(string(body), "chunked") {
			t.Fatalf("%q: %d %s; want 400 naming the chunked encoding, without the request's bytes", tail, r.StatusCode, body)
		}
	}
}

// TestUnneededBodiesAreDropped: a body sent to a path that does not read it (metrics, health,
// the version, an unknown path) is read and dropped, so that a request pipelined after it is
// answered; fasthttp dropped 256 KiB at most and closed the connection, losing the next request.
// A request line naming another HTTP version than 1.0 or 1.1 gets 505.
func TestUnneededBodiesAreDropped(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	for _, path := range []string{"/metrics", "/v2/health/ready", "/v2", "/", "/nope", "/v2/repository/index",
		"/models/predict", "/v2/models/infer"} { // not inference paths, though they end like ones
		c, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		body := strings.Repeat("x", 600<<10)
		go io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: gw\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body+
			"GET /v2/health/live HTTP/1.1\r\nHost: gw\r\n\r\n")
		br := bufio.NewReader(c)
		first, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, first.Body)
		next, err := http.ReadResponse(br, nil)
		if err != nil || next.StatusCode != 200 {
			t.Fatalf("POST %s with a 600 KiB body (%d), then a pipelined request: %v %v", path, first.StatusCode, next, err)
		}
		c.Close()
	}
	_, r := answerWithinReadTimeout(t, "GET /v2/health/live HTTP/2.0\r\nHost: gw\r\n\r\n")
	if r.StatusCode != 505 {
		t.Fatalf("HTTP/2.0 in the request line: %d, want 505", r.StatusCode)
	}
	// An encoded slash is refused: decoded, /v2/models/m%2Fready was served as readiness.
	for _, p := range []string{"/v2/models/m%2Fready", "/v2/models/m%2finfer"} {
		if _, r := answerWithinReadTimeout(t, "GET "+p+" HTTP/1.1\r\nHost: gw\r\n\r\n"); r.StatusCode != 400 {
			t.Errorf("%s: %d; want 400", p, r.StatusCode)
		}
	}
}

// answerWithinReadTimeout sends raw on a new connection to a server with a read_timeout of a
// minute and model m, and returns the server and the answer, which must come within a third of
// that timeout.
func answerWithinReadTimeout(t *testing.T, raw string) (*testServer, *http.Response) {
	t.Helper()
	o := testOptions()
	o.ReadTimeout = time.Minute
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	c, err := ts.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, raw)
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer before a third of read_timeout: %v", err)
	}
	return ts, r
}

// TestRefusalOnTheHeaderDoesNotWaitForTheBody: a body declared over max_body_bytes gets its
// 413 as soon as the request's first body bytes are in, not once 8 KiB of them are (fasthttp's
// pre-read), from a client that sends slowly; a body under the limit is still read whole.
func TestRefusalOnTheHeaderDoesNotWaitForTheBody(t *testing.T) {
	ts, r := answerWithinReadTimeout(t, fmt.Sprintf("POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n{}", 2<<20))
	if r.StatusCode != 413 || !r.Close {
		t.Fatalf("%d, connection close %v; want 413 and close", r.StatusCode, r.Close)
	}
	for _, n := range []int{1, 100, 9000} { // below, at and above the old pre-read
		img := solidPNG(t, 16, 16, 5)
		img = append(img, make([]byte, n)...) // trailing bytes: ignored by the decoder
		if r := ts.do("POST", "/models/m/predict", "image/png", img); r.status != 200 {
			t.Fatalf("a body of %d bytes: %d %s", len(img), r.status, r.body)
		}
	}
}

// TestOversizeBodyAnswerReachesAWriteFirstClient: a client that writes its whole body before
// it reads (as Python's http.client does) gets the 413 for a body over max_body_bytes, over
// TCP: the server reads and drops the rest of the body after its answer instead of closing
// the socket under the client (which reset the connection, and the answer with it).
func TestOversizeBodyAnswerReachesAWriteFirstClient(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.s.Serve(tcp)
	body := make([]byte, 24<<20) // max_body_bytes is 1 MiB; more than the sockets buffer
	for _, hdr := range []string{fmt.Sprintf("Content-Length: %d", len(body)), "Transfer-Encoding: chunked"} {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\n%s\r\n\r\n", hdr)
		if strings.HasPrefix(hdr, "Transfer") {
			_, err = fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		} else {
			_, err = c.Write(body)
		}
		if err != nil {
			t.Fatalf("%s: writing the body: %v", hdr, err)
		}
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", hdr, err)
		}
		if r.StatusCode != 413 || !r.Close {
			t.Fatalf("%s: %d, connection close %v; want 413 and close", hdr, r.StatusCode, r.Close)
		}
	}
	waitUntil(t, func() bool { return ts.metric("gateway_connections_lingering") == 0 })
}

// TestFreeListDoesNotAllocate: handing a body or image buffer back and taking it again
// allocates nothing once the list holds one.
func TestFreeListDoesNotAllocate(t *testing.T) {
	f := newFreeList(1 << 20)
	f.put(make([]byte, 0, 1024))
	allocs := testing.AllocsPerRun(1000, func() {
		b := f.get()
		if cap(b) == 0 {
			b = make([]byte, 0, 1024)
		}
		f.put(b)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per take and give back", allocs)
	}
}

// TestFreeListKeepsAtMostMax: a burst gives back more than the list keeps; the rest is left
// to the collector, and what is kept is handed out newest first.
func TestFreeListKeepsAtMostMax(t *testing.T) {
	f := newFreeList(10 << 10)
	for range 5 {
		f.put(make([]byte, 100, 4<<10))
	}
	f.put(make([]byte, 0, maxPooledBuffer+1)) // too large on its own
	f.put(nil)
	if got := f.held(); got != 8<<10 {
		t.Fatalf("keeps %d bytes, want 2 buffers of 4 KiB (max 10 KiB)", got)
	}
	small := make([]byte, 0, 1<<10)
	f.put(small)
	if b := f.get(); len(b) != 0 || cap(b) != 1<<10 || &b[:1][0] != &small[:1][0] {
		t.Fatalf("get returned len %d cap %d, want the buffer given back last, empty", len(b), cap(b))
	}
	f.get()
	f.get()
	if b := f.get(); b != nil || f.held() != 0 {
		t.Fatalf("an empty list returned cap %d and holds %d bytes", cap(b), f.held())
	}
}

// TestBurstDoesNotStayInTheHeap: after a burst of slow uploads, each holding a large body
// buffer at the same time, the server keeps at most its free lists' bound of them; the heap
// goes back near where it was after one collection. (The buffers were kept in a sync.Pool,
// which keeps everything given back for two collections, and a server that allocates so
// little collects rarely: after a 4x overload, some 60 MB stayed in the heap.)
func TestBurstDoesNotStayInTheHeap(t *testing.T) {
	const burst = 96
	o := testOptions()
	o.MaxInflightBytes = 32 << 20 // the free lists keep up to 4 MiB each
	o.MaxConnections = burst + 8
	o.DecodeQueue = burst
	mo := modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
	mo.Batching = batcher.Config{MaxBatchSize: 4, MaxQueueSize: burst}
	ts := newTestServer(t, o, mo)
	// Over TCP: the in-memory listener's pipes keep written data in a sync.Pool of their own.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.s.Serve(tcp)
	img := noisePNG(t, 300, 300) // some 270 KB
	keep := ts.s.bodyBufs.max
	if int64(burst*len(img)) < 2*keep {
		t.Fatalf("the burst (%d bytes) does not exceed the lists' bound (%d) enough to tell", burst*len(img), keep)
	}
	if r := ts.do("POST", "/models/m/predict", "image/png", img); r.status != 200 { // warm-up
		t.Fatalf("%d %s", r.status, r.body)
	}
	runtime.GC()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	base := ts.metric("gateway_inflight_bytes")
	conns := make([]net.Conn, burst)
	for i := range conns {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		conns[i] = c
		fmt.Fprintf(c, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", len(img))
		go c.Write(img[:len(img)-10])
	}
	// Every request holds most of its body at once.
	waitUntil(t, func() bool { return ts.metric("gateway_inflight_bytes")-base >= float64(burst*(len(img)-10)) })
	for _, c := range conns {
		go c.Write(img[len(img)-10:])
	}
	for _, c := range conns {
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		if r.StatusCode != 200 {
			t.Fatalf("a request of the burst: %d", r.StatusCode)
		}
	}
	waitUntil(t, func() bool { return ts.metric("gateway_inflight_bytes") == base })
	if held := ts.s.bodyBufs.held(); held > keep || held == 0 {
		t.Fatalf("the body list keeps %d bytes after the burst, want some, at most %d", held, keep)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	// What the body list keeps, plus slack for the runtime's and fasthttp's own caches (1.3 MB
	// of them with 8 CPUs); the burst's bodies are 26 MB.
	if limit := keep + 6<<20; grown > limit {
		t.Fatalf("the heap grew by %d bytes over the burst of %d bodies of %d bytes, want at most %d (what the body list keeps, and slack)",
			grown, burst, len(img), limit)
	}
}

// noisePNG is a w x h RGB PNG of random pixels (it does not compress).
func noisePNG(t testing.TB, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = uint8(rnd.Uint32())
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRefusedBodiesAreDrained: a request answered without its body being used (an unknown
// model or path) has its body read and dropped, so the connection serves the next request,
// also while many drains are under way (they share one discard region); a body beyond
// max_body_bytes is not read, and its connection is closed after the answer.
func TestRefusedBodiesAreDrained(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	// 40 slow clients, each stopped half way through a refused body: 40 drains under way.
	const slowHalf, slowClients = 200 << 10, 40
	var slow []net.Conn
	for range slowClients {
		c, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /models/nope/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", 2*slowHalf)
		go c.Write(bytes.Repeat([]byte("s"), slowHalf))
		slow = append(slow, c)
	}
	waitUntil(t, func() bool { return ts.s.conns.Draining() == slowClients })
	c, err := ts.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	body := bytes.Repeat([]byte("x"), 700<<10) // many of the in-memory listener's reads
	br := bufio.NewReader(c)
	read := func() *http.Response {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/models/nope/predict", "/nowhere"} {
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", path, len(body))
		go c.Write(body) // the answer may come before the body is all written
		if r := read(); r.StatusCode != 404 || r.Close {
			t.Fatalf("%s: %d, connection close %v", path, r.StatusCode, r.Close)
		}
		fmt.Fprintf(c, "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n")
		if r := read(); r.StatusCode != 200 {
			t.Fatalf("the request after a refused body of %d bytes: %d", len(body), r.StatusCode)
		}
	}
	// Chunked, past max_body_bytes: answered, then the connection closes.
	fmt.Fprintf(c, "POST /models/nope/predict HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n")
	go func() {
		chunk := bytes.Repeat([]byte("y"), 256<<10)
		for range 8 { // 2 MiB, max_body_bytes is 1 MiB
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
		fmt.Fprintf(c, "0\r\n\r\n")
	}()
	if r := read(); r.StatusCode != 404 || !r.Close {
		t.Fatalf("oversize chunked body: %d, connection close %v", r.StatusCode, r.Close)
	}
	// The slow clients finish their bodies and are answered.
	for _, sc := range slow {
		sc.SetDeadline(time.Now().Add(20 * time.Second))
		go sc.Write(bytes.Repeat([]byte("s"), slowHalf))
		if r, err := http.ReadResponse(bufio.NewReader(sc), nil); err != nil || r.StatusCode != 404 || r.Close {
			t.Fatalf("a slow client's refused body: %v %v", r, err)
		}
	}
	waitUntil(t, func() bool { return ts.s.conns.Draining() == 0 })
}

// TestQueuedImagesHoldBytes: a float32 model's queued image holds a byte per input value of
// the memory budget (what it keeps until its batch runs), not four.
func TestQueuedImagesHoldBytes(t *testing.T) {
	const w = 64
	rowLen := 3 * w * w
	f := newFake[float32](rowLen, 3, 1)
	mo := modelOpts("m", RunnersOf[float32]{f})
	mo.Preprocess.Width, mo.Preprocess.Height, mo.Preprocess.Resize = w, w, w
	mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 4}
	ts := newTestServer(t, testOptions(), mo)
	f.gate = make(chan struct{})
	img := solidPNG(t, 16, 16, 7)
	base := ts.metric("gateway_inflight_bytes")
	var wg sync.WaitGroup
	for range 3 { // 1 running (held in Run) and 2 queued
		wg.Go(func() {
			if r := ts.do("POST", "/models/m/predict", "image/png", img); r.status != 200 {
				t.Errorf("%d %s", r.status, r.body)
			}
		})
	}
	waitUntil(t, func() bool { return ts.metric(`gateway_pending_samples{model="m",version="1"}`) == 3 })
	waitUntil(t, func() bool { return ts.metric("gateway_decode_busy") == 0 }) // decode buffers given back
	held := int(ts.metric("gateway_inflight_bytes") - base)
	for range 3 {
		f.gate <- struct{}{}
	}
	wg.Wait()
	// Each request holds its body (len(img)+1 bytes reserved) and its row.
	if want := 3 * (len(img) + 1 + rowLen); held != want {
		t.Fatalf("3 requests hold %d bytes of the budget, want %d (a byte per value of a %d-value row, and the body)", held, want, rowLen)
	}
}

// TestV2DuplicateKeysAreRefused: an inference request that gives a key twice in one object is
// ambiguous (JSON leaves open which value counts) and gets a 400 naming the key; before, the
// last value counted and two "outputs" arrays were merged.
func TestV2DuplicateKeysAreRefused(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := base64.StdEncoding.EncodeToString(solidPNG(t, 16, 16, 3))
	input := `{"name":"input","shape":[1],"datatype":"BYTES","data":["` + img + `"]}`
	if r := ts.do("POST", "/v2/models/m/infer", "application/json", []byte(`{"id":"a","inputs":[`+input+`]}`)); r.status != 200 {
		t.Fatalf("a well-formed request: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ body, key string }{
		{`{"id":"a","id":"b","inputs":[` + input + `]}`, `"id"`},
		{`{"inputs":[` + input + `],"inputs":[` + input + `]}`, `"inputs"`},
		{`{"inputs":[` + input + `],"outputs":[{"name":"nope"}],"outputs":[]}`, `"outputs"`},
		{`{"inputs":[{"name":"input","shape":[1],"shape":[2],"datatype":"BYTES","data":["` + img + `"]}]}`, `"inputs[].shape"`},
		{`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["x"],"data":["` + img + `"]}]}`, `"inputs[].data"`},
		{`{"inputs":[` + input + `],"outputs":[{"name":"output","name":"output"}]}`, `"outputs[].name"`},
		{`{"parameters":{},"parameters":{},"inputs":[` + input + `]}`, `"parameters"`},
		// and the parameters read inside them (the last one counted)
		{`{"parameters":{"binary_data_output":true,"binary_data_output":false},"inputs":[` + input + `]}`, `"parameters.binary_data_output"`},
		{`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5,"binary_data_size":7}}]}`, `"inputs[].parameters.binary_data_size"`},
		{`{"inputs":[` + input + `],"outputs":[{"name":"output","parameters":{"binary_data":true,"binary_data":false}}]}`, `"outputs[].parameters.binary_data"`},
		{`{"inputs":[` + input + `],"outputs":[{"name":"output","parameters":{"classification":1,"classification":2}}]}`, `"outputs[].parameters.classification"`},
	} {
		r := ts.do("POST", "/v2/models/m/infer", "application/json", []byte(c.body))
		if r.status != 400 || !strings.Contains(string(r.body), `appears twice`) || !strings.Contains(string(r.body), strings.ReplaceAll(c.key, `"`, `\"`)) {
			t.Errorf("%s twice: %d %s", c.key, r.status, r.body)
		}
	}
}

// TestClientLeavingMidBodyIsCanceled: a client that closes its connection before its body is
// whole has left: counted as canceled (499, nothing written), not as a malformed request (400,
// which it never reads), with Content-Length and with chunked framing.
func TestClientLeavingMidBodyIsCanceled(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := append(solidPNG(t, 16, 16, 5), make([]byte, 64<<10)...) // more than fasthttp reads ahead
	for i, head := range []string{
		fmt.Sprintf("POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", 2*len(img)),
		"POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n", 2*len(img)),
	} {
		c, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, head)
		c.Write(img)
		time.Sleep(50 * time.Millisecond)
		c.Close()
		waitUntil(t, func() bool {
			return ts.metric(`gateway_requests_total{model="m",version="1",code="499"}`) == float64(i+1)
		})
		if v := ts.metric(`gateway_request_failures_total{model="m",version="1",reason="canceled"}`); v != float64(i+1) {
			t.Fatalf("case %d: canceled = %v, want %d", i, v, i+1)
		}
		if v := ts.metric(`gateway_request_failures_total{model="m",version="1",reason="bad_input"}`); v != 0 {
			t.Fatalf("case %d: bad_input = %v, want 0", i, v)
		}
	}
	// A body that is malformed, not cut short, is still a 400 to a client that reads it.
	_, r := answerWithinReadTimeout(t, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
	if r.StatusCode != 400 {
		t.Fatalf("malformed chunk size: %d, want 400", r.StatusCode)
	}
}

// TestRepositoryExtensionListedWhereServed: GET /v2 lists model_repository on the admin
// listener, and on the public one only with an admin token (the repository API is then
// served there to requests carrying it); it was listed on a public listener whose repository
// paths answered 404.
func TestRepositoryExtensionListedWhereServed(t *testing.T) {
	extensions := func(get func() (int, []byte)) []string {
		t.Helper()
		status, body := get()
		var md struct{ Extensions []string }
		if status != 200 || json.Unmarshal(body, &md) != nil {
			t.Fatalf("GET /v2: %d %s", status, body)
		}
		return md.Extensions
	}
	for _, token := range []string{"", "0123456789abcdef0123"} {
		o := testOptions()
		o.AdminToken = token
		ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
		public := extensions(func() (int, []byte) { r := ts.do("GET", "/v2", "", nil); return r.status, r.body })
		if slices.Contains(public, "model_repository") != (token != "") || !slices.Contains(public, "binary_tensor_data") {
			t.Errorf("token %q: the public listener lists %v", token, public)
		}
		if token != "" {
			if r := ts.do("POST", "/v2/repository/index", "", nil, "Authorization", "Bearer "+token); r.status != 200 {
				t.Errorf("the repository index on the public listener, with the token: %d %s", r.status, r.body)
			}
			// Its bodies are bounded there as on the admin listener (they were read whole,
			// past max_body_bytes and the memory budget): declared, and chunked.
			big := bytes.Repeat([]byte(" "), 2<<20)
			if r := ts.do("POST", "/v2/repository/models/m/load", "application/json", big, "Authorization", "Bearer "+token); r.status != 413 {
				t.Errorf("a 2 MiB load body on the public listener: %d, want 413", r.status)
			}
			c, err := ts.ln.Dial()
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			go func() {
				io.WriteString(c, "POST /v2/repository/models/m/load HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+token+"\r\nTransfer-Encoding: chunked\r\n\r\n")
				for range 64 {
					fmt.Fprintf(c, "%x\r\n%s\r\n", 32<<10, big[:32<<10])
				}
				io.WriteString(c, "0\r\n\r\n")
			}()
			r, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || r.StatusCode != 413 {
				t.Errorf("a 2 MiB chunked load body on the public listener: %v %v, want 413", r, err)
			}
			c.Close()
		} else if r := ts.do("POST", "/v2/repository/index", "", nil); r.status != 404 {
			t.Errorf("the repository index on the public listener without a token: %d, want 404", r.status)
		}
		ln := fasthttputil.NewInmemoryListener()
		go ts.s.ServeAdmin(ln)
		admin := extensions(func() (int, []byte) {
			c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
			status, body, err := c.Get(nil, "http://admin/v2")
			if err != nil {
				t.Fatal(err)
			}
			return status, body
		})
		ln.Close()
		if !slices.Contains(admin, "model_repository") {
			t.Errorf("token %q: the admin listener lists %v", token, admin)
		}
	}
}
