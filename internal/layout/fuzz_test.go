package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFuzzTargetsRun: every fuzz target of the repository is fuzzed by `make fuzz` (make test
// runs it): its package is in the fuzz recipe's list and its name has a rate in FUZZ_RATES (the
// recipe fails on a target without one, but only at the end of make test), and every rate
// belongs to a target. Targets are looked up by name alone, so names are unique.
func TestFuzzTargetsRun(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	// The Makefile's lines with their continuations joined.
	text := strings.ReplaceAll(string(mk), "\\\n", " ")
	pkgs := regexp.MustCompile(`(?m)^fuzz:\n\t@set -e; for pkg in ([^;]+);`).FindStringSubmatch(text)
	if pkgs == nil {
		t.Fatal("Makefile: no fuzz recipe of the form `fuzz:` then `@set -e; for pkg in ...;`")
	}
	listed := strings.Fields(pkgs[1])
	rates := map[string]bool{}
	rm := regexp.MustCompile(`(?m)^FUZZ_RATES := (.*)$`).FindStringSubmatch(text)
	if rm == nil {
		t.Fatal("Makefile: no FUZZ_RATES := line")
	}
	for _, kv := range strings.Fields(rm[1]) {
		name, rate, ok := strings.Cut(kv, "=")
		if !ok || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(rate) {
			t.Errorf("FUZZ_RATES: %q is not Name=executions-per-second", kv)
		}
		rates[name] = true
	}

	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)
	found := map[string]string{} // target -> its package, as the Makefile names it
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// As TestImportGraph walks: make fuzz runs in this module, not in deploy's or the
			// browser test's.
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules" || isModule(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := "./" + filepath.ToSlash(rel)
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			if other, dup := found[m[1]]; dup {
				t.Errorf("%s is a fuzz target in %s and in %s: FUZZ_RATES looks targets up by name", m[1], other, pkg)
			}
			found[m[1]] = pkg
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no fuzz target found: the walk is wrong")
	}
	for name, pkg := range found {
		if !slices.Contains(listed, pkg) {
			t.Errorf("%s (%s) is never fuzzed: add %s to the Makefile's fuzz recipe", name, pkg, pkg)
		}
		if !rates[name] {
			t.Errorf("%s (%s) has no rate in the Makefile's FUZZ_RATES (its executions per second on 2 cores)", name, pkg)
		}
	}
	for name := range rates {
		if _, ok := found[name]; !ok {
			t.Errorf("FUZZ_RATES names %s, which is no fuzz target", name)
		}
	}
}
