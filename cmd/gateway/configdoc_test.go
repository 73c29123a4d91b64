package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/imagegate/imagegate/configs"
)

// docs/configuration.md is generated here, from the flag set (flags.go), the environment
// table and the configs package: its types' doc comments, its Defaults, its MetadataKeys, and
// a Complete run. TestConfigurationDoc fails when the committed file differs;
// `go generate ./cmd/gateway` (or this test with -update) rewrites it.

var update = flag.Bool("update", false, "rewrite docs/configuration.md")

const configDoc = "../../docs/configuration.md"

func TestConfigurationDoc(t *testing.T) {
	want, err := renderConfigDoc()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(configDoc, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the code says: run `go generate ./cmd/gateway` (the first difference is at line %d)", configDoc, firstDiff(got, want))
	}
}

// TestConfigurationDocDefaults: the block docs/configuration.md shows as the defaults is a
// valid configuration, and it means what an empty configuration means.
func TestConfigurationDocDefaults(t *testing.T) {
	doc, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- defaults -->\n```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no defaults block")
	}
	shown, err := configs.Parse(m[1], "/x")
	if err != nil {
		t.Fatalf("the defaults block is not a valid configuration: %v", err)
	}
	empty, err := configs.Parse([]byte("models: [{name: mymodel, path: model.onnx}]\n"), "/x")
	if err != nil {
		t.Fatal(err)
	}
	a, b := shown.Models[0], empty.Models[0]
	if !reflect.DeepEqual(shown.Server, empty.Server) || shown.Log != empty.Log || !reflect.DeepEqual(shown.Repository, empty.Repository) || shown.ONNXRuntime != empty.ONNXRuntime ||
		a.Name != b.Name || a.Path != b.Path || a.Labels != b.Labels || !reflect.DeepEqual(a.VersionPolicy, b.VersionPolicy) || a.Input != b.Input || a.Output != b.Output ||
		!reflect.DeepEqual(a.Preprocess, b.Preprocess) || !reflect.DeepEqual(a.Batching, b.Batching) || a.Runtime != b.Runtime {
		t.Fatalf("the defaults block means something else than no configuration:\n%+v\n%+v", shown, empty)
	}
}

// TestEnvironmentDocumented: every environment variable the gateway's code reads is in the
// environment table.
func TestEnvironmentDocumented(t *testing.T) {
	known := map[string]bool{}
	for _, e := range environment() {
		known[e.name] = true
	}
	re := regexp.MustCompile(`(?:Getenv|LookupEnv|getenv)\("([A-Z_0-9]+)"\)`)
	for _, dir := range []string{".", "../../configs", "../../gateway", "../../runtime/ort", "../../preprocess", "../../batcher", "../../internal/tracing"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				if !known[string(m[1])] {
					t.Errorf("%s reads $%s, which environment() does not document", f, m[1])
				}
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// goDocs reads the doc comments of the configs package's types and fields: "Server" and
// "Server.Listen".
func goDocs() (map[string]string, error) {
	fset := token.NewFileSet()
	out := map[string]string{}
	files, err := filepath.Glob("../../configs/*.go")
	if err != nil {
		return nil, err
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil {
					doc = g.Doc
				}
				out[ts.Name.Name] = doc.Text()
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fld := range st.Fields.List {
					for _, n := range fld.Names {
						out[ts.Name.Name+"."+n.Name] = fld.Doc.Text()
					}
				}
			}
		}
	}
	return out, nil
}

// meaning turns a doc comment into text for a table: one line, without the Go name it starts
// with ("Listen is the HOST:PORT..." is "the HOST:PORT...").
func meaning(doc, goName string) string {
	s := strings.Join(strings.Fields(doc), " ")
	switch {
	case strings.HasPrefix(s, goName+" is "), strings.HasPrefix(s, goName+" are "):
		_, s, _ = strings.Cut(s[len(goName)+1:], " ")
	case strings.HasPrefix(s, goName+", "), strings.HasPrefix(s, goName+": "):
		s = s[len(goName)+2:]
	case strings.HasPrefix(s, goName+" "):
		s = s[len(goName)+1:]
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// zeroMeaning is the sentence of a doc comment that says what its zero or empty value means.
func zeroMeaning(doc string) string {
	s := strings.Join(strings.Fields(doc), " ")
	for _, p := range []string{"0: ", "Empty: "} {
		if i := strings.Index(s, p); i >= 0 {
			r := s[i+len(p):]
			if j := strings.Index(r, ". "); j >= 0 {
				r = r[:j]
			}
			return strings.TrimSuffix(r, ".")
		}
	}
	return ""
}

// key is one configuration key.
type key struct {
	path    string // models[].input.width
	goType  string // the Go type holding the field: Input
	goName  string // the Go field: Width
	section bool   // a mapping of other keys
	value   reflect.Value
}

// doc is the key's doc comment: its field's, else (a section) its type's.
func (k key) doc(docs map[string]string) (string, string) {
	if d := docs[k.goType+"."+k.goName]; d != "" {
		return d, k.goName
	}
	t := k.value.Type()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return docs[t.Name()], t.Name()
}

// zero reports whether the key's default is zero or empty.
func (k key) zero() bool {
	return k.value.IsZero() || k.value.Kind() == reflect.Slice && k.value.Len() == 0
}

// whenEmpty says what a key's zero default becomes: its doc comment's sentence on it, else
// what Complete made of it for a model that tells only its input and output.
func whenEmpty(k key, docs map[string]string, fromModel map[string]configs.Setting) string {
	d, _ := k.doc(docs)
	if z := zeroMeaning(d); z != "" {
		return z
	}
	s, ok := fromModel[strings.TrimPrefix(k.path, "models[].")]
	if !ok {
		return ""
	}
	kind, how, _ := strings.Cut(s.Source, ": ")
	if kind == "model" {
		return "the model's"
	}
	if how == "" {
		how = s.Value
	}
	return "the model's metadata, else " + how
}

// keys lists the keys of v (a Config), depth first, in the order of the Go fields.
func keys(v reflect.Value, prefix string) []key {
	var out []key
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		p := prefix + name
		fv := v.Field(i)
		k := key{path: p, goType: t.Name(), goName: f.Name, value: fv}
		switch {
		case f.Type.Kind() == reflect.Struct:
			k.section = true
			out = append(out, k)
			out = append(out, keys(fv, p+".")...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			k.section, k.path = true, p+"[]"
			out = append(out, k)
			out = append(out, keys(fv.Index(0), p+"[].")...)
		default:
			out = append(out, k)
		}
	}
	return out
}

// yamlValue writes a value as a YAML scalar or flow list.
func yamlValue(v reflect.Value) string {
	var n yaml.Node
	if err := n.Encode(v.Interface()); err != nil {
		return "?"
	}
	n.Style = yaml.FlowStyle
	b, err := yaml.Marshal(&n)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// plainModel is the facts of a model that tells only its input and output.
func plainModel() configs.ModelFacts {
	return configs.ModelFacts{
		Inputs:  []configs.TensorFacts{{Name: "input", Type: "float32", Shape: []int64{-1, 3, 224, 224}}},
		Outputs: []configs.TensorFacts{{Name: "output", Type: "float32", Shape: []int64{-1, 1000}}},
	}
}

func renderConfigDoc() ([]byte, error) {
	docs, err := goDocs()
	if err != nil {
		return nil, err
	}
	defaults := configs.Defaults()
	plain, err := configs.Parse([]byte("models: [{name: mymodel, path: model.onnx}]\n"), "/")
	if err != nil {
		return nil, err
	}
	completion, err := plain.Models[0].Complete(plainModel(), plain.Server)
	if err != nil {
		return nil, err
	}
	fromModel := map[string]configs.Setting{}
	for _, s := range completion.Settings {
		fromModel[s.Key] = s
	}
	ks := keys(reflect.ValueOf(defaults).Elem(), "")

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Configuration\n\n")
	w("<!-- Generated by `go generate ./cmd/gateway` (cmd/gateway/configdoc_test.go) from the flags\n")
	w("(cmd/gateway/flags.go) and the configs package: edit those, not this file. -->\n\n")
	w("- [How a setting is chosen](#how-a-setting-is-chosen)\n- [Command line](#command-line)\n- [Environment](#environment)\n")
	w("- [The defaults](#the-defaults)\n- [Keys](#keys)\n- [What a model file tells](#what-a-model-file-tells)\n- [In a container](#in-a-container)\n\n")

	w("## How a setting is chosen\n\n")
	w("Each setting is the first of:\n\n")
	w("1. a flag (`-listen`, `-admin-listen`, `-grpc-listen`, `-log-level`, `-log-format`; `-model`, `-labels`, `-name`);\n")
	w("2. an environment variable (`$%s`, `$%s`);\n", listenEnv, grpcListenEnv)
	w("3. the YAML file (`-config`);\n")
	w("4. for the keys a model file tells (its input, output, preprocessing and labels), the model file;\n")
	w("5. the default.\n\n")
	w("`bin/gateway -print-config` prints the result as YAML that can be used as a configuration.\n")
	w("`bin/gateway -model path/to/model.onnx` serves a model with no YAML at all.\n\n")
	w("The YAML is parsed strictly: an unknown key is an error naming it, and every value is\n")
	w("validated with a message naming the key. Zero values mean the default; a key whose zero\n")
	w("means nothing (a timeout, a size, a count) set to an explicit `0` is an error rather than\n")
	w("silently the default. Relative paths are read from the configuration file's folder (from\n")
	w("the working folder for `-model` and `-labels`). The configuration, label and token files\n")
	w("must be regular files of at most %s, %s and %s. Why the defaults are what they are:\n", size(configs.MaxConfigBytes), size(configs.MaxLabelBytes), size(configs.MaxTokenBytes))
	w("[defaults.md](defaults.md).\n\n")

	w("## Command line\n\n| flag | default | meaning |\n|---|---|---|\n")
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	newOptions(fs)
	type row struct{ names, def, usage string }
	var rows []row
	fs.VisitAll(func(f *flag.Flag) {
		for i := range rows { // KServe's flags have a kebab-case alias
			if rows[i].usage == f.Usage && rows[i].def == f.DefValue {
				rows[i].names += ", `-" + f.Name + "`"
				return
			}
		}
		rows = append(rows, row{"`-" + f.Name + "`", f.DefValue, f.Usage})
	})
	for _, r := range rows {
		def := r.def
		if def != "" {
			def = "`" + def + "`"
		}
		w("| %s | %s | %s |\n", r.names, def, strings.ReplaceAll(r.usage, "|", `\|`))
	}

	w("\n## Environment\n\n| variable | meaning |\n|---|---|\n")
	for _, e := range environment() {
		w("| `%s` | %s |\n", e.name, e.meaning)
	}

	w("\n## The defaults\n\n")
	w("Every key at its default: with the model's `name` and `path` filled in, this is a valid\n")
	w("configuration that means what a file naming only them means. A `0` or an empty value is\n")
	w("decided when the gateway starts, from the machine or from the model file, as its comment\n")
	w("says; `-print-config` shows what it became.\n\n<!-- defaults -->\n```yaml\n")
	example := configs.Defaults()
	example.Models[0].Name, example.Models[0].Path = "mymodel", "model.onnx"
	block, err := defaultsBlock(example, ks, docs, fromModel)
	if err != nil {
		return nil, err
	}
	w("%s```\n\n", block)

	w("## Keys\n\n| key | default | meaning |\n|---|---|---|\n")
	for _, k := range ks {
		text := meaning(k.doc(docs))
		switch {
		case k.section:
			w("| `%s` | | %s |\n", k.path, text)
		case k.path == "models[].name" || k.path == "models[].path":
			w("| `%s` | (required) | %s |\n", k.path, text)
		case k.zero() && whenEmpty(k, docs, fromModel) != "" && zeroMeaning(docs[k.goType+"."+k.goName]) == "":
			w("| `%s` | `%s`: %s | %s |\n", k.path, yamlValue(k.value), whenEmpty(k, docs, fromModel), text)
		default:
			w("| `%s` | `%s` | %s |\n", k.path, yamlValue(k.value), text)
		}
	}

	w("\n## What a model file tells\n\n")
	w("What the YAML leaves empty under a model is taken from the model file, read with ONNX\n")
	w("Runtime: its input (name, element type, layout from where its 3 channels sit, width and\n")
	w("height), its output (name and class count), a batch axis fixed at 1, label files beside\n")
	w("it, and its `metadata_props`. The gateway logs one line per model saying where each\n")
	w("setting came from (`msg=\"model settings\"`: `from_yaml`, `from_model`, `from_metadata`,\n")
	w("`from_file`, `defaults`), and `GET /v2/models/{model}/config` shows the same as its\n")
	w("`parameters`. What cannot be inferred (two inputs, a dynamic size the metadata does not\n")
	w("give, an output that is not `[batch, classes]`) stops the start with an error naming the\n")
	w("key to set.\n\n")
	w("A model that tells only its inputs and outputs, an input `input` float32 `[batch, 3, 224, 224]`\n")
	w("and an output `output` float32 `[batch, 1000]`, with no label file and no metadata, is served\n")
	w("with:\n\n| key | value | from |\n|---|---|---|\n")
	for _, s := range completion.Settings {
		w("| `%s` | `%s` | %s |\n", s.Key, s.Value, s.Source)
	}
	w("\nThe `metadata_props` keys read (names compared ignoring case; the first present wins):\n\n")
	w("| keys | fills | value |\n|---|---|---|\n")
	for _, m := range configs.MetadataKeys() {
		names := make([]string, len(m.Keys))
		for i, k := range m.Keys {
			names[i] = "`" + k + "`"
		}
		w("| %s | `%s` | %s |\n", strings.Join(names, ", "), strings.ReplaceAll(m.Sets, ", ", "`, `"), m.Reads)
	}

	w("\n## In a container\n\n")
	w("The image sets `%s=0.0.0.0:8080` and `%s=0.0.0.0:8001`, so the gateway\n", listenEnv, grpcListenEnv)
	w("listens on every interface whatever configuration it is given, HTTP on 8080 and gRPC on 8001;\n")
	w("`-listen` and `-grpc-listen` still override them (a flag wins over the variable, the variable\n")
	w("over `server.listen` and `server.grpc_listen`). To serve a model of your own:\n\n")
	w("```sh\ndocker run --rm -p 8080:8080 -p 8001:8001 -v $PWD/models:/models ghcr.io/imagegate/imagegate:VERSION -model /models/x.onnx\n")
	w("docker run --rm -p 8080:8080 -v $PWD/my.yaml:/etc/imagegate.yaml ghcr.io/imagegate/imagegate:VERSION -config /etc/imagegate.yaml\n```\n")
	return []byte(b.String()), nil
}

func size(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// defaultsBlock is the defaults as YAML, each key whose default is decided at start-up
// commented with what it becomes.
func defaultsBlock(defaults *configs.Config, ks []key, docs map[string]string, fromModel map[string]configs.Setting) (string, error) {
	var doc yaml.Node
	if err := doc.Encode(defaults); err != nil {
		return "", err
	}
	comments := map[string]string{}
	for _, k := range ks {
		if !k.section && k.zero() {
			if c := whenEmpty(k, docs, fromModel); c != "" {
				comments[k.path] = c
			}
		}
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if c, ok := comments[p]; ok {
					n.Content[i+1].LineComment = c
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			if !slices.ContainsFunc(n.Content, func(c *yaml.Node) bool { return c.Kind != yaml.ScalarNode }) {
				n.Style = yaml.FlowStyle
			}
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		}
	}
	walk(&doc, "")
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", err
	}
	return out.String(), enc.Close()
}
