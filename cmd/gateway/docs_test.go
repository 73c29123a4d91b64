package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/imagegate/imagegate/internal/testcert"
)

// What the documentation says about the code, checked against the code: the metrics of
// docs/metrics.md against a running gateway's /metrics (both ways), the endpoints of the
// README's and docs/api.md's tables against a running gateway, docs/api.md's examples of the
// embed and detect tasks run as a reader runs them, the flags of docs/operations.md and the
// README against `bin/gateway -h`, and every relative link and anchor of the docs.

// section returns the lines of a Markdown document from the heading that starts with heading
// (e.g. "## API") to the next heading of the same or a higher level, code blocks skipped.
func section(t *testing.T, doc, heading string) []string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	var out []string
	in, fenced := false, false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			l := strings.IndexByte(line, ' ')
			if in && l > 0 && l <= level {
				break
			}
			if strings.HasPrefix(line, heading) {
				in = true
				continue
			}
		}
		if in && !fenced {
			out = append(out, line)
		}
	}
	if !in {
		t.Fatalf("no section %q", heading)
	}
	return out
}

// tableRows returns the cells of the table rows among lines (header and separator excluded).
func tableRows(lines []string) [][]string {
	var rows [][]string
	header := true
	for _, l := range lines {
		if !strings.HasPrefix(l, "|") {
			header = true
			continue
		}
		if header { // the header row; the separator follows
			header = false
			continue
		}
		if strings.HasPrefix(l, "|---") || strings.HasPrefix(l, "| ---") {
			continue
		}
		cells := splitRow(l)
		rows = append(rows, cells)
	}
	return rows
}

// splitRow splits a table row into trimmed cells, leaving | inside backticks alone.
func splitRow(l string) []string {
	var cells []string
	var cur strings.Builder
	code := false
	for _, r := range strings.Trim(strings.TrimSpace(l), "|") {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exported is what /metrics says about one family: its # TYPE and the label names its series
// carry (le and quantile excluded).
type exported struct {
	typ    string
	labels map[string]bool
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

func parseExposition(t *testing.T, text string) map[string]*exported {
	t.Helper()
	fams := map[string]*exported{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			fams[name] = &exported{typ: typ, labels: map[string]bool{}}
		}
	}
	for line := range strings.Lines(text) {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		name := m[1]
		f := fams[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); f == nil && ok && fams[base] != nil && (fams[base].typ == "histogram" || fams[base].typ == "summary") {
				f = fams[base]
			}
		}
		if f == nil {
			t.Errorf("/metrics: series %s has no # TYPE", name)
			continue
		}
		for _, l := range labelName.FindAllStringSubmatch(m[3], -1) {
			if l[1] != "le" && l[1] != "quantile" {
				f.labels[l[1]] = true
			}
		}
	}
	return fams
}

// TestDocsMetricsMatchTheGateway: every metric docs/metrics.md names exists on a running
// gateway's /metrics with the type and labels the doc gives, and every gateway_* family the
// gateway exports is in the doc; other families are the documented process_* and go_* ones.
func TestDocsMetricsMatchTheGateway(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	// TLS on the gRPC listener and API keys, so that their families exist too (HTTP stays
	// plain, its health and metrics open).
	ca := testcert.NewCA(t, "docs")
	pair := ca.Server(t, "gateway")
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	os.WriteFile(keys, []byte("keys:\n  - {name: docs, key: docs-test-key-0123456789}\n"), 0o600)
	config := fmt.Sprintf("server: {tls: {grpc: {cert_file: %s, key_file: %s}}, api_keys: {file: %s}}\n", pair.CertFile, pair.KeyFile, keys) +
		"models:\n" + defaultModelYAML(t, "{max_batch_size: 4, max_queue_delay: 1ms, adaptive: {latency_target: 50ms}}") +
		fmt.Sprintf("  - {name: auto, path: %s/models/mobilenet_v3_small/model.onnx}\n", repoRoot(t)) // max_batch_size: auto, its curve's series
	g := startGatewayFile(t, cfgPath, config)
	const key = "X-API-Key"
	if a := g.do("POST", "/predict/", "image/png", testPNG(t), key, "docs-test-key-0123456789"); a.status != 200 {
		t.Fatalf("predict: %d %s", a.status, a.body)
	}
	if a := g.do("POST", "/predict/", "text/plain", []byte("not an image"), key, "docs-test-key-0123456789"); a.status != 415 {
		t.Fatalf("a text body: %d %s", a.status, a.body)
	}
	// A model that fails to load, so that its counter exists.
	broken := filepath.Join(t.TempDir(), "broken.onnx")
	os.WriteFile(broken, []byte("this is not an ONNX model"), 0o644)
	os.WriteFile(cfgPath, []byte(config+fmt.Sprintf("  - {name: broken, path: %s, labels: %s/models/mobilenet_v3_small/labels.txt, input: {name: input, width: 224, height: 224}, output: {name: output}}\n", broken, repoRoot(t))), 0o644)
	if status, body := g.adminPost("/v2/repository/reload", ""); status == 200 {
		t.Fatalf("a reload with a broken model succeeded: %s", body)
	}
	fams := parseExposition(t, g.metricsText())
	if fams["gateway_model_load_failures_total"] == nil {
		t.Fatal("the failed load was not counted: the test cannot see every family")
	}

	doc := readDoc(t, "docs/metrics.md")
	documented := map[string]bool{}
	row := regexp.MustCompile("^`(gateway_[a-z_]+)(?:\\{([a-z_,]*)\\})?`$")
	for _, cells := range tableRows(strings.Split(doc, "\n")) {
		m := row.FindStringSubmatch(cells[0])
		if m == nil {
			continue
		}
		name := m[1]
		documented[name] = true
		f := fams[name]
		if f == nil {
			t.Errorf("docs/metrics.md: %s is not exported by the gateway", name)
			continue
		}
		if len(cells) < 2 || cells[1] != f.typ {
			t.Errorf("docs/metrics.md: %s is a %s, the doc says %q", name, f.typ, cells[1])
		}
		var want []string
		if m[2] != "" {
			want = strings.Split(m[2], ",")
		}
		got := slices.Sorted(func(yield func(string) bool) {
			for l := range f.labels {
				if !yield(l) {
					return
				}
			}
		})
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("docs/metrics.md: %s has labels %v, the doc says %v", name, got, want)
		}
	}
	if len(documented) < 30 {
		t.Fatalf("docs/metrics.md: %d metrics found in its tables; is the first column still `name{labels}`?", len(documented))
	}
	for name := range fams {
		switch {
		case strings.HasPrefix(name, "gateway_"):
			if !documented[name] {
				t.Errorf("%s is exported but not in docs/metrics.md", name)
			}
		case strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
		default:
			t.Errorf("%s is exported; docs/metrics.md documents gateway_*, go_* and process_* families only", name)
		}
	}
	// Any other mention (queries, prose) names a family that exists.
	for _, name := range regexp.MustCompile(`gateway_[a-z_]+[a-z]`).FindAllString(doc, -1) {
		base := name
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, s); ok && fams[b] != nil {
				base = b
			}
		}
		if fams[base] == nil {
			t.Errorf("docs/metrics.md mentions %s, which the gateway does not export", name)
		}
	}
}

// endpoints returns the `METHOD /path` code spans of a table's first column, with their
// optional parts ([/versions/{v}]) expanded both ways.
func endpoints(rows [][]string) []string {
	span := regexp.MustCompile(`^(GET|POST|PUT|DELETE|HEAD) (/\S*)$`)
	opt := regexp.MustCompile(`\[([^\]]+)\]`)
	var out []string
	for _, cells := range rows {
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			e := span.FindStringSubmatch(m[1])
			if e == nil {
				continue
			}
			out = append(out, e[1]+" "+opt.ReplaceAllString(e[2], ""))
			if opt.MatchString(e[2]) {
				out = append(out, e[1]+" "+opt.ReplaceAllString(e[2], "$1"))
			}
		}
	}
	return out
}

// TestDocsEndpointsAnswer sends a request to every endpoint of the README's API table and
// of docs/api.md's endpoint and admin tables; each must answer 200 on a running gateway.
func TestDocsEndpointsAnswer(t *testing.T) {
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 4, max_queue_delay: 1ms}"))
	img := testPNG(t)
	v2 := []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + b64(img) + `"]}]}`)
	var all []string
	for _, src := range []struct{ file, heading string }{
		{"README.md", "## API"},
		{"docs/api.md", "## Endpoints"},
		{"docs/api.md", "## Model repository (admin API)"},
	} {
		eps := endpoints(tableRows(section(t, readDoc(t, src.file), src.heading)))
		if len(eps) < 3 {
			t.Fatalf("%s, %s: %d endpoints found; is the first column still `METHOD /path`?", src.file, src.heading, len(eps))
		}
		all = append(all, eps...)
	}
	// Unloading the model last: the other requests need it.
	sort.SliceStable(all, func(i, j int) bool {
		return !strings.HasSuffix(all[i], "/unload") && strings.HasSuffix(all[j], "/unload")
	})
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e] {
			continue
		}
		seen[e] = true
		method, path, _ := strings.Cut(e, " ")
		path = strings.NewReplacer("{name}", "mobilenet_v3_small", "{v}", "1").Replace(path)
		if strings.Contains(path, "{") {
			t.Errorf("%s: a placeholder the test does not know", e)
			continue
		}
		var body []byte
		ctype := ""
		switch {
		case strings.HasSuffix(path, "/infer"):
			body, ctype = v2, "application/json"
		case strings.HasSuffix(path, "predict") || strings.HasSuffix(path, "predict/"):
			body, ctype = img, "image/png"
		}
		var status int
		var answer string
		if strings.HasPrefix(path, "/v2/repository") {
			status, answer = g.adminPost(path, "")
		} else {
			a := g.do(method, path, ctype, body)
			status, answer = a.status, string(a.body)
		}
		if status != 200 {
			t.Errorf("%s (%s %s): %d %.200s", e, method, path, status, answer)
		}
	}
}

// gatewayFlags returns the flags `bin/gateway -h` lists.
func gatewayFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(gatewayBin(t), "-h").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-zA-Z_-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 5 {
		t.Fatalf("bin/gateway -h listed %d flags:\n%s", len(flags), out)
	}
	return flags
}

// TestDocsFlagsMatchTheBinary: docs/operations.md's flag table lists exactly the flags of
// `bin/gateway -h`, and every flag the README shows exists.
func TestDocsFlagsMatchTheBinary(t *testing.T) {
	have := gatewayFlags(t)
	listed := map[string]bool{}
	flag := regexp.MustCompile(`^--?([a-zA-Z][a-zA-Z_-]*)`) // -x, or --x as Triton's and KServe's spell them
	for _, cells := range tableRows(section(t, readDoc(t, "docs/operations.md"), "## Flags and environment")) {
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			if f := flag.FindStringSubmatch(m[1]); f != nil {
				listed[f[1]] = true
			}
		}
	}
	for f := range have {
		if !listed[f] {
			t.Errorf("bin/gateway -%s is not in docs/operations.md's flag table", f)
		}
	}
	for f := range listed {
		if !have[f] {
			t.Errorf("docs/operations.md lists -%s, which bin/gateway does not have", f)
		}
	}
	// The README: code spans that start with a flag, and the flags of its bin/gateway commands.
	readme := readDoc(t, "README.md")
	var shown []string
	for _, m := range codeSpan.FindAllStringSubmatch(readme, -1) {
		if f := flag.FindStringSubmatch(m[1]); f != nil {
			shown = append(shown, f[1])
		}
	}
	sc := bufio.NewScanner(strings.NewReader(readme))
	for sc.Scan() {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "bin/gateway ")
		if !ok {
			continue
		}
		cmd, _, _ = strings.Cut(cmd, "#")
		for _, w := range strings.Fields(cmd) {
			if f := flag.FindStringSubmatch(w); f != nil {
				shown = append(shown, f[1])
			}
		}
	}
	if len(shown) < 5 {
		t.Fatalf("found %d flags in the README", len(shown))
	}
	slices.Sort(shown)
	for _, f := range slices.Compact(shown) {
		if !have[f] {
			t.Errorf("the README shows -%s, which bin/gateway does not have", f)
		}
	}
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings.
func anchors(doc string) map[string]bool {
	a := map[string]bool{}
	fenced := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		s := slug(h)
		for i := 1; a[s]; i++ { // GitHub numbers repeated headings
			s = fmt.Sprintf("%s-%d", slug(h), i)
		}
		a[s] = true
	}
	return a
}

// TestDocsLinksResolve: every relative link of the README and docs/ names a file of the
// repository, and every #anchor a heading of the file it points to.
func TestDocsLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := []string{"README.md", "bench/README.md", "bench/history.md"}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, f := range files {
		doc := readDoc(t, f)
		for _, m := range link.FindAllStringSubmatch(doc, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := filepath.Join(root, f) // a bare #anchor points into the same file
			if path != "" {
				dest = filepath.Join(filepath.Dir(filepath.Join(root, f)), path)
			}
			checked++
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor == "" || st.IsDir() {
				continue
			}
			b, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(b))[anchor] {
				t.Errorf("%s: link %s: no heading with that anchor", f, target)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d links", checked)
	}
}

// TestDocsTaskExamples runs docs/api.md's "Embeddings and detections" as a reader would: its
// configuration written to the file its bin/gateway command names, every command of its ```sh
// blocks in order in one directory, and each ```json block compared with what the command
// before it printed (approxJSON). Three things differ from a reader's terminal: the models are
// the shared face detector and MobileNetV2 cut at its pooled features here, the photo is
// ../shared/images' astronaut, and the server listens on a free port (127.0.0.1:8080 in the
// commands is rewritten to it) without the admin and gRPC listeners.
func TestDocsTaskExamples(t *testing.T) {
	shared := sharedDir(t)
	ortLib(t)
	for _, tool := range []string{"bash", "curl", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the examples need %s: %v", tool, err)
		}
	}
	box := t.TempDir()
	cutMobileNet(t, box) // box/features.onnx
	for dst, src := range map[string]string{
		"version-RFB-320.onnx": filepath.Join(shared, "models", "ultraface-rfb-320", "version-RFB-320.onnx"),
		"astronaut.png":        filepath.Join(shared, "images", "skimage_astronaut.png"),
	} {
		if _, err := os.Stat(src); err != nil {
			t.Skip("shared file absent: ", err)
		}
		if err := os.Symlink(src, filepath.Join(box, dst)); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := filepath.Abs(gatewayBin(t))
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(t, readDoc(t, "docs/api.md"), "## Embeddings and detections")
	var yaml string
	var g *gateway
	var last, lastCmd string
	compared := 0
	for _, b := range blocks {
		switch b.lang {
		case "yaml":
			yaml = b.text
			continue
		case "json":
			if lastCmd == "" {
				t.Fatalf("an output block follows no command:\n%s", b.text)
			}
			if !approxOutput(t, last, b.text) {
				t.Errorf("%s\nprinted:\n%s\ndocs/api.md says:\n%s", lastCmd, last, b.text)
			}
			compared++
			lastCmd = ""
			continue
		}
		for _, cmd := range commands(b.text) {
			last, lastCmd = "", cmd
			if args, ok := strings.CutPrefix(cmd, "bin/gateway "); ok {
				f := strings.Fields(args)
				if len(f) != 2 || f[0] != "-config" || yaml == "" || g != nil {
					t.Fatalf("%s: want one `bin/gateway -config FILE` after the configuration", cmd)
				}
				if err := os.WriteFile(filepath.Join(box, f[1]), []byte(yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				g = startGatewayIn(t, box, bin, "-config", f[1], "-listen", "127.0.0.1:0", "-admin-listen", "off", "-grpc-listen", "off")
				continue
			}
			if g != nil {
				cmd = strings.ReplaceAll(cmd, "http://127.0.0.1:8080", g.url)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			c := exec.CommandContext(ctx, "bash", "-c", cmd)
			c.Dir = box
			var stdout, stderr bytes.Buffer
			c.Stdout, c.Stderr = &stdout, &stderr
			err := c.Run()
			cancel()
			if err != nil {
				t.Fatalf("%s: %v\n%s%s", cmd, err, stdout.String(), stderr.String())
			}
			last = stdout.String()
		}
	}
	if g == nil || compared < 4 {
		t.Fatalf("the section started no gateway or showed %d answers", compared)
	}
}

// approxOutput compares a command's JSON output with the docs': numbers to within 0.02 plus
// 0.2 % (the docs' were computed on one CPU; other CPUs' kernels round differently), the rest
// exactly; an array whose last element is … is shown in part (its first elements).
func approxOutput(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("not JSON: %v: %s", err, got)
		return false
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(want, "…", `"…"`)), &w); err != nil {
		t.Fatalf("docs/api.md's output is not JSON: %v:\n%s", err, want)
	}
	return approxJSON(g, w)
}

func approxJSON(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			if gv, ok := g[k]; !ok || !approxJSON(gv, v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok {
			return false
		}
		if n := len(w); n > 0 && w[n-1] == "…" {
			w = w[:n-1]
			if len(g) <= len(w) {
				return false
			}
			g = g[:len(w)]
		}
		if len(g) != len(w) {
			return false
		}
		for i := range w {
			if !approxJSON(g[i], w[i]) {
				return false
			}
		}
		return true
	case float64:
		g, ok := got.(float64)
		return ok && math.Abs(g-w) <= 0.02+0.002*math.Abs(w)
	}
	return reflect.DeepEqual(got, want)
}
