package loadtest

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// JSONImageBody returns the article's request body for one image file's
// bytes: {"image": "<standard base64>"} (spaced as Python's json.dumps
// writes it, like the article's rime_5868.json).
func JSONImageBody(name string, image []byte) Body {
	const head, tail = `{"image": "`, `"}`
	buf := make([]byte, 0, len(head)+base64.StdEncoding.EncodedLen(len(image))+len(tail))
	buf = append(buf, head...)
	buf = base64.StdEncoding.AppendEncode(buf, image)
	buf = append(buf, tail...)
	return Body{Name: name, Data: buf}
}

// LoadJSONImageBodies reads image files and wraps each with JSONImageBody.
func LoadJSONImageBodies(files []string) ([]Body, error) {
	bodies := make([]Body, 0, len(files))
	for _, f := range files {
		img, err := readRegular(f)
		if err != nil {
			return nil, fmt.Errorf("cannot read image for -json-image: %w", err)
		}
		bodies = append(bodies, JSONImageBody(filepath.Base(f), img))
	}
	return bodies, nil
}

// LoadBody reads one raw body file.
func LoadBody(file string) (Body, error) {
	data, err := readRegular(file)
	if err != nil {
		return Body{}, fmt.Errorf("cannot read body file: %w", err)
	}
	return Body{Name: filepath.Base(file), Data: data}, nil
}

// readRegular reads a regular file whole. A FIFO or a device is refused: reading it before the
// run could block forever (a FIFO nobody writes), where no signal reaches the run.
func readRegular(file string) ([]byte, error) {
	// Stat before opening: opening a FIFO for reading blocks until a writer opens it.
	st, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", file, st.Mode().Type())
	}
	if st.Size() > maxBodyFile {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d a body may have", file, st.Size(), maxBodyFile)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBodyFile+1))
	if err == nil && len(b) > maxBodyFile {
		err = fmt.Errorf("%s has more than the %d bytes a body may have", file, maxBodyFile)
	}
	return b, err
}

// maxBodyFile bounds a body file: every worker sends from the one copy in memory.
const maxBodyFile = 1 << 30

// ContentTypeFor guesses a Content-Type from a body file's extension for
// when none was given: JSON for .json, JPEG/PNG/WebP images by extension,
// application/octet-stream otherwise.
func ContentTypeFor(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".json":
		return "application/json"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".png":
		return "image/png"
	case ".webp":
		return "image/webp"
	default:
		return "application/octet-stream"
	}
}
