package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
	"sort"
	"strings"
	"sync"
)

//go:embed assets
var embedded embed.FS

// Asset is one embedded file as served: its bytes, a gzip-compressed copy when that is
// smaller, its content type and its ETag (a hash of its bytes, so that a new binary's page
// is fetched again and an unchanged one is answered 304). Assets are read-only and safe for
// concurrent use.
type Asset struct {
	Name        string // the path under /ui/, e.g. "console.js" ("" is the page itself)
	ContentType string
	ETag        string // quoted
	Body        []byte
	Gzip        []byte // nil when compression does not pay
}

var (
	loadOnce sync.Once
	byName   map[string]*Asset
)

// load reads the embedded files once, on the first request for one (not at start-up: a
// gateway whose console is never opened does not compress them).
func load() {
	byName = map[string]*Asset{}
	err := fs.WalkDir(embedded, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := embedded.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "assets/")
		sum := sha256.Sum256(body)
		a := &Asset{Name: name, ContentType: contentType(name), ETag: `"` + hex.EncodeToString(sum[:12]) + `"`, Body: body}
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		zw.Write(body)
		zw.Close()
		if z.Len() < len(body)*9/10 {
			a.Gzip = z.Bytes()
		}
		byName[name] = a
		return nil
	})
	if err != nil {
		panic("console: cannot read the embedded assets: " + err.Error()) // a broken build
	}
	byName[""] = byName["index.html"]
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8" // ES modules need a JavaScript type
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Lookup returns the asset served at /ui/{name}: "" or "index.html" is the page.
func Lookup(name string) (*Asset, bool) {
	loadOnce.Do(load)
	a, ok := byName[name]
	return a, ok
}

// Names lists the embedded files (the page's as index.html), sorted.
func Names() []string {
	loadOnce.Do(load)
	var out []string
	for n := range byName {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Headers are the response headers of every console answer (page, assets, snapshot). The
// content security policy lets the page load and call nothing but its own origin: no other
// host, no inline script or style, no frames; images may also be the photos the user picks
// (blob: URLs).
var Headers = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "no-referrer"},
	{"X-Frame-Options", "DENY"},
	{"Cross-Origin-Opener-Policy", "same-origin"},
	{"Cross-Origin-Resource-Policy", "same-origin"},
}
