package deploy_test

import (
	"archive/tar"
	"bytes"
	"cmp"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/imagegate/imagegate/deploy/ociimage"
)

// imageArchive builds make image's archive of the file set at root (deploy/ociimage), checks it
// as the formats' own readers read it (Docker's manifest.json and the OCI image layout name
// the same image, whose configuration is the Dockerfile's runtime stage's and whose one layer is
// the file set, byte for byte), that it is reproducible, and, where podman is installed, that
// podman loads it. It returns the image read back from the OCI layout, and its configuration.
func imageArchive(t *testing.T, root string, stage dockerStage, version string) (v1.Image, *v1.ConfigFile) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ociimage.ParseStage(f, map[string]string{"VERSION": version})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.From != "scratch" || !st.CopiesRootfsOnly {
		t.Fatalf("the runtime stage is not what ociimage builds: %+v", st)
	}
	tag := cmp.Or(version, "test") // $ROOTFS's version is not known here
	build := func() (string, v1.Hash) {
		img, err := ociimage.Image(root, st, "")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "image.tar")
		w, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := ociimage.WriteArchive(w, img, "ghcr.io/imagegate/imagegate:"+tag); err != nil {
			t.Fatal(err)
		}
		w.Close()
		d, _ := img.Digest()
		return p, d
	}
	archive, digest := build()
	if _, again := build(); again != digest {
		t.Errorf("the same file set made two images: %s, %s", digest, again)
	}

	// The OCI image layout.
	dir := t.TempDir()
	a, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	untar(t, a, dir)
	a.Close()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Digest != digest ||
		im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != tag {
		t.Fatalf("index.json: %+v %v", im, err)
	}
	img, err := idx.Image(digest)
	if err != nil {
		t.Fatal(err)
	}
	// Docker's manifest.json names the same configuration and layer.
	docker, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range []v1.Image{img, docker} {
		if err := checkImage(im, root); err != nil {
			t.Fatal(err)
		}
	}
	cn1, _ := img.ConfigName()
	cn2, _ := docker.ConfigName()
	if cn1 != cn2 {
		t.Errorf("manifest.json's configuration %s is not index.json's %s", cn2, cn1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	var exposed []string
	for p := range c.ExposedPorts {
		exposed = append(exposed, strings.TrimSuffix(p, "/tcp"))
	}
	slices.Sort(exposed)
	want := slices.Sorted(slices.Values(stage.expose))
	if c.User != stage.user || c.WorkingDir != stage.workdir || !slices.Equal(c.Entrypoint, stage.entrypoint) || !slices.Equal(c.Cmd, stage.command) ||
		!slices.Equal(c.Env, stage.env) || !slices.Equal(exposed, want) || c.Labels["org.opencontainers.image.version"] != version ||
		c.Healthcheck == nil || cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("the image's configuration %+v is not the runtime stage's %+v", c, stage)
	}
	if podman, err := exec.LookPath("podman"); err == nil {
		store := t.TempDir()
		run, err := os.MkdirTemp("", "pm") // podman wants its runroot's path short
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(run)
		out, err := exec.Command(podman, "--root", filepath.Join(store, "root"), "--runroot", run,
			"--storage-driver", "vfs", "load", "-i", archive).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Loaded image: ghcr.io/imagegate/imagegate:"+tag) {
			t.Errorf("podman load: %v\n%s", err, out)
		}
	} else {
		t.Log("podman is not installed (scripts/setup.sh test installs it): the archive is checked with go-containerregistry's readers only")
	}
	return img, cf
}

// checkImage: the image has one layer, holding exactly the files under root (the same bytes,
// modes and link targets), owned by root.
func checkImage(img v1.Image, root string) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	if len(layers) != 1 {
		return errors.New("the image should have one layer")
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	seen := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		seen[name] = true
		info, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			return err
		}
		if h.Uid != 0 || h.Gid != 0 || fs.FileMode(h.Mode).Perm() != info.Mode().Perm() {
			return errors.New(name + ": owner or mode differs from the file set's")
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if dst, _ := os.Readlink(filepath.Join(root, name)); h.Typeflag != tar.TypeSymlink || h.Linkname != dst {
				return errors.New(name + ": not the file set's link")
			}
		case info.Mode().IsRegular():
			b, _ := io.ReadAll(tr)
			want, err := os.ReadFile(filepath.Join(root, name))
			if err != nil || !bytes.Equal(b, want) {
				return errors.New(name + ": not the file set's bytes")
			}
		}
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(root, p); err == nil && rel != "." && !seen[filepath.ToSlash(rel)] {
			return errors.New(rel + " is missing from the layer")
		}
		return err
	})
}

// untar unpacks a tar stream into dir, as a container engine unpacks a layer: modes and
// symbolic links kept, paths confined to dir.
func untar(t *testing.T, r io.Reader, dir string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("%s leaves the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, fs.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			os.MkdirAll(filepath.Dir(p), 0o755)
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			var w *os.File
			if w, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode).Perm()); err == nil {
				_, err = io.Copy(w, tr)
				w.Close()
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
