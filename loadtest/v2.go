package loadtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/imagegate/imagegate/loadtest/oip"
)

// inferPath matches an Open Inference Protocol inference path, after an optional prefix.
var inferPath = regexp.MustCompile(`^(.*)/v2/models/([^/]+)(?:/versions/([^/]+))?/infer/?$`)

// V2Target resolves the URL of an Open Inference Protocol run. rawURL is either the server's
// base URL (http://host:port, or with a path prefix such as an ingress adds) to which
// /v2/models/{model}/infer is appended, or a model's inference URL
// (.../v2/models/{name}[/versions/{v}]/infer), used as it is; model may then be empty, or must
// name the same model. It returns the base URL (without /v2...), the model and the version
// ("" for the server's choice).
func V2Target(rawURL, model string) (base, name, version string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", "", "", fmt.Errorf("%w: URL %q must be http:// or https:// with a host", ErrConfig, rawURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", "", fmt.Errorf("%w: URL %q: an Open Inference Protocol URL takes no query", ErrConfig, rawURL)
	}
	path := u.EscapedPath()
	if m := inferPath.FindStringSubmatch(path); m != nil {
		name, _ = url.PathUnescape(m[2])
		version, _ = url.PathUnescape(m[3])
		if model != "" && model != name {
			return "", "", "", fmt.Errorf("%w: the URL names model %q, -model %q", ErrConfig, name, model)
		}
		u.Path, u.RawPath = "", ""
		return u.String() + m[1], name, version, nil
	}
	if strings.Contains(path, "/v2/") {
		return "", "", "", fmt.Errorf("%w: URL %q: want the server's base URL (http://host:port) or a model's inference URL (.../v2/models/NAME/infer)", ErrConfig, rawURL)
	}
	if model == "" {
		return "", "", "", fmt.Errorf("%w: the model to call: set -model NAME, or give its inference URL (.../v2/models/NAME/infer)", ErrConfig)
	}
	u.Path, u.RawPath = "", ""
	return u.String() + strings.TrimRight(path, "/"), model, "", nil
}

// ImageOf returns the encoded image a body carries: the image of the article's JSON body
// {"image": "<base64>"} (a data: URL prefix allowed), or the body itself when it is not JSON
// (an image file).
func ImageOf(b Body) ([]byte, error) {
	data := bytes.TrimLeft(b.Data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		if len(b.Data) == 0 {
			return nil, fmt.Errorf("%w: body %s is empty", ErrConfig, b.Name)
		}
		return b.Data, nil
	}
	var v struct {
		Image *string `json:"image"`
	}
	if err := json.Unmarshal(data, &v); err != nil || v.Image == nil {
		return nil, fmt.Errorf("%w: body %s is JSON but not the article's {\"image\": \"<base64>\"} (err %v)", ErrConfig, b.Name, err)
	}
	s := *v.Image
	if strings.HasPrefix(s, "data:") {
		if _, rest, ok := strings.Cut(s, ";base64,"); ok {
			s = rest
		}
	}
	img, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: body %s: its image is not standard base64: %v", ErrConfig, b.Name, err)
	}
	return img, nil
}

// V2ImageBody is an inference request carrying one encoded image as a BYTES input named input
// (shape [1]). In JSON the image is a base64 string and the scores come back as JSON; with
// binary the image travels as binary tensor data (its Inference-Header-Content-Length is in
// the body's Headers) and the outputs are asked for as binary data too. params are the
// request's parameters (nil: none).
func V2ImageBody(name string, image []byte, input string, binary bool, params map[string]any) (Body, error) {
	req := oip.Request{Inputs: []oip.Input{oip.ImageInput(input, binary, image)}, BinaryOutput: binary, Parameters: params}
	enc, err := req.Encode()
	if err != nil {
		return Body{}, err
	}
	b := Body{Name: name, Data: enc.Body}
	if enc.Binary {
		b.Headers = []Header{{Name: oip.HeaderLength, Value: strconv.Itoa(enc.HeaderLength)}}
	}
	return b, nil
}

// PrepareV2 turns cfg into an Open Inference Protocol run on model (see V2Target for cfg.URL
// and model): it reads the model's metadata from the server (with cfg.Headers; so a wrong
// URL or model fails here, before the run), checks that the model takes one BYTES input
// (encoded images), and replaces each of cfg.Bodies (an image file, or the article's JSON
// body) with an inference request for that image (V2ImageBody, with cfg.Params), cfg.URL with the model's
// inference URL, and sets Content-Type unless cfg.Headers has one. It is done once, before
// the run.
func PrepareV2(ctx context.Context, cfg *Config, model string, binary bool) error {
	if len(cfg.Bodies) == 0 {
		return fmt.Errorf("%w: -protocol v2 needs images (-json-image or -body)", ErrConfig)
	}
	base, name, version, err := V2Target(cfg.URL, model)
	if err != nil {
		return err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	c := &oip.Client{BaseURL: base, HTTP: &http.Client{Timeout: timeout}, Header: http.Header{}}
	for _, h := range cfg.Headers {
		if !strings.EqualFold(h.Name, "Content-Type") {
			c.Header.Add(h.Name, h.Value)
		}
	}
	md, err := c.ModelMetadata(ctx, name, version)
	if err != nil {
		return fmt.Errorf("cannot read model %s's metadata: %w", name, err)
	}
	if len(md.Inputs) != 1 || md.Inputs[0].Datatype != oip.BYTES {
		return fmt.Errorf("%w: model %s takes %s; -protocol v2 sends one BYTES input (encoded images)", ErrConfig, name, describeInputs(md.Inputs))
	}
	kind := "v2 JSON"
	if binary {
		kind = "v2 binary"
	}
	bodies := make([]Body, len(cfg.Bodies))
	for i, b := range cfg.Bodies {
		img, err := ImageOf(b)
		if err != nil {
			return err
		}
		if bodies[i], err = V2ImageBody(b.Name+" ("+kind+")", img, md.Inputs[0].Name, binary, cfg.Params); err != nil {
			return err
		}
	}
	cfg.Bodies = bodies
	cfg.URL = base + oip.InferPath(name, version)
	if !hasHeader(cfg.Headers, "Content-Type") {
		ct := "application/json"
		if binary {
			ct = "application/octet-stream"
		}
		cfg.Headers = append(cfg.Headers, Header{Name: "Content-Type", Value: ct})
	}
	return nil
}

func describeInputs(ins []oip.TensorMetadata) string {
	var parts []string
	for _, in := range ins {
		parts = append(parts, fmt.Sprintf("%s %s %v", in.Name, in.Datatype, in.Shape))
	}
	if len(parts) == 0 {
		return "no input"
	}
	return strings.Join(parts, ", ")
}

func hasHeader(hs []Header, name string) bool {
	for _, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return true
		}
	}
	return false
}
