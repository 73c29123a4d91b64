package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsListEveryFlag holds docs/loadtest.md's flag table to the flags the CLI defines: each
// flag of `loadtest` and of `loadtest sweep` has a row marked for that command, and each row
// names a flag the command has.
func TestDocsListEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/loadtest.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `-([a-zA-Z-]+)` \\|\\s*(yes)?\\s*\\|\\s*(yes)?\\s*\\|")
	documented := map[bool]map[string]bool{false: {}, true: {}} // by sweep
	for line := range strings.Lines(string(doc)) {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		documented[false][m[1]] = m[2] == "yes"
		documented[true][m[1]] = m[3] == "yes"
	}
	if len(documented[false]) < 10 {
		t.Fatalf("docs/loadtest.md: found %d rows in the flag table; is its format still `| `-flag` | yes | yes | ... |`?", len(documented[false]))
	}
	for _, sweep := range []bool{false, true} {
		cmd := map[bool]string{false: "loadtest", true: "loadtest sweep"}[sweep]
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		new(options).register(fs, sweep)
		defined := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) {
			defined[f.Name] = true
			if !documented[sweep][f.Name] {
				t.Errorf("%s -%s is not in docs/loadtest.md's flag table (or not marked yes for it)", cmd, f.Name)
			}
		})
		for name, yes := range documented[sweep] {
			if yes && !defined[name] {
				t.Errorf("docs/loadtest.md lists -%s for %s, which has no such flag", name, cmd)
			}
		}
	}
}
