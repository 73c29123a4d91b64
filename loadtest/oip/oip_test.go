package oip

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestEncodeJSONImages(t *testing.T) {
	req := Request{ID: "42", Inputs: []Input{ImageInput("input", false, []byte("\xff\xd8\xff"), []byte("ab"))},
		Outputs: []Output{{Name: "output", Classification: 3}}}
	enc, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"42","inputs":[{"name":"input","shape":[2],"datatype":"BYTES","data":["/9j/","YWI="]}],` +
		`"outputs":[{"name":"output","parameters":{"classification":3}}]}`
	if string(enc.Body) != want || enc.Binary || enc.HeaderLength != len(enc.Body) || enc.ContentType() != "application/json" {
		t.Fatalf("got %s (binary %v, header %d)\nwant %s", enc.Body, enc.Binary, enc.HeaderLength, want)
	}
}

func TestEncodeBinaryLayout(t *testing.T) {
	no := false
	req := Request{
		Inputs: []Input{
			ImageInput("img", true, []byte("abc"), []byte("")),
			{Name: "t", Datatype: FP32, Shape: []int64{1, 2}, FP32: []float32{1.5, -2}, Binary: true},
			{Name: "u", Datatype: UINT8, Shape: []int64{3}, UINT8: []uint8{0, 7, 255}},
		},
		Outputs:      []Output{{Name: "output", Binary: &no}},
		BinaryOutput: true,
	}
	enc, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	head := enc.Body[:enc.HeaderLength]
	var h struct {
		Parameters map[string]any
		Inputs     []struct {
			Name       string
			Parameters map[string]any
			Data       json.RawMessage
		}
		Outputs []struct {
			Parameters map[string]any
		}
	}
	if err := json.Unmarshal(head, &h); err != nil {
		t.Fatalf("header %q: %v", head, err)
	}
	if !enc.Binary || enc.ContentType() != "application/octet-stream" || h.Parameters["binary_data_output"] != true ||
		h.Outputs[0].Parameters["binary_data"] != false {
		t.Fatalf("header %s", head)
	}
	if h.Inputs[0].Parameters["binary_data_size"] != 4.0+3+4 || h.Inputs[1].Parameters["binary_data_size"] != 8.0 ||
		h.Inputs[0].Data != nil || string(h.Inputs[2].Data) != "[0,7,255]" {
		t.Fatalf("inputs %s", head)
	}
	var want []byte
	want = append(want, 3, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0)
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(1.5))
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(-2))
	if got := enc.Body[enc.HeaderLength:]; !bytes.Equal(got, want) {
		t.Fatalf("binary part % x, want % x", got, want)
	}
}

// TestRaw: an input's raw data is its binary tensor data, and a tensor set from raw data reads
// it back; a BYTES length prefix that lies and a count that contradicts the shape are refused.
func TestRaw(t *testing.T) {
	img := ImageInput("img", false, []byte("abc"), []byte(""))
	raw, err := img.Raw()
	if want := []byte{3, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0}; err != nil || !bytes.Equal(raw, want) {
		t.Fatalf("BYTES raw % x (%v), want % x", raw, err, want)
	}
	f := Input{Name: "t", Datatype: FP32, Shape: []int64{1, 2}, FP32: []float32{1.5, -2}}
	fraw, err := f.Raw()
	if err != nil || len(fraw) != 8 || math.Float32frombits(binary.LittleEndian.Uint32(fraw[4:])) != -2 {
		t.Fatalf("FP32 raw % x (%v)", fraw, err)
	}
	if _, err := (&Input{Name: "t", Datatype: FP32, Shape: []int64{3}, FP32: []float32{1}}).Raw(); !errors.Is(err, ErrInvalid) {
		t.Errorf("shape [3] with one value: %v", err)
	}
	bt := Tensor{Name: "o", Datatype: BYTES, Shape: []int64{2}}
	if err := bt.SetRaw(raw); err != nil || len(bt.Bytes) != 2 || string(bt.Bytes[0]) != "abc" || len(bt.Bytes[1]) != 0 {
		t.Fatalf("BYTES read back %q (%v)", bt.Bytes, err)
	}
	ft := Tensor{Name: "o", Datatype: FP32, Shape: []int64{1, 2}}
	if err := ft.SetRaw(fraw); err != nil || !reflect.DeepEqual(ft.FP32, []float32{1.5, -2}) {
		t.Fatalf("FP32 read back %v (%v)", ft.FP32, err)
	}
	for name, c := range map[string]struct {
		t   Tensor
		raw []byte
	}{
		"length says more": {Tensor{Name: "o", Datatype: BYTES, Shape: []int64{1}}, []byte{9, 0, 0, 0, 'a'}},
		"truncated length": {Tensor{Name: "o", Datatype: BYTES, Shape: []int64{2}}, []byte{0, 0, 0, 0, 1, 0}},
		"fewer elements":   {Tensor{Name: "o", Datatype: BYTES, Shape: []int64{2}}, []byte{0, 0, 0, 0}},
		"FP32 bytes short": {Tensor{Name: "o", Datatype: FP32, Shape: []int64{2}}, fraw[:7]},
		"4 x shape wraps":  {Tensor{Name: "o", Datatype: FP32, Shape: []int64{1<<62 + 2}}, fraw}, // 4n = 8 mod 2^64
		"no shape":         {Tensor{Name: "o", Datatype: FP32}, nil},
		"negative shape":   {Tensor{Name: "o", Datatype: UINT8, Shape: []int64{-1}}, nil},
		"unknown datatype": {Tensor{Name: "o", Datatype: "INT8", Shape: []int64{1}}, []byte{1}},
	} {
		if err := c.t.SetRaw(c.raw); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	for name, in := range map[string]Input{
		"count":     {Name: "x", Datatype: FP32, Shape: []int64{2, 2}, FP32: []float32{1, 2, 3}},
		"datatype":  {Name: "x", Datatype: "INT64", Shape: []int64{1}},
		"two kinds": {Name: "x", Datatype: FP32, Shape: []int64{1}, FP32: []float32{1}, UINT8: []uint8{1}},
		"NaN json":  {Name: "x", Datatype: FP32, Shape: []int64{1}, FP32: []float32{float32(math.NaN())}},
		"not text":  {Name: "x", Datatype: BYTES, Shape: []int64{1}, Bytes: [][]byte{{0xff}}},
		"negative":  {Name: "x", Datatype: BYTES, Shape: []int64{-1}, Bytes: [][]byte{{}}},
	} {
		if _, err := (&Request{Inputs: []Input{in}}).Encode(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// binaryResponse builds a response the way the binary data extension lays it out.
func binaryResponse(t *testing.T) ([]byte, int) {
	head := `{"model_name":"m","model_version":"3","id":"x","outputs":[` +
		`{"name":"scores","datatype":"FP32","shape":[2,2],"parameters":{"binary_data_size":16}},` +
		`{"name":"cls","datatype":"BYTES","shape":[2,1],"parameters":{"binary_data_size":31}},` +
		`{"name":"json","datatype":"FP32","shape":[2,2],"data":[[1,null],[3,4.5]]}]}`
	b := []byte(head)
	for _, f := range []float32{0.25, -1, 3, 1e-7} {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	for _, s := range []string{"0.5:1:dog", "2.000000:0:a:b"} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	if len(b)-len(head) != 47 {
		t.Fatalf("test response: %d binary bytes", len(b)-len(head))
	}
	return b, len(head)
}

func TestDecodeBinaryAndNestedJSON(t *testing.T) {
	body, hl := binaryResponse(t)
	r, err := DecodeResponse(body, hl)
	if err != nil {
		t.Fatal(err)
	}
	if r.ModelName != "m" || r.ModelVersion != "3" || r.ID != "x" || len(r.Outputs) != 3 {
		t.Fatalf("%+v", r)
	}
	if s := r.Output("scores"); !s.Binary || !reflect.DeepEqual(s.FP32, []float32{0.25, -1, 3, 1e-7}) || !reflect.DeepEqual(s.Row(1), []float32{3, 1e-7}) {
		t.Fatalf("scores %+v", s)
	}
	js := r.Output("json")
	if js.Binary || len(js.FP32) != 4 || !math.IsNaN(float64(js.FP32[1])) || js.FP32[3] != 4.5 {
		t.Fatalf("json %+v", js)
	}
	cls, err := r.Output("cls").Classes()
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]Class{{{0.5, 1, "dog"}}, {{2, 0, "a:b"}}}; !reflect.DeepEqual(cls, want) {
		t.Fatalf("classes %+v", cls)
	}
	for name, c := range map[string]struct {
		body []byte
		hl   int
	}{
		"extra binary":     {append(bytes.Clone(body), 0), hl},
		"short binary":     {body[:len(body)-1], hl},
		"no header length": {body, -1},
		"header too long":  {body, len(body) + 1},
		"count":            {[]byte(`{"outputs":[{"name":"o","datatype":"FP32","shape":[3],"data":[1,2]}]}`), -1},
		"object data":      {[]byte(`{"outputs":[{"name":"o","datatype":"FP32","shape":[1],"data":[{"a":1}]}]}`), -1},
		"no data":          {[]byte(`{"outputs":[{"name":"o","datatype":"FP32","shape":[1]}]}`), -1},
		"uint8 range":      {[]byte(`{"outputs":[{"name":"o","datatype":"UINT8","shape":[1],"data":[256]}]}`), -1},
	} {
		if _, err := DecodeResponse(c.body, c.hl); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestParseClass(t *testing.T) {
	for s, want := range map[string]Class{
		"12.500000:967:espresso": {12.5, 967, "espresso"},
		"-0.25:3":                {-0.25, 3, ""},
		"1:2:a:b":                {1, 2, "a:b"},
	} {
		if got, err := ParseClass(s); err != nil || got != want {
			t.Errorf("%q: %+v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "1", "x:1", "1:x", "1:-2:a"} {
		if _, err := ParseClass(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

// TestClientHTTP checks what the client puts on the wire (compression, headers, paths) and
// how it reads answers, against a stand-in server; the round trips against the real gateway
// are in cmd/gateway (TestV2Client*).
func TestClientHTTP(t *testing.T) {
	body, hl := binaryResponse(t)
	type seen struct {
		path, encoding, hl, ctype string
		body                      []byte
	}
	var last seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rd io.Reader = r.Body
		switch r.Header.Get("Content-Encoding") {
		case "gzip":
			rd, _ = gzip.NewReader(r.Body)
		case "deflate":
			rd, _ = zlib.NewReader(r.Body)
		}
		b, _ := io.ReadAll(rd)
		last = seen{r.URL.EscapedPath(), r.Header.Get("Content-Encoding"), r.Header.Get(HeaderLength), r.Header.Get("Content-Type"), b}
		switch {
		case r.URL.Path == "/v2/health/ready":
			w.WriteHeader(503)
		case strings.HasSuffix(r.URL.Path, "/ready"), r.URL.Path == "/v2/health/live":
		case r.URL.Path == "/v2":
			io.WriteString(w, `{"name":"s","version":"1","extensions":["binary_tensor_data"]}`)
		case r.URL.Path == "/v2/models/gone":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"unknown model"}`)
		case r.URL.Path == "/v2/models/plain/infer":
			w.WriteHeader(500)
			io.WriteString(w, "boom")
		case strings.HasSuffix(r.URL.Path, "/infer"):
			w.Header().Set(HeaderLength, strconv.Itoa(hl))
			w.Write(body)
		}
	}))
	defer srv.Close()
	ctx := t.Context()
	c := &Client{BaseURL: srv.URL + "/", Header: http.Header{"X-Request-Timeout": {"500"}}}
	if ok, err := c.Live(ctx); !ok || err != nil {
		t.Fatalf("live %v %v", ok, err)
	}
	if ok, err := c.Ready(ctx); ok || err != nil {
		t.Fatalf("ready %v %v", ok, err)
	}
	if ok, err := c.ModelReady(ctx, "a b", "2"); !ok || err != nil || last.path != "/v2/models/a%20b/versions/2/ready" {
		t.Fatalf("model ready %v %v %s", ok, err, last.path)
	}
	if m, err := c.ServerMetadata(ctx); err != nil || m.Name != "s" || m.Extensions[0] != "binary_tensor_data" {
		t.Fatalf("server metadata %+v %v", m, err)
	}
	var e *Error
	if _, err := c.ModelMetadata(ctx, "gone", ""); !errors.As(err, &e) || e.StatusCode != 404 || e.Message != "unknown model" {
		t.Fatalf("unknown model: %v", err)
	}
	req := &Request{Inputs: []Input{ImageInput("input", true, []byte("img"))}}
	if _, err := c.Infer(ctx, "plain", "", req); !errors.As(err, &e) || e.StatusCode != 500 || !strings.Contains(e.Message, `"boom"`) {
		t.Fatalf("plain-text error: %v", err)
	}
	enc, _ := req.Encode()
	for _, algo := range []string{"", "gzip", "deflate"} {
		c.Compression = algo
		r, err := c.Infer(ctx, "m", "3", req)
		if err != nil || len(r.Outputs) != 3 {
			t.Fatalf("%s: %v", algo, err)
		}
		if last.path != "/v2/models/m/versions/3/infer" || last.encoding != algo || last.hl != strconv.Itoa(enc.HeaderLength) ||
			last.ctype != "application/octet-stream" || !bytes.Equal(last.body, enc.Body) {
			t.Fatalf("%s: server saw %+v", algo, last)
		}
	}
	c.Compression = "brotli"
	if _, err := c.Infer(ctx, "m", "", req); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown compression: %v", err)
	}
}
