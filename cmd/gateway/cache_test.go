package main_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The model cache across restarts, as a pod meets it: a gateway without the cache, one that
// starts on an empty cache (it writes the entry), one that starts on that entry, and one whose
// cache folder cannot be written answer every shared photo with the same bytes (the same
// scores, computed by this machine), and only the unwritable one warns, once.
func TestModelCacheAcrossRestarts(t *testing.T) {
	ps := payloads(t)
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var want map[string][]byte
	for _, c := range []struct{ name, dir, log string }{
		{"off", "off", ""},
		{"cold", dir, "optimized graph written"},
		{"warm", dir, ""},
		{"unwritable", filepath.Join(file, "cache"), "cannot write"},
	} {
		yaml := strings.Replace(defaultModelYAML(t, "{max_batch_size: 2}"), "inter_op_threads: 1}",
			"inter_op_threads: 1, hardswish_rewrite: on, cache_dir: '"+c.dir+"'}", 1)
		g := startGateway(t, "models:\n"+yaml)
		got := map[string][]byte{}
		for _, p := range ps {
			a := g.do("POST", "/predict/?top_k=11", p.contentType, p.body)
			if a.status != 200 {
				t.Fatalf("%s, %s: %d %s", c.name, p.name, a.status, a.body)
			}
			got[p.name] = a.body
		}
		g.cmd.Process.Signal(os.Interrupt)
		g.exitsCleanly(t)
		log := g.log()
		if n := strings.Count(log, "model cache"); c.log == "" && n != 0 || c.log != "" && (n != 1 || !strings.Contains(log, c.log)) {
			t.Errorf("%s: the log says, of the cache:\n%s", c.name, log)
		}
		if c.name == "unwritable" && !strings.Contains(log, "level=WARN") {
			t.Errorf("%s: no warning:\n%s", c.name, log)
		}
		if want == nil {
			want = got
			continue
		}
		for name, b := range got {
			if !bytes.Equal(b, want[name]) {
				t.Errorf("%s, %s: %s; without the cache %s", c.name, name, b, want[name])
			}
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.ort")); len(m) != 1 {
		t.Errorf("cache entries %v, want one", m)
	}
}
