package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/preprocess"
)

// DecodeJSONImage decodes the article's request body, {"image": "<base64>"}, into dst (grown
// as needed; scratch is a second reusable buffer) and returns the image bytes and the buffers
// for reuse. It is what /predict/ does with a JSON body; exported for benchmarks that measure
// the same work without HTTP.
func DecodeJSONImage(body, dst, scratch []byte) (img, scratchOut []byte, err error) {
	return wire.DecodeJSONImage(body, dst, scratch)
}

// predictAPI is the article's front end: POST /predict/ (and /models/{name}/predict) with a
// JSON body {"image": "<base64>"} or a raw image body; the answer is {"prediction": label},
// with ?top_k=N the N best softmax scores.
type predictAPI struct{}

func (predictAPI) parse(r *request) error {
	img, err := r.imageBytes()
	if err != nil {
		return err
	}
	if err := r.expect(1); err != nil {
		return err
	}
	err = r.decodeImage(0, img)
	// The image is in the tensor rows (or refused): what waits for the batch holds no more.
	r.dropBody()
	r.dropImage()
	return err
}

// imageBytes returns the encoded image of a predict request: the body itself for image or
// octet-stream bodies, the decoded "image" field for JSON bodies.
func (r *request) imageBytes() ([]byte, error) {
	ct := r.http.fc.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	body := r.body
	json := bytes.EqualFold(ct, []byte("application/json"))
	raw := len(ct) >= len("image/") && bytes.EqualFold(ct[:len("image/")], []byte("image/")) || // media types ignore case
		bytes.EqualFold(ct, []byte("application/octet-stream"))
	if !json && !raw {
		// A type that says nothing about an image (none, or curl --data-binary's
		// application/x-www-form-urlencoded): the body's first bytes decide.
		switch {
		case preprocess.Sniff(body) != "":
			raw = true
		case startsJSONObject(body):
			json = true
		case len(ct) == 0:
			raw = true // the decoder names what it found
		}
	}
	switch {
	case json:
		field, err := wire.JSONField(body, "image")
		if err == nil {
			field, err = wire.StripDataURL(field)
		}
		if err != nil {
			return nil, err
		}
		if err := r.reserve(int64(base64.StdEncoding.DecodedLen(len(field)))); err != nil {
			return nil, err
		}
		if r.img == nil {
			r.img = r.s.imageBufs.get()
		}
		img, scratch, err := wire.DecodeBase64(r.img, r.scratch, field, r.reserve)
		r.scratch = scratch
		if err != nil {
			return nil, err
		}
		r.img = img
		// The JSON body is spent: a request waiting for a decode worker holds only the image.
		r.dropBody()
		return img, nil
	case raw:
		if len(body) == 0 {
			return nil, wire.Malformed("the request body is empty")
		}
		return body, nil
	}
	return nil, fmt.Errorf("%w: Content-Type %q is not supported and the body is neither a JSON object nor an image "+
		"the gateway recognises (JPEG, PNG, WebP, GIF, BMP, TIFF); send application/json {\"image\": \"<base64>\"}, "+
		"image/jpeg, image/png, image/webp or application/octet-stream",
		errUnsupportedMedia, wire.Truncate(string(ct), 60))
}

// startsJSONObject reports whether b's first byte after JSON white space opens an object.
func startsJSONObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

func (predictAPI) decodes() bool { return true }

func (predictAPI) write(r *request) error {
	r.out = appendPrediction(r.out[:0], r.m.labels, r.samples.output(0, scoresOutput), r.topK)
	r.http.fc.SetContentType("application/json")
	r.http.fc.SetBody(r.out)
	return nil
}

// appendPrediction writes {"prediction": label} and, with topK > 0, the top k softmax scores.
func appendPrediction(b []byte, labels []string, scores []float32, topK int) []byte {
	best := 0
	for i, v := range scores {
		if v > scores[best] {
			best = i
		}
	}
	b = append(b, `{"prediction":`...)
	b = wire.AppendJSONString(b, labels[best])
	if topK > 0 {
		b = append(b, `,"top_k":[`...)
		probs := softmax(scores)
		idx := topIndices(probs, topK)
		for n, i := range idx {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"label":`...)
			b = wire.AppendJSONString(b, labels[i])
			b = append(b, `,"score":`...)
			b = wire.AppendJSONFloat(b, probs[i])
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func softmax(scores []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range scores {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(scores))
	sum := 0.0
	for i, v := range scores {
		p[i] = math.Exp(float64(v) - mx)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// topIndices returns the indices of the k largest values, largest first (ties: lower index).
func topIndices[F float32 | float64](p []F, k int) []int {
	idx := make([]int, 0, k)
	for i := range p {
		pos := len(idx)
		for pos > 0 && p[idx[pos-1]] < p[i] {
			pos--
		}
		if pos >= k {
			continue
		}
		if len(idx) < k {
			idx = append(idx, 0)
		}
		copy(idx[pos+1:], idx[pos:len(idx)-1])
		idx[pos] = i
	}
	return idx
}

func writeJSONRaw(ctx *fasthttp.RequestCtx, status int, body string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(body)
}

// writeError writes our JSON error body {"error": msg} (the Open Inference Protocol's too).
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	b := []byte(`{"error":`)
	b = wire.AppendJSONString(b, msg)
	b = append(b, '}')
	ctx.SetBody(b)
}
