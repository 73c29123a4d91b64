package configs

import (
	"path/filepath"
	"testing"
)

// runtime.cache_dir: auto by default, off as written, a folder relative to the config's.
func TestCacheDir(t *testing.T) {
	for yaml, want := range map[string]string{
		"models: [{name: m, path: p}]\n":                                      "auto",
		"models: [{name: m, path: p, runtime: {cache_dir: off}}]\n":           "off",
		"models: [{name: m, path: p, runtime: {cache_dir: cache}}]\n":         filepath.Join("/etc/imagegate", "cache"),
		"models: [{name: m, path: p, runtime: {cache_dir: /var/cache/ig}}]\n": "/var/cache/ig",
	} {
		cfg, err := Parse([]byte(yaml), "/etc/imagegate")
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if got := cfg.Models[0].Runtime.CacheDir; got != want {
			t.Errorf("%q: cache_dir %q, want %q", yaml, got, want)
		}
	}
}
