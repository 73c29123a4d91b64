package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

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
	ct := r.fc.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	body := r.body
	switch {
	case len(ct) == 0 && len(body) > 0 && (body[0] == '{' || body[0] == ' ' || body[0] == '\n'),
		bytes.EqualFold(ct, []byte("application/json")):
		field, err := extractJSONField(body, "image")
		if err == nil {
			field, err = stripDataURL(field)
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
		img, scratch, err := decodeBase64Budget(r.img, r.scratch, field, r.reserve)
		r.scratch = scratch
		if err != nil {
			return nil, err
		}
		r.img = img
		// The JSON body is spent: a request waiting for a decode worker holds only the image.
		r.dropBody()
		return img, nil
	case len(ct) >= len("image/") && bytes.EqualFold(ct[:len("image/")], []byte("image/")), // media types ignore case
		bytes.EqualFold(ct, []byte("application/octet-stream")), len(ct) == 0:
		if len(body) == 0 {
			return nil, bodyErr("the request body is empty")
		}
		return body, nil
	}
	return nil, fmt.Errorf("%w: Content-Type %q is not supported; send application/json "+
		"{\"image\": \"<base64>\"}, image/jpeg, image/png, image/webp or application/octet-stream",
		errUnsupportedMedia, truncate(string(ct), 60))
}

func (predictAPI) decodes() bool { return true }

func (predictAPI) write(r *request) error {
	r.out = appendPrediction(r.out[:0], r.m.labels, r.samples.scores(0), r.topK)
	r.fc.SetContentType("application/json")
	r.fc.SetBody(r.out)
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
	b = appendJSONString(b, labels[best])
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
			b = appendJSONString(b, labels[i])
			b = append(b, `,"score":`...)
			b = appendJSONFloat(b, probs[i])
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendJSONFloat appends v, or null for NaN and ±Inf (which JSON cannot hold; a model output
// may).
func appendJSONFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', 6, 64)
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

// appendJSONString appends s as a JSON string (invalid UTF-8 replaced).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size - 1
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
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
	b = appendJSONString(b, msg)
	b = append(b, '}')
	ctx.SetBody(b)
}
