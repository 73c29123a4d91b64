package layout

import (
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/imagegate/imagegate/"

// mayImport lists, for the packages whose place is fixed, every package of this module they
// may import (none: an empty list).
var mayImport = map[string][]string{
	"internal/queue":               {},
	"internal/testutil":            {},
	"internal/onnxtest":            {},
	"internal/testcert":            {},
	"internal/pilref":              {},
	"batcher":                      {"internal/queue"},
	"preprocess":                   {"preprocess/internal/resample"},
	"preprocess/internal/resample": {},
	"preprocess/internal/jpegenc":  {},
	"postprocess":                  {},
	"gateway": {"batcher", "preprocess", "postprocess", "gateway/internal/admit", "gateway/internal/netx",
		"gateway/internal/sched", "gateway/internal/stats", "gateway/internal/wire", "gateway/internal/grpcio",
		"gateway/internal/watchdog", "gateway/internal/grpcapi", "gateway/internal/metricset", "gateway/internal/modeldesc", "gateway/internal/console",
		"gateway/internal/tlsx", "gateway/internal/auth", "api/inference", "api/openapi", "gateway/internal/answer"},
	"gateway/internal/answer":    {"gateway/internal/wire", "postprocess"},
	"gateway/internal/grpcio":    {"api/inference"},
	"gateway/internal/grpcapi":   {"api/inference", "gateway/internal/grpcio", "gateway/internal/stats", "gateway/internal/wire"},
	"gateway/internal/modeldesc": {"api/inference"},
	"gateway/internal/admit":     {"internal/queue"},
	"gateway/internal/netx":      {},
	"gateway/internal/tlsx":      {},
	"gateway/internal/auth":      {},
	"gateway/internal/sched":     {},
	"gateway/internal/metricset": {},
	"gateway/internal/console":   {},
	"gateway/internal/stats":     {},
	"gateway/internal/wire":      {},
	"gateway/internal/watchdog":  {},
	"internal/tracing":           {},
}

// mustNotImport lists, for packages (and those below them), what they must not import
// (itself or below it): a package of this module ("./configs") or any other ("image").
var mustNotImport = map[string][]string{
	// The batcher batches generic items: no images, ONNX, HTTP or metrics library.
	// Nor tracing: the gateway's jobs carry their span contexts through it.
	"batcher": {"image", "github.com/yalue/onnxruntime_go", "github.com/valyala/fasthttp", "github.com/VictoriaMetrics/metrics", "go.opentelemetry.io"},
	// The gateway gets its runners and options injected, its tracer provider too (it uses
	// OpenTelemetry's API, never its SDK or exporters).
	"gateway": {"./configs", "./runtime", "github.com/yalue/onnxruntime_go", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters"},
	// Post-processing is arithmetic on output tensors: no HTTP, ONNX Runtime or images.
	"postprocess": {"image", "net", "github.com/yalue/onnxruntime_go", "github.com/valyala/fasthttp", "github.com/VictoriaMetrics/metrics"},
	"runtime/ort": {"./gateway", "./batcher", "./preprocess", "./configs", "./loadtest"},
	"configs":     {"./gateway", "./batcher", "./runtime", "./loadtest"},
	// The load generator talks to a server over the network only.
	"loadtest": {"./gateway", "./batcher", "./preprocess", "./runtime", "./configs"},
	// The protocol's definition serves servers and clients alike.
	"api": {"./gateway", "./batcher", "./preprocess", "./runtime", "./configs", "./loadtest"},
}

// TestImportGraph: every package of the module imports only what its place allows; none
// imports a command or a package above it (its parent directories).
func TestImportGraph(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root {
			name := d.Name()
			if strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || isModule(path) {
				return filepath.SkipDir
			}
		}
		if !d.IsDir() {
			return nil
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here, or only tests
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		seen++
		for _, e := range problems(rel, pkg.Imports) {
			t.Error(e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range mayImport {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s is in mayImport but not in the tree: update the rules", p)
		}
	}
	if seen < len(mayImport) {
		t.Fatalf("only %d packages found under %s", seen, root)
	}
}

// problems lists how rel, importing imports, breaks the rules.
func problems(rel string, imports []string) []string {
	var out []string
	allowed, fixed := mayImport[rel]
	for _, imp := range imports {
		own, ok := strings.CutPrefix(imp, module)
		if ok {
			if strings.HasPrefix(own, "cmd/") {
				out = append(out, fmt.Sprintf("%s imports the command %s", rel, own))
			}
			if strings.HasPrefix(rel, own+"/") {
				out = append(out, fmt.Sprintf("%s imports %s, above it", rel, own))
			}
			if fixed && !slices.Contains(allowed, own) {
				out = append(out, fmt.Sprintf("%s imports %s, which docs/architecture.md does not let it", rel, own))
			}
		}
		for scope, denied := range mustNotImport {
			if rel != scope && !strings.HasPrefix(rel, scope+"/") {
				continue
			}
			for _, d := range denied {
				path := imp
				if m, isOwn := strings.CutPrefix(d, "./"); isOwn {
					if !ok {
						continue
					}
					d, path = m, own
				}
				if path == d || strings.HasPrefix(path, d+"/") {
					out = append(out, fmt.Sprintf("%s imports %s; %s must not import %s", rel, imp, scope, d))
				}
			}
		}
	}
	return out
}

// TestRulesCatchBadEdges: the rules refuse an edge up, a command, an edge a fixed package
// may not have, and a denied library, and let the standard library's runtime through.
func TestRulesCatchBadEdges(t *testing.T) {
	for _, c := range []struct {
		rel, imp string
		bad      bool
	}{
		{"gateway/internal/netx", module + "gateway", true},
		{"gateway/internal/wire", module + "preprocess", true},
		{"loadtest/oip", module + "cmd/gateway", true},
		{"batcher", "image/jpeg", true},
		{"loadtest", module + "gateway", true},
		{"gateway", module + "runtime/ort", true},
		{"loadtest", "runtime", false},
		{"gateway", module + "gateway/internal/netx", false},
		{"api/inference", "google.golang.org/protobuf/proto", false},
	} {
		if got := len(problems(c.rel, []string{c.imp})) > 0; got != c.bad {
			t.Errorf("%s importing %s: refused %v, want %v", c.rel, c.imp, got, c.bad)
		}
	}
}

// isModule reports whether dir is the root of another Go module (deploy/).
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}
