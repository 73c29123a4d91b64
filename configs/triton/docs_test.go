package triton

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/triton.md's tables of what is read, refused and named are the code's: each table's
// first column lists exactly the fields Honoured, Refused and Named return.
func TestDocsTables(t *testing.T) {
	b, err := os.ReadFile("../../docs/triton.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	span := regexp.MustCompile("`([^`]+)`")
	fields := func(heading string) []string {
		_, rest, ok := strings.Cut(doc, "\n## "+heading+"\n")
		if !ok {
			t.Fatalf("docs/triton.md has no section %q", heading)
		}
		rest, _, _ = strings.Cut(rest, "\n## ")
		var out []string
		for line := range strings.Lines(rest) {
			cells := strings.Split(line, "|")
			if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
				continue
			}
			for _, m := range span.FindAllStringSubmatch(cells[1], -1) {
				out = append(out, m[1])
			}
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		heading string
		want    []string
	}{
		{"What is read", Honoured()},
		{"What is refused", Refused()},
		{"What is named", slices.Sorted(maps.Keys(Named()))},
	} {
		if got := fields(c.heading); !slices.Equal(got, c.want) {
			t.Errorf("docs/triton.md, %q lists\n%q\nthe code\n%q", c.heading, got, c.want)
		}
	}
}

// TestRefusedAreRefused: each field Refused lists is refused when it asks what the gateway
// cannot serve, and the error names it.
func TestRefusedAreRefused(t *testing.T) {
	sample := map[string]string{
		"name":                               `name: "x"`,
		"platform":                           `platform: "tensorflow_savedmodel"`,
		"backend":                            `backend: "python"`,
		"max_batch_size":                     `max_batch_size: -1`,
		"input":                              `input [{name: "a"}, {name: "b"}]`,
		"input.data_type":                    `input [{data_type: TYPE_INT64}]`,
		"input.dims":                         `max_batch_size: 1 input [{dims: [3, 224]}]`,
		"sequence_batching":                  `sequence_batching {}`,
		"ensemble_scheduling":                `ensemble_scheduling {}`,
		"model_transaction_policy.decoupled": `model_transaction_policy { decoupled: true }`,
		"batch_input":                        `batch_input [{}]`,
		"batch_output":                       `batch_output [{}]`,
		"dynamic_batching.priority_levels":   `dynamic_batching { priority_levels: 17 }`,
		"parameters":                         `parameters { key: "inter_op_thread_count" value { string_value: "-2" } }`,
	}
	if got := slices.Sorted(maps.Keys(sample)); !slices.Equal(got, Refused()) {
		t.Fatalf("samples for %q, Refused() is %q", got, Refused())
	}
	for field, text := range sample {
		c, err := Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Map(c, "/repo/m", Options{})
		name := strings.Replace(field, "input.", "input[0].", 1)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s (%s): %v", field, text, err)
		}
	}
}
