// Package ociimage builds the gateway's container image without a container engine: one
// layer holding the runtime file set that scripts/rootfs.sh assembles (the Dockerfile's
// runtime stage is nothing but that COPY), and the runtime stage's configuration (USER,
// WORKDIR, ENV, EXPOSE, LABEL, HEALTHCHECK, ENTRYPOINT, CMD) read from the Dockerfile with
// BuildKit's parser. It writes an archive in the layout `docker save` writes since Docker 25: an
// OCI image layout (oci-layout, index.json, blobs/sha256/) with Docker's manifest.json beside
// it, which `docker load`, `podman load`, `ctr image import` and `skopeo copy oci-archive:` all
// read. The archive is reproducible: files in name order, owned by root, timestamps at a fixed
// time.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// Stage is what the Dockerfile's last stage sets.
type Stage struct {
	User, WorkDir        string
	Env                  []string // KEY=value
	Entrypoint, Cmd      []string
	ExposedPorts         []string // 8080/tcp
	Labels               map[string]string
	Healthcheck          *v1.HealthConfig
	From                 string // the stage's base: scratch
	CopiesRootfsOnly     bool   // its only file-adding command copies /rootfs/ to /
	StageName, BuildName string
}

// ParseStage reads the Dockerfile's last stage. args are the build arguments (VERSION) its
// labels use.
func ParseStage(dockerfile io.Reader, args map[string]string) (Stage, error) {
	res, err := parser.Parse(dockerfile)
	if err != nil {
		return Stage{}, err
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return Stage{}, err
	}
	if len(stages) == 0 {
		return Stage{}, fmt.Errorf("the Dockerfile has no stage")
	}
	last := stages[len(stages)-1]
	st := Stage{From: last.BaseName, StageName: last.Name, Labels: map[string]string{}, CopiesRootfsOnly: true}
	if len(stages) > 1 {
		st.BuildName = stages[len(stages)-2].Name
	}
	lex := shell.NewLex('\\')
	env := func() shell.EnvGetter {
		kv := []string{}
		for k, v := range args {
			kv = append(kv, k+"="+v)
		}
		return shell.EnvsFromSlice(append(kv, st.Env...))
	}
	expand := func(s string) (string, error) {
		r, err := lex.ProcessWordWithMatches(s, env())
		return r.Result, err
	}
	copies := 0
	for _, c := range last.Commands {
		switch x := c.(type) {
		case *instructions.CopyCommand:
			copies++
			if x.From != st.BuildName || !slices.Equal(x.SourcePaths, []string{"/rootfs/"}) || x.DestPath != "/" {
				st.CopiesRootfsOnly = false
			}
		case *instructions.UserCommand:
			st.User = x.User
		case *instructions.WorkdirCommand:
			st.WorkDir = x.Path
		case *instructions.EnvCommand:
			for _, kv := range x.Env {
				v, err := expand(kv.Value)
				if err != nil {
					return Stage{}, err
				}
				st.Env = append(st.Env, kv.Key+"="+v)
			}
		case *instructions.LabelCommand:
			for _, kv := range x.Labels {
				v, err := expand(kv.Value)
				if err != nil {
					return Stage{}, err
				}
				st.Labels[kv.Key] = v
			}
		case *instructions.ExposeCommand:
			for _, p := range x.Ports {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				st.ExposedPorts = append(st.ExposedPorts, p)
			}
		case *instructions.HealthCheckCommand:
			h := x.Health
			st.Healthcheck = &v1.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
		case *instructions.EntrypointCommand:
			if x.PrependShell {
				return Stage{}, fmt.Errorf("ENTRYPOINT in shell form: the image has no shell")
			}
			st.Entrypoint = x.CmdLine
		case *instructions.CmdCommand:
			if x.PrependShell {
				return Stage{}, fmt.Errorf("CMD in shell form: the image has no shell")
			}
			st.Cmd = x.CmdLine
		case *instructions.ArgCommand:
		default:
			st.CopiesRootfsOnly = false
		}
	}
	if copies != 1 {
		st.CopiesRootfsOnly = false
	}
	return st, nil
}

// Epoch is the time every file of the layer and the image's creation carry, so that the same
// file set makes the same image (SOURCE_DATE_EPOCH's convention: a fixed instant).
var Epoch = time.Unix(0, 0).UTC()

// Layer is the file set under root as one layer: entries in name order, owned by root (as
// COPY without --chown gives them), with their modes, at Epoch; symbolic links kept as links.
func Layer(root string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = Epoch, time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Image is the file set under root with the stage's configuration, for the platform arch
// (amd64, arm64; "" is this machine's).
func Image(root string, st Stage, arch string) (v1.Image, error) {
	if arch == "" {
		arch = runtime.GOARCH
	}
	layer, err := Layer(root)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: Epoch},
		CreatedBy: "COPY --from=" + st.BuildName + " /rootfs/ / (scripts/rootfs.sh)"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: Epoch}
	ports := map[string]struct{}{}
	for _, p := range st.ExposedPorts {
		ports[p] = struct{}{}
	}
	cf.Config = v1.Config{User: st.User, WorkingDir: st.WorkDir, Env: st.Env, Entrypoint: st.Entrypoint, Cmd: st.Cmd,
		ExposedPorts: ports, Labels: st.Labels, Healthcheck: st.Healthcheck}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img, tagged ref (ghcr.io/imagegate/imagegate:v1.2.3), as an OCI image
// layout with Docker's manifest.json beside it, in one tar.
func WriteArchive(w io.Writer, img v1.Image, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mdigest, err := img.Digest()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	file := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: Epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, ModTime: Epoch, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	if err := file(blob(cfgName), cfg); err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: blob(d), Mode: 0o644, Size: size, ModTime: Epoch, Typeflag: tar.TypeReg}); err != nil {
			rc.Close()
			return err
		}
		_, err = io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return err
		}
		layerPaths = append(layerPaths, blob(d))
	}
	if err := file(blob(mdigest), manifest); err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Digest: mdigest, Size: int64(len(manifest)),
		Annotations: map[string]string{"org.opencontainers.image.ref.name": tag.TagStr(), "io.containerd.image.name": tag.Name()},
		Platform:    &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
	}}})
	if err != nil {
		return err
	}
	docker, err := json.Marshal([]map[string]any{{"Config": blob(cfgName), "RepoTags": []string{tag.Name()}, "Layers": layerPaths}})
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index}, {"manifest.json", docker}} {
		if err := file(f.name, f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
