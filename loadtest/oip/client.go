package oip

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Client calls one server's Open Inference Protocol endpoints over HTTP. Its fields must not
// change while it is in use; it is then safe for concurrent use.
type Client struct {
	// BaseURL is the server's base URL, e.g. http://127.0.0.1:8080 (the /v2 paths are added).
	BaseURL string
	// HTTP is the client used; nil means http.DefaultClient.
	HTTP *http.Client
	// Compression compresses inference request bodies: "" (none), "gzip" or "deflate"
	// (zlib, as RFC 9110 defines it), sent with Content-Encoding as Triton's clients do.
	Compression string
	// Header holds headers added to every request (e.g. X-Request-Timeout).
	Header http.Header
}

// Error is a non-2xx answer: its status and the server's {"error": ...} message (or the start
// of its body when it is not that object).
type Error struct {
	StatusCode int
	Message    string
}

func (e *Error) Error() string { return fmt.Sprintf("oip: HTTP %d: %s", e.StatusCode, e.Message) }

// ServerMetadata is GET /v2's answer.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// TensorMetadata describes one of a model's inputs or outputs; -1 is a variable dimension.
type TensorMetadata struct {
	Name       string         `json:"name"`
	Datatype   string         `json:"datatype"`
	Shape      []int64        `json:"shape"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// ModelMetadata is GET /v2/models/{name}'s answer.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

// ModelPath is a model's (or model version's) path: /v2/models/{name}[/versions/{version}].
func ModelPath(model, version string) string {
	p := "/v2/models/" + url.PathEscape(model)
	if version != "" {
		p += "/versions/" + url.PathEscape(version)
	}
	return p
}

// InferPath is a model's inference path: ModelPath + /infer.
func InferPath(model, version string) string { return ModelPath(model, version) + "/infer" }

// Live reports whether the server is live (GET /v2/health/live answers 200). An error means
// no answer came.
func (c *Client) Live(ctx context.Context) (bool, error) { return c.health(ctx, "/v2/health/live") }

// Ready reports whether the server is ready (GET /v2/health/ready answers 200).
func (c *Client) Ready(ctx context.Context) (bool, error) { return c.health(ctx, "/v2/health/ready") }

// ModelReady reports whether a model (version: "" for the server's choice) is ready; an
// unknown model is not ready.
func (c *Client) ModelReady(ctx context.Context, model, version string) (bool, error) {
	return c.health(ctx, ModelPath(model, version)+"/ready")
}

func (c *Client) health(ctx context.Context, path string) (bool, error) {
	resp, _, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return false, err
	}
	return resp.StatusCode == http.StatusOK, nil
}

// ServerMetadata returns GET /v2.
func (c *Client) ServerMetadata(ctx context.Context) (*ServerMetadata, error) {
	var m ServerMetadata
	return &m, c.getJSON(ctx, "/v2", &m)
}

// ModelMetadata returns a model's metadata (version: "" for the server's choice).
func (c *Client) ModelMetadata(ctx context.Context, model, version string) (*ModelMetadata, error) {
	var m ModelMetadata
	return &m, c.getJSON(ctx, ModelPath(model, version), &m)
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return answerError(resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w answer to GET %s: %v", ErrInvalid, path, err)
	}
	return nil
}

// Infer runs an inference request on a model (version: "" for the server's choice). A non-2xx
// answer is an *Error.
func (c *Client) Infer(ctx context.Context, model, version string, req *Request) (*Response, error) {
	enc, err := req.Encode()
	if err != nil {
		return nil, err
	}
	return c.InferEncoded(ctx, InferPath(model, version), enc)
}

// InferEncoded posts an encoded request to path (see InferPath) and decodes the answer.
func (c *Client) InferEncoded(ctx context.Context, path string, enc Encoded) (*Response, error) {
	hdr := map[string]string{"Content-Type": enc.ContentType()}
	if enc.Binary {
		hdr[HeaderLength] = strconv.Itoa(enc.HeaderLength)
	}
	resp, body, err := c.do(ctx, http.MethodPost, path, enc.Body, hdr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, answerError(resp.StatusCode, body)
	}
	hl := -1
	if v := resp.Header.Get(HeaderLength); v != "" {
		if hl, err = strconv.Atoi(v); err != nil || hl < 0 {
			return nil, fmt.Errorf("%w response: %s %q", ErrInvalid, HeaderLength, v)
		}
	}
	return DecodeResponse(body, hl)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, hdr map[string]string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		var err error
		if body, err = compress(c.Compression, body); err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("oip: %w", err)
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != nil && c.Compression != "" {
		req.Header.Set("Content-Encoding", c.Compression)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("oip: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("oip: %s %s: reading the answer: %w", method, path, err)
	}
	return resp, b, nil
}

func compress(algo string, body []byte) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch algo {
	case "":
		return body, nil
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	default:
		return nil, fmt.Errorf("%w Compression %q: want gzip, deflate or none", ErrInvalid, algo)
	}
	w.Write(body) // writes to a bytes.Buffer do not fail
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("oip: compressing the request: %w", err)
	}
	return buf.Bytes(), nil
}

// answerError builds the *Error of a non-2xx answer.
func answerError(status int, body []byte) error {
	var e struct {
		Error *string `json:"error"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		msg = *e.Error
	} else if len(bytes.TrimSpace(body)) == 0 {
		msg = "(empty body) " + http.StatusText(status)
	} else {
		msg = string(body)
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		msg = "(not an {\"error\": ...} object) " + strconv.Quote(msg)
	}
	return &Error{StatusCode: status, Message: msg}
}
