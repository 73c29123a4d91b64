package main_test

import (
	"bytes"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's first command, `scripts/setup.sh && make run`, in a copy of the checkout's
// scripts, Makefile, default configuration and model: offline, setup says so and `make run`
// serves the bundled model with a warning that its labels are noise; with the pretrained
// MobileNetV2 fetched (from ../shared, as a mirror), `make run` serves it and a photo of an
// espresso is an espresso. The server `make run` would start is started from the command
// `make -n run` prints, on a free port.

// firstRunBox copies what `scripts/setup.sh && make run` uses into a fresh folder.
func firstRunBox(t *testing.T) string {
	t.Helper()
	root, box := repoRoot(t), t.TempDir()
	for _, f := range []string{"Makefile", "scripts/get-model.sh", "scripts/setup-model.sh", "configs/gateway.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(box, f), string(b))
		os.Chmod(filepath.Join(box, f), 0o755)
	}
	for _, f := range []string{"model.onnx", "labels.txt"} {
		link(t, filepath.Join(root, "models", "mobilenet_v3_small", f), filepath.Join(box, "models", "mobilenet_v3_small", f))
	}
	bin, err := filepath.Abs(gatewayBin(t))
	if err != nil {
		t.Fatal(err)
	}
	link(t, bin, filepath.Join(box, "bin", "gateway"))
	return box
}

// makeRun starts what `make run` runs in box.
func makeRun(t *testing.T, box string) *gateway {
	t.Helper()
	out, err := exec.Command("make", "-C", box, "-n", "run").Output()
	if err != nil {
		t.Fatalf("make -n run: %v", err)
	}
	var line string
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "bin/gateway ") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatalf("make -n run prints no bin/gateway command:\n%s", out)
	}
	return startGatewayIn(t, box, append(strings.Fields(line), "-listen", "127.0.0.1:0", "-admin-listen", "off", "-grpc-listen", "off")...)
}

func TestFirstRunOffline(t *testing.T) {
	ortLib(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make (scripts/setup.sh installs it):", err)
	}
	box := firstRunBox(t)
	setup := exec.Command(filepath.Join(box, "scripts", "setup-model.sh"))
	setup.Env = append(os.Environ(), "IMAGEGATE_MODEL_SOURCE=", "https_proxy=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "no_proxy=", "NO_PROXY=")
	out, err := setup.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OFFLINE") {
		t.Fatalf("setup offline: %v\n%s", err, out)
	}
	g := makeRun(t, box)
	if !strings.Contains(g.log(), `msg="model mobilenet_v3_small: its weights are random`) || !strings.Contains(g.log(), "its labels are noise") ||
		!strings.Contains(g.log(), "level=WARN") {
		t.Errorf("no start-up warning that the labels are noise:\n%s", g.log())
	}
	if a := g.do("POST", "/predict/", "", sharedPhotos(t, "skimage_coffee.png")[0]); a.status != 200 {
		t.Errorf("the bundled model: %d %s", a.status, a.body)
	}
}

func TestFirstRunServesTheFetchedModel(t *testing.T) {
	ortLib(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make (scripts/setup.sh installs it):", err)
	}
	box := firstRunBox(t)
	setup := exec.Command(filepath.Join(box, "scripts", "setup-model.sh"), "--from", filepath.Join(sharedDir(t), "models", "mobilenetv2-12-int8"))
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("setup --from ../shared: %v\n%s", err, out)
	}
	g := makeRun(t, box)
	if strings.Contains(g.log(), "labels are noise") {
		t.Errorf("the pretrained model served with the bundled one's warning:\n%s", g.log())
	}
	img, err := png.Decode(bytes.NewReader(sharedPhotos(t, "skimage_coffee.png")[0]))
	if err != nil {
		t.Fatal(err)
	}
	var jpg bytes.Buffer
	jpeg.Encode(&jpg, img, &jpeg.Options{Quality: 90})
	if p := decodePrediction(t, g.do("POST", "/predict/", "", jpg.Bytes())); p.Prediction != "espresso" {
		t.Errorf("make run's model on a photo of an espresso: %+v", p)
	}
}
