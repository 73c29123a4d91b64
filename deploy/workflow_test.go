package deploy_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
	"go.yaml.in/yaml/v3"
)

// The release workflow (.github/workflows/release.yml): actionlint finds nothing in any
// workflow (with shellcheck on their scripts where it is installed: scripts/setup.sh test
// installs it), and the release does what the README and the Makefile promise: on a version
// tag, the multi-arch image named in the README's docker run lines, pushed with the version in
// its tag; the binaries, ONNX Runtime's library, checksums and an SBOM on the release.

func TestWorkflowsLint(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", ".github", "workflows", "*.yml"))
	if len(files) == 0 {
		t.Fatal("no workflow in .github/workflows")
	}
	opts := &actionlint.LinterOptions{}
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		opts.Shellcheck = sc
	} else {
		t.Log("shellcheck is not installed (scripts/setup.sh test installs it): the workflows' scripts are not checked")
	}
	l, err := actionlint.NewLinter(io.Discard, opts)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := l.LintFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("%s:%d:%d: %s [%s]", e.Filepath, e.Line, e.Column, e.Message, e.Kind)
	}
}

type workflow struct {
	On struct {
		Push struct {
			Tags []string `yaml:"tags"`
		} `yaml:"push"`
	} `yaml:"on"`
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Needs    any `yaml:"needs"`
		Strategy struct {
			Matrix struct {
				Include []map[string]string `yaml:"include"`
			} `yaml:"matrix"`
		} `yaml:"strategy"`
		Container   string            `yaml:"container"`
		Permissions map[string]string `yaml:"permissions"`
		Steps       []struct {
			Uses string         `yaml:"uses"`
			Run  string         `yaml:"run"`
			With map[string]any `yaml:"with"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

func TestReleaseWorkflow(t *testing.T) {
	var w workflow
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join("..", ".github", "workflows", "release.yml"))), &w); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.On.Push.Tags, []string{"v*"}) {
		t.Errorf("the release runs on tags %v, want v*", w.On.Push.Tags)
	}
	image := w.Env["IMAGE"]
	if image == "" || w.Env["PLATFORMS"] != "linux/amd64,linux/arm64" {
		t.Fatalf("env IMAGE %q, PLATFORMS %q", image, w.Env["PLATFORMS"])
	}
	// The image: pushed by buildx for both platforms, tagged with the version.
	img := w.Jobs["image"]
	var push map[string]any
	var tags string
	for _, s := range img.Steps {
		switch {
		case strings.HasPrefix(s.Uses, "docker/build-push-action@"):
			push = s.With
		case strings.HasPrefix(s.Uses, "docker/metadata-action@"):
			tags, _ = s.With["tags"].(string)
		}
	}
	if push == nil || push["push"] != true || push["platforms"] != "${{ env.PLATFORMS }}" || push["sbom"] != true ||
		!strings.Contains(push["build-args"].(string), "VERSION=${{ github.ref_name }}") || !strings.Contains(tags, "type=semver,pattern={{version}}") {
		t.Errorf("the image job does not push both platforms tagged with the version: %v, tags %q", push, tags)
	}
	if img.Permissions["packages"] != "write" {
		t.Error("the image job cannot push to ghcr.io without packages: write")
	}
	// The binaries: both architectures, built natively on Debian 12 as the Dockerfile's build
	// stage is (its base image), packaged with ONNX Runtime's library.
	bin := w.Jobs["binaries"]
	var arches []string
	for _, m := range bin.Strategy.Matrix.Include {
		arches = append(arches, m["arch"])
	}
	dockerfile := readFile(t, filepath.Join("..", "Dockerfile"))
	base := regexp.MustCompile(`(?m)^FROM (\S+) AS build$`).FindStringSubmatch(dockerfile)
	if !slices.Equal(arches, []string{"amd64", "arm64"}) || base == nil || bin.Container != base[1] {
		t.Errorf("binaries: arches %v in %q, want amd64 and arm64 in the Dockerfile's build image %v", arches, bin.Container, base)
	}
	var scripts strings.Builder
	for _, s := range bin.Steps {
		scripts.WriteString(s.Run)
	}
	for _, s := range []string{"scripts/rootfs.sh", "scripts/setup-onnxruntime.sh", "./cmd/loadtest", "libonnxruntime.so*", `imagegate_${VERSION#v}_linux_${ARCH}`, `onnxruntime_${ort_version}_linux_${ARCH}`} {
		if !strings.Contains(scripts.String(), s) {
			t.Errorf("the binaries job does not %s", s)
		}
	}
	// The release: after both, with the checksums and the SBOM of everything attached.
	rel := w.Jobs["release"]
	var release strings.Builder
	sbom := false
	for _, s := range rel.Steps {
		release.WriteString(s.Run)
		if strings.HasPrefix(s.Uses, "anchore/sbom-action@") && s.With["format"] == "spdx-json" {
			sbom = true
		}
	}
	if needs, _ := rel.Needs.([]any); len(needs) != 2 || rel.Permissions["contents"] != "write" || !sbom ||
		!strings.Contains(release.String(), "SHA256SUMS") || !strings.Contains(release.String(), "gh release create \"$TAG\" dist/*.tar.gz dist/*.spdx.json dist/SHA256SUMS") {
		t.Errorf("the release job does not attach binaries, checksums and the SBOM after both jobs:\n%s", release.String())
	}
	// The README's docker run lines and the Makefile name the image the workflow publishes.
	readme := readFile(t, filepath.Join("..", "README.md"))
	runs := 0
	for line := range strings.Lines(readme) {
		words, ok := strings.CutPrefix(line, "docker run ")
		if !ok {
			continue
		}
		runs++
		fields := strings.Fields(words)
		for i := 0; i < len(fields); i++ { // the image is the first word that is not an option
			f := fields[i]
			if slices.Contains([]string{"-p", "-v", "-e", "--publish", "--volume", "--env", "--name"}, f) {
				i++
				continue
			}
			if strings.HasPrefix(f, "-") {
				continue
			}
			if name, _, _ := strings.Cut(f, ":"); name != image {
				t.Errorf("the README runs %s, the release publishes %s", f, image)
			}
			break
		}
	}
	if runs == 0 {
		t.Fatal("the README has no docker run line")
	}
	if !regexp.MustCompile(`(?m)^IMAGE \?= ` + regexp.QuoteMeta(image) + `$`).MatchString(readFile(t, filepath.Join("..", "Makefile"))) {
		t.Errorf("the Makefile's IMAGE is not %s", image)
	}
	if _, err := os.Stat(filepath.Join("..", "scripts", "rootfs.sh")); err != nil {
		t.Fatal(err)
	}
}
