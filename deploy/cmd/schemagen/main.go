// Command schemagen writes the strict, standalone JSON schemas that deploy's tests validate the
// manifests against with kubeconform (deploy/schemas/, see its README.md for the sources):
//
//	go run ./cmd/schemagen -swagger K8S/api/openapi-spec/swagger.json -crd A.yaml -crd B.yaml -out schemas
//
// Kubernetes' own kinds come from the API server's OpenAPI v2 document (swagger.json), custom
// resources from their CustomResourceDefinitions' openAPIV3Schema. Each schema is made
// standalone (every $ref inlined) and strict: an object that lists its properties admits no
// other (additionalProperties: false) unless the API says it keeps unknown fields. Other
// conversions: IntOrString and Quantity accept a number or a string, as the API server does;
// OpenAPI's nullable becomes a "null" type; a custom resource's metadata gets the strict
// ObjectMeta schema; descriptions are dropped. The files are laid out for kubeconform's
// schema location "DIR/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
// (Group is "v1" for the core group), one file per kind and version.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// defaultKinds are the kinds deploy/ uses, as group/version/Kind ("v1/Kind" for the core group).
var defaultKinds = []string{
	"v1/ConfigMap",
	"v1/Namespace",
	"v1/Service",
	"apps/v1/Deployment",
	"policy/v1/PodDisruptionBudget",
	"autoscaling/v2/HorizontalPodAutoscaler",
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PodMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
	"serving.kserve.io/v1alpha1/ServingRuntime",
	"serving.kserve.io/v1alpha1/ClusterServingRuntime",
	"serving.kserve.io/v1beta1/InferenceService",
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	swagger := flag.String("swagger", "", "Kubernetes' api/openapi-spec/swagger.json")
	var crds multi
	flag.Var(&crds, "crd", "a CustomResourceDefinition YAML file (repeatable)")
	out := flag.String("out", "schemas", "output folder")
	kinds := flag.String("kinds", strings.Join(defaultKinds, ","), "comma-separated group/version/Kind list")
	flag.Parse()
	if err := run(*swagger, crds, *out, strings.Split(*kinds, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

type obj = map[string]any

func run(swaggerPath string, crdPaths []string, out string, kinds []string) error {
	data, err := os.ReadFile(swaggerPath)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]obj `json:"definitions"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", swaggerPath, err)
	}
	g := &gen{defs: doc.Definitions}
	want := map[string]bool{}
	for _, k := range kinds {
		want[strings.TrimSpace(k)] = true
	}
	done := map[string]bool{}

	// Kubernetes' own kinds: the definitions tagged with their group, version and kind.
	names := make([]string, 0, len(g.defs))
	for n := range g.defs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		def := g.defs[n]
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, x := range gvks {
			m, _ := x.(obj)
			group, _ := m["group"].(string)
			version, _ := m["version"].(string)
			kind, _ := m["kind"].(string)
			id := gvkID(group, version, kind)
			if !want[id] || done[id] {
				continue
			}
			s, err := g.inlineRef(n, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if err := write(out, group, version, kind, s); err != nil {
				return err
			}
			done[id] = true
		}
	}

	// Custom resources.
	for _, p := range crdPaths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Served bool   `json:"served"`
					Schema struct {
						OpenAPIV3Schema obj `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, v := range crd.Spec.Versions {
			id := gvkID(crd.Spec.Group, v.Name, crd.Spec.Names.Kind)
			if !want[id] || done[id] || !v.Served || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			s, err := g.convertCRD(v.Schema.OpenAPIV3Schema)
			if err != nil {
				return fmt.Errorf("%s %s: %w", p, id, err)
			}
			if err := write(out, crd.Spec.Group, v.Name, crd.Spec.Names.Kind, s); err != nil {
				return err
			}
			done[id] = true
		}
	}
	for _, k := range kinds {
		if !done[strings.TrimSpace(k)] {
			return fmt.Errorf("no schema found for %s", k)
		}
	}
	return nil
}

func gvkID(group, version, kind string) string {
	if group == "" {
		return version + "/" + kind
	}
	return group + "/" + version + "/" + kind
}

func write(out, group, version, kind string, s obj) error {
	apiVersion := version
	if group != "" {
		apiVersion = group + "/" + version
	}
	// The kind's identity, so a schema can never validate another kind.
	if props, ok := s["properties"].(obj); ok {
		props["apiVersion"] = obj{"type": "string", "enum": []any{apiVersion}}
		props["kind"] = obj{"type": "string", "enum": []any{kind}}
	}
	s["required"] = union(s["required"], "apiVersion", "kind")
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	dir := group
	if dir == "" {
		dir = version
	}
	path := filepath.Join(out, dir, strings.ToLower(kind)+"_"+version+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	fmt.Println(path)
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func union(list any, add ...string) []any {
	var r []any
	seen := map[string]bool{}
	l, _ := list.([]any)
	for _, x := range append(l, toAny(add)...) {
		if s, ok := x.(string); ok && !seen[s] {
			seen[s] = true
			r = append(r, s)
		}
	}
	return r
}

func toAny(s []string) []any {
	r := make([]any, len(s))
	for i, x := range s {
		r[i] = x
	}
	return r
}

type gen struct {
	defs map[string]obj
}

const (
	intOrString = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
	quantity    = "io.k8s.apimachinery.pkg.api.resource.Quantity"
	objectMeta  = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
)

// inlineRef returns the standalone strict schema of the named definition.
func (g *gen) inlineRef(name string, stack []string) (obj, error) {
	switch name {
	case intOrString:
		return obj{"anyOf": []any{obj{"type": "integer"}, obj{"type": "string"}}}, nil
	case quantity:
		return obj{"anyOf": []any{obj{"type": "number"}, obj{"type": "string"}}}, nil
	}
	for _, s := range stack {
		if s == name {
			return nil, fmt.Errorf("recursive definition %s (via %s)", name, strings.Join(stack, " > "))
		}
	}
	def, ok := g.defs[name]
	if !ok {
		return nil, fmt.Errorf("no definition %s", name)
	}
	return g.convert(def, append(stack, name))
}

// convert returns a strict copy of a schema node: $refs inlined, descriptions and
// x-kubernetes-* annotations dropped, objects closed unless they keep unknown fields.
func (g *gen) convert(s obj, stack []string) (obj, error) {
	if ref, ok := s["$ref"].(string); ok {
		return g.inlineRef(strings.TrimPrefix(ref, "#/definitions/"), stack)
	}
	r := obj{}
	preserve := s["x-kubernetes-preserve-unknown-fields"] == true
	for k, v := range s {
		switch {
		case k == "description" || k == "example" || k == "externalDocs":
		case strings.HasPrefix(k, "x-"):
		case k == "properties":
			props := obj{}
			for name, p := range v.(obj) {
				c, err := g.convert(p.(obj), stack)
				if err != nil {
					return nil, err
				}
				props[name] = c
			}
			r[k] = props
		case k == "items" || k == "not":
			if m, ok := v.(obj); ok {
				c, err := g.convert(m, stack)
				if err != nil {
					return nil, err
				}
				r[k] = c
			} else {
				r[k] = v
			}
		case k == "additionalProperties":
			if m, ok := v.(obj); ok {
				c, err := g.convert(m, stack)
				if err != nil {
					return nil, err
				}
				r[k] = c
			} else {
				r[k] = v
			}
		case k == "allOf" || k == "anyOf" || k == "oneOf":
			var list []any
			for _, x := range v.([]any) {
				c, err := g.convert(x.(obj), stack)
				if err != nil {
					return nil, err
				}
				list = append(list, c)
			}
			r[k] = list
		case k == "exclusiveMinimum" || k == "exclusiveMaximum":
			// OpenAPI 3.0's boolean form: JSON Schema 2020-12 takes the bound itself.
			if b, ok := v.(bool); ok {
				bound := "minimum"
				if k == "exclusiveMaximum" {
					bound = "maximum"
				}
				if b {
					r[k] = s[bound]
					defer delete(r, bound)
				}
			} else {
				r[k] = v
			}
		case k == "nullable":
		case k == "format" && v == "int-or-string":
		default:
			r[k] = v
		}
	}
	if s["x-kubernetes-int-or-string"] == true || s["format"] == "int-or-string" {
		if _, ok := r["anyOf"]; !ok {
			r["anyOf"] = []any{obj{"type": "integer"}, obj{"type": "string"}}
		}
		delete(r, "type")
	}
	if _, hasProps := r["properties"]; hasProps && !preserve {
		if _, ok := r["additionalProperties"]; !ok {
			r["additionalProperties"] = false
		}
	}
	if s["nullable"] == true {
		if t, ok := r["type"].(string); ok {
			r["type"] = []any{t, "null"}
		}
	}
	return r, nil
}

// convertCRD converts a CustomResourceDefinition version's openAPIV3Schema; its metadata gets
// the strict ObjectMeta schema, as the API server validates it.
func (g *gen) convertCRD(s obj) (obj, error) {
	r, err := g.convert(s, nil)
	if err != nil {
		return nil, err
	}
	props, _ := r["properties"].(obj)
	if props == nil {
		return nil, fmt.Errorf("the schema has no properties")
	}
	meta, err := g.inlineRef(objectMeta, nil)
	if err != nil {
		return nil, err
	}
	props["metadata"] = meta
	return r, nil
}
