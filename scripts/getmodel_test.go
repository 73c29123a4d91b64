// Package scripts holds the repository's shell scripts; its tests run them.
package scripts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests of scripts/get-model.sh run it offline against the ImageNet MobileNetV2 in
// ../shared/models (the ONNX Model Zoo's mobilenetv2-12-int8 and its labels), as a local folder,
// a file:// URL and an HTTP mirror, since CI has no internet. The pinned checksum must accept
// the shared file, reject a corrupted copy, and a failed run must leave nothing behind.

const int8Name = "mobilenetv2-12-int8"

func sharedModelDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "shared", "models", int8Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, int8Name+".onnx")); err != nil {
		t.Skip("../shared/models (the ImageNet MobileNetV2 the tests use) is not beside the checkout:", err)
	}
	return dir
}

type run struct {
	code           int
	stdout, stderr string
}

// getModel runs scripts/get-model.sh with args and the extra environment.
func getModel(t *testing.T, env []string, args ...string) run {
	t.Helper()
	cmd := exec.Command("./get-model.sh", args...)
	cmd.Env = append(os.Environ(), "IMAGEGATE_MODEL_SOURCE=")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// pinned returns the sha256 the script pins for a model name.
func pinned(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile("get-model.sh")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(src)) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) == 4 && f[0] == name {
			return f[2]
		}
	}
	t.Fatalf("get-model.sh pins no sha256 for %s", name)
	return ""
}

// checkLaidOut checks models/NAME as the gateway reads it: the shared model byte for byte and
// a JSON array of 1000 labels, and that nothing else was left in the models folder.
func checkLaidOut(t *testing.T, modelsDir, shared string) {
	t.Helper()
	dir := filepath.Join(modelsDir, int8Name)
	if got, want := sha256File(t, filepath.Join(dir, "model.onnx")), sha256File(t, filepath.Join(shared, int8Name+".onnx")); got != want {
		t.Errorf("model.onnx: sha256 %s, the shared file's %s", got, want)
	}
	var labels []string
	b, err := os.ReadFile(filepath.Join(dir, "labels.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &labels); err != nil || len(labels) != 1000 || labels[967] != "espresso" {
		t.Errorf("labels.json: %d labels (err %v), want ImageNet's 1000", len(labels), err)
	}
	onlyEntries(t, modelsDir, int8Name)
	onlyEntries(t, dir, "labels.json", "model.onnx")
}

// onlyEntries fails unless dir holds exactly the names given (no temporary files left).
func onlyEntries(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

func TestGetModelPinsTheSharedModel(t *testing.T) {
	shared := sharedModelDir(t)
	if got, want := sha256File(t, filepath.Join(shared, int8Name+".onnx")), pinned(t, int8Name); got != want {
		t.Fatalf("the shared %s has sha256 %s; get-model.sh pins %s", int8Name, got, want)
	}
}

func TestGetModelFromLocalFolder(t *testing.T) {
	shared := sharedModelDir(t)
	models := t.TempDir()
	r := getModel(t, nil, "--from", shared, "--models-dir", models, int8Name)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkLaidOut(t, models, shared)
	if !strings.Contains(r.stdout, "make run MODEL="+int8Name) {
		t.Errorf("the output does not say how to serve it:\n%s", r.stdout)
	}

	// Again: verified in place, nothing fetched, the files untouched.
	st, _ := os.Stat(filepath.Join(models, int8Name, "model.onnx"))
	old := time.Unix(0, 0)
	os.Chtimes(filepath.Join(models, int8Name, "model.onnx"), old, old)
	r = getModel(t, nil, "--from", shared, "--models-dir", models, int8Name)
	if r.code != 0 || strings.Contains(r.stdout, "get-model: fetching ") || strings.Count(r.stdout, "present and verified") != 2 {
		t.Fatalf("second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st2, _ := os.Stat(filepath.Join(models, int8Name, "model.onnx")); !st2.ModTime().Equal(old) || st2.Size() != st.Size() {
		t.Errorf("the second run rewrote model.onnx")
	}
	checkLaidOut(t, models, shared)

	// A damaged model.onnx in place is fetched again; the verified labels stay.
	if err := os.WriteFile(filepath.Join(models, int8Name, "model.onnx"), []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = getModel(t, nil, "--from", shared, "--models-dir", models, int8Name)
	if r.code != 0 || strings.Count(r.stdout, "get-model: fetching ") != 1 || !strings.Contains(r.stdout, "does not match its pinned sha256") {
		t.Fatalf("run over a damaged model.onnx: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkLaidOut(t, models, shared)
}

func TestGetModelFromFileURLInTheEnvironment(t *testing.T) {
	shared := sharedModelDir(t)
	models := t.TempDir()
	r := getModel(t, []string{"IMAGEGATE_MODEL_SOURCE=file://" + shared + "/"}, "--models-dir", models, int8Name)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkLaidOut(t, models, shared)
}

// TestGetModelFromHTTPMirror downloads over HTTP with curl or wget, as from the public home.
func TestGetModelFromHTTPMirror(t *testing.T) {
	shared := sharedModelDir(t)
	if _, err := exec.LookPath("curl"); err != nil {
		if _, err := exec.LookPath("wget"); err != nil {
			t.Skip("neither curl nor wget is installed (scripts/setup.sh installs curl)")
		}
	}
	var mu sync.Mutex
	var requests []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.Path)
		mu.Unlock()
		http.FileServer(http.Dir(shared)).ServeHTTP(w, r)
	}))
	defer srv.Close()
	models := t.TempDir()
	r := getModel(t, nil, "--from", srv.URL+"/", "--models-dir", models, int8Name)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkLaidOut(t, models, shared)
	mu.Lock()
	if want := "/" + int8Name + ".onnx,/imagenet-simple-labels.json"; strings.Join(requests, ",") != want {
		t.Errorf("requests %q, want %q", requests, want)
	}
	mu.Unlock()

	// A mirror without the file (404): a clear failure, nothing left.
	models = t.TempDir()
	r = getModel(t, nil, "--from", srv.URL+"/missing/", "--models-dir", models, int8Name)
	if r.code == 0 || !strings.Contains(r.stderr, "cannot fetch "+srv.URL+"/missing/"+int8Name+".onnx") {
		t.Fatalf("a mirror without the file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	onlyEntries(t, models)
}

func TestGetModelRefusesACorruptedCopy(t *testing.T) {
	shared := sharedModelDir(t)
	src := t.TempDir()
	model, err := os.ReadFile(filepath.Join(shared, int8Name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	model[len(model)/2] ^= 1 // one bit
	labels, err := os.ReadFile(filepath.Join(shared, "imagenet-simple-labels.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, int8Name+".onnx"), model, 0o644)
	os.WriteFile(filepath.Join(src, "imagenet-simple-labels.json"), labels, 0o644)
	models := t.TempDir()
	r := getModel(t, nil, "--from", src, "--models-dir", models, int8Name)
	want := "checksum mismatch for " + filepath.Join(src, int8Name+".onnx")
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, pinned(t, int8Name)) || !strings.Contains(r.stderr, "removed") {
		t.Fatalf("a corrupted model: exit %d, want a failure saying %q and the pinned sum\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	onlyEntries(t, models) // no model folder, no partial download

	// Labels that do not match: the model (which does) is not laid out either.
	src2 := t.TempDir()
	os.Symlink(filepath.Join(shared, int8Name+".onnx"), filepath.Join(src2, int8Name+".onnx"))
	os.WriteFile(filepath.Join(src2, "imagenet-simple-labels.json"), append(labels, ' '), 0o644)
	r = getModel(t, nil, "--from", src2, "--models-dir", models, int8Name)
	if r.code == 0 || !strings.Contains(r.stderr, "checksum mismatch for "+filepath.Join(src2, "imagenet-simple-labels.json")) {
		t.Fatalf("labels that do not match: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	onlyEntries(t, models)
}

func TestGetModelNames(t *testing.T) {
	known := []string{"mobilenetv2-12", "mobilenetv2-12-int8", "resnet50-v1-12", "resnet50-v1-12-int8"}
	r := getModel(t, nil, "--list")
	for _, n := range known {
		if r.code != 0 || !strings.Contains(r.stdout, "  "+n+" ") {
			t.Errorf("--list: exit %d, %s missing:\n%s%s", r.code, n, r.stdout, r.stderr)
		}
		if p := pinned(t, n); len(p) != 64 {
			t.Errorf("%s: pinned sha256 %q", n, p)
		}
	}
	models := t.TempDir()
	for _, bad := range []string{"resnet51", "../etc", "mobilenet.*"} {
		r := getModel(t, nil, "--models-dir", models, bad)
		if r.code != 2 || !strings.Contains(r.stderr, `unknown model "`+bad+`"`) {
			t.Errorf("%q: exit %d\n%s", bad, r.code, r.stderr)
		}
		for _, n := range known {
			if !strings.Contains(r.stderr, n) {
				t.Errorf("%q: the known model %s is not listed:\n%s", bad, n, r.stderr)
			}
		}
	}
	onlyEntries(t, models)
	if r := getModel(t, nil); r.code != 2 || !strings.Contains(r.stderr, "usage:") {
		t.Errorf("no name: exit %d\n%s", r.code, r.stderr)
	}
}
