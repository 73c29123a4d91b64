// Command ociimage writes the gateway's container image as an archive a container engine
// loads (`docker load -i`, `podman load -i`), without a container engine: the runtime file set
// scripts/rootfs.sh assembled, with the Dockerfile's runtime stage's configuration (package
// ociimage). `make image` runs it.
//
//	ociimage -rootfs bin/rootfs -dockerfile Dockerfile -version v1.2.3 -ref ghcr.io/imagegate/imagegate:v1.2.3 -o bin/image.tar
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/imagegate/imagegate/deploy/ociimage"
)

func main() {
	rootfs := flag.String("rootfs", "", "the runtime file set (scripts/rootfs.sh's output)")
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile whose last stage configures the image")
	version := flag.String("version", "", "the VERSION build argument (the image's version label)")
	ref := flag.String("ref", "", "the image's name and tag, e.g. ghcr.io/imagegate/imagegate:v1.2.3")
	arch := flag.String("arch", "", "the platform's architecture (default: this machine's); the file set must be built for it")
	out := flag.String("o", "", "the archive to write")
	flag.Parse()
	if *rootfs == "" || *ref == "" || *out == "" || *version == "" {
		fmt.Fprintln(os.Stderr, "usage: ociimage -rootfs DIR -dockerfile FILE -version V -ref NAME:TAG -o FILE")
		os.Exit(2)
	}
	if err := run(*rootfs, *dockerfile, *version, *ref, *arch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(rootfs, dockerfile, version, ref, arch, out string) error {
	f, err := os.Open(dockerfile)
	if err != nil {
		return err
	}
	st, err := ociimage.ParseStage(f, map[string]string{"VERSION": version})
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", dockerfile, err)
	}
	if st.From != "scratch" || !st.CopiesRootfsOnly {
		return fmt.Errorf("%s: the runtime stage must be FROM scratch with one COPY --from=%s /rootfs/ / (it is what this tool builds)", dockerfile, st.BuildName)
	}
	img, err := ociimage.Image(rootfs, st, arch)
	if err != nil {
		return err
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := ociimage.WriteArchive(bw, img, ref); err != nil {
		w.Close()
		os.Remove(out)
		return err
	}
	if err := bw.Flush(); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	d, _ := img.Digest()
	fmt.Printf("ociimage: %s (%s) written to %s: docker load -i %s, or podman load -i %s\n", ref, d, out, out, out)
	return nil
}
