package loadtest

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestV2Target(t *testing.T) {
	for _, c := range []struct{ url, model, base, name, version string }{
		{"http://h:1", "m", "http://h:1", "m", ""},
		{"http://h:1/", "m", "http://h:1", "m", ""},
		{"https://h/serving/x/", "m", "https://h/serving/x", "m", ""},
		{"http://h:1/v2/models/m/infer", "", "http://h:1", "m", ""},
		{"http://h:1/p/v2/models/m.tensor/versions/3/infer", "m.tensor", "http://h:1/p", "m.tensor", "3"},
		{"http://h:1/v2/models/a%20b/infer", "", "http://h:1", "a b", ""},
	} {
		base, name, version, err := V2Target(c.url, c.model)
		if err != nil || base != c.base || name != c.name || version != c.version {
			t.Errorf("%q -model %q: %q %q %q %v", c.url, c.model, base, name, version, err)
		}
	}
	for _, c := range []struct{ url, model string }{
		{"http://h:1", ""},                        // no model
		{"http://h:1/v2/models/m/infer", "other"}, // two models
		{"http://h:1/v2/models/m", "m"},           // metadata, not infer
		{"http://h:1/?x=1", "m"},
		{"ftp://h/", "m"},
	} {
		if _, _, _, err := V2Target(c.url, c.model); !errors.Is(err, ErrConfig) {
			t.Errorf("%q -model %q: err %v", c.url, c.model, err)
		}
	}
}

func TestImageOf(t *testing.T) {
	img := []byte("\x89PNG\r\n\x1a\n...")
	b64 := base64.StdEncoding.EncodeToString(img)
	for name, b := range map[string]Body{
		"raw":      {Name: "a.png", Data: img},
		"article":  JSONImageBody("a.png", img),
		"data URL": {Name: "d.json", Data: []byte(` {"image": "data:image/png;base64,` + b64 + `"}`)},
	} {
		if got, err := ImageOf(b); err != nil || !bytes.Equal(got, img) {
			t.Errorf("%s: %q %v", name, got, err)
		}
	}
	for name, b := range map[string]Body{
		"empty":      {Name: "e"},
		"other JSON": {Name: "o.json", Data: []byte(`{"inputs": []}`)},
		"bad base64": {Name: "b.json", Data: []byte(`{"image": "!!"}`)},
	} {
		if _, err := ImageOf(b); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// TestPrepareV2Run prepares a binary v2 run of two images of different sizes and runs it
// against a stand-in server that checks every request as the binary data extension lays it
// out: its own Inference-Header-Content-Length, binary_data_size, the image after the header.
func TestPrepareV2Run(t *testing.T) {
	images := map[string]bool{"small": true, strings.Repeat("large image ", 1000): true}
	var mu sync.Mutex
	var bad []string
	seen := map[string]int{}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pre/v2/models/m":
			if r.Header.Get("Authorization") != "Bearer x" {
				w.WriteHeader(401)
				return
			}
			io.WriteString(w, `{"name":"m","platform":"p","inputs":[{"name":"pixels","datatype":"BYTES","shape":[-1]}],"outputs":[]}`)
			return
		case "/pre/v2/models/t":
			io.WriteString(w, `{"name":"t","platform":"p","inputs":[{"name":"x","datatype":"FP32","shape":[-1,3]}],"outputs":[]}`)
			return
		case "/pre/v2/models/m/infer":
		default:
			w.WriteHeader(404)
			return
		}
		body, _ := io.ReadAll(r.Body)
		hl, err := strconv.Atoi(r.Header.Get("Inference-Header-Content-Length"))
		fail := func(msg string) {
			mu.Lock()
			bad = append(bad, msg)
			mu.Unlock()
			w.WriteHeader(400)
		}
		if err != nil || hl > len(body) || r.Header.Get("Content-Type") != "application/octet-stream" {
			fail("headers " + r.Header.Get("Inference-Header-Content-Length") + " " + r.Header.Get("Content-Type"))
			return
		}
		var h struct {
			Parameters map[string]any
			Inputs     []struct {
				Name       string
				Datatype   string
				Shape      []int
				Parameters struct {
					Size int `json:"binary_data_size"`
				}
			}
		}
		if err := json.Unmarshal(body[:hl], &h); err != nil || len(h.Inputs) != 1 || h.Inputs[0].Name != "pixels" ||
			h.Inputs[0].Datatype != "BYTES" || h.Inputs[0].Parameters.Size != len(body)-hl || h.Parameters["binary_data_output"] != true {
			fail("header " + string(body[:min(hl, len(body))]))
			return
		}
		bin := body[hl:]
		if len(bin) < 4 || int(binary.LittleEndian.Uint32(bin)) != len(bin)-4 || !images[string(bin[4:])] {
			fail("binary data")
			return
		}
		mu.Lock()
		seen[string(bin[4:])]++
		mu.Unlock()
	})
	var bodies []Body
	for img := range images {
		bodies = append(bodies, Body{Name: "f", Data: []byte(img)})
	}
	cfg := Config{URL: srv.URL + "/pre/", Bodies: bodies, Requests: 40, Concurrency: 4, KeepAlive: true,
		Headers: []Header{{Name: "Authorization", Value: "Bearer x"}}}
	if err := PrepareV2(t.Context(), &cfg, "m", true); err != nil {
		t.Fatal(err)
	}
	if cfg.URL != srv.URL+"/pre/v2/models/m/infer" || !hasHeader(cfg.Headers, "Content-Type") || !strings.HasSuffix(cfg.Bodies[0].Name, "(v2 binary)") {
		t.Fatalf("prepared %+v", cfg)
	}
	res := mustRun(t, cfg)
	if res.Summary.OK2xx != 40 || len(bad) > 0 || len(seen) != 2 || seen["small"] != 20 {
		t.Fatalf("%d 2xx; server saw %v, refused %q", res.Summary.OK2xx, seen, bad)
	}
	// A JSON run carries base64 images and no header length.
	jcfg := Config{URL: srv.URL + "/pre/v2/models/m/infer", Bodies: []Body{{Name: "f", Data: []byte("small")}}, Requests: 1,
		Headers: []Header{{Name: "Authorization", Value: "Bearer x"}}}
	if err := PrepareV2(t.Context(), &jcfg, "", false); err != nil {
		t.Fatal(err)
	}
	if want := `{"inputs":[{"name":"pixels","shape":[1],"datatype":"BYTES","data":["c21hbGw="]}]}`; string(jcfg.Bodies[0].Data) != want ||
		jcfg.Bodies[0].Headers != nil || jcfg.Headers[len(jcfg.Headers)-1].Value != "application/json" {
		t.Fatalf("JSON body %s, headers %v %v", jcfg.Bodies[0].Data, jcfg.Bodies[0].Headers, jcfg.Headers)
	}
	// Refused before the run: a model that does not take images, no metadata, no images.
	for name, c := range map[string]struct {
		cfg   Config
		model string
	}{
		"tensor model":  {Config{URL: srv.URL + "/pre", Bodies: bodies}, "t"},
		"unknown model": {Config{URL: srv.URL + "/pre", Bodies: bodies}, "x"},
		"unauthorized":  {Config{URL: srv.URL + "/pre", Bodies: bodies}, "m"},
		"no images":     {Config{URL: srv.URL + "/pre", Headers: cfg.Headers}, "m"},
	} {
		if err := PrepareV2(t.Context(), &c.cfg, c.model, true); err == nil {
			t.Errorf("%s: prepared", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
