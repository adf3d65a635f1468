// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is, whichever way it is built. The Dockerfile states the
// same facts and TestDockerfileAgrees holds them together.
const (
	// binDir is where the binaries go: the manifests' commands name
	// /usr/bin/ipkeeper-agent and /usr/bin/ipkeeper-controller, and the agent
	// finds the CNI plugin it installs next to itself.
	binDir = "/usr/bin"
	// user is distroless' "nonroot", the user of the controller's
	// securityContext; the agent's DaemonSet overrides it with root.
	user       = "65532:65532"
	entrypoint = binDir + "/ipkeeper-controller"
	// pathEnv is the PATH BuildKit gives an image built FROM scratch.
	pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	labelSource   = "org.opencontainers.image.source"
	labelVersion  = "org.opencontainers.image.version"
	labelRevision = "org.opencontainers.image.revision"

	// Annotations of the layout's index.json entry, as BuildKit writes them:
	// skopeo's oci: transport and podman read the first, containerd (ctr
	// import, docker load of an OCI archive) the second.
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"
)

// Output names under the output directory.
const (
	layoutDirName  = "oci"
	ociArchiveName = "ipkeeper.oci.tar"
)

// dockerArchiveName is the `docker load` tarball of one platform.
func dockerArchiveName(p v1.Platform) string {
	return fmt.Sprintf("ipkeeper-%s-%s.docker.tar", p.OS, p.Architecture)
}

// platformDir is the subdirectory of the binaries directory holding one
// platform's binaries, e.g. linux_arm64.
func platformDir(p v1.Platform) string { return p.OS + "_" + p.Architecture }

type spec struct {
	// ref names the image in the archives, e.g. ghcr.io/ipkeeper/ipkeeper:v0.1.0.
	ref       name.Tag
	binaries  []string
	platforms []v1.Platform
	// binariesDir holds <os>_<arch>/<binary> for each platform and binary.
	binariesDir string
	version     string
	revision    string
	source      string
	// created is every timestamp in the image, so that the same binaries
	// give the same digest.
	created time.Time
}

// parsePlatforms reads "linux/amd64,linux/arm64" (commas or spaces).
func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		p, err := v1.ParsePlatform(f)
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", f, err)
		}
		if p.OS == "" || p.Architecture == "" || p.Variant != "" {
			return nil, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", f)
		}
		// Registries and runtimes label 64-bit ARM images v8.
		if p.Architecture == "arm64" {
			p.Variant = "v8"
		}
		out = append(out, *p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("platforms %q: none given", s)
	}
	return out, nil
}

// build writes the image for every platform into outDir: an OCI image
// layout (outDir/oci) holding one image index, the same as one OCI archive
// (outDir/ipkeeper.oci.tar), and a docker-archive tarball per platform.
// It returns the index.
func build(s spec, outDir string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var images []v1.Image
	for _, p := range s.platforms {
		img, err := platformImage(s, p)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		images = append(images, img)
		pl := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
	}

	// Start from nothing so no blob of an earlier build lingers.
	layoutDir := filepath.Join(outDir, layoutDirName)
	if err := os.RemoveAll(layoutDir); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", layoutDir, err)
	}
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("writing the OCI layout %s: %w", layoutDir, err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationRefName:   s.ref.TagStr(),
		annotationImageName: s.ref.Name(),
	})); err != nil {
		return nil, fmt.Errorf("writing the OCI layout %s: %w", layoutDir, err)
	}
	if err := writeDirTar(layoutDir, filepath.Join(outDir, ociArchiveName), s.created); err != nil {
		return nil, err
	}
	for i, p := range s.platforms {
		out := filepath.Join(outDir, dockerArchiveName(p))
		if err := tarball.WriteToFile(out, s.ref, images[i]); err != nil {
			return nil, fmt.Errorf("writing %s: %w", out, err)
		}
	}
	return idx, nil
}

// platformImage is one platform's image: a single layer with the binaries
// on an empty base.
func platformImage(s spec, p v1.Platform) (v1.Image, error) {
	layerTar, err := binariesTar(filepath.Join(s.binariesDir, platformDir(p)), s.binaries, s.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: s.created},
			CreatedBy: "hack/image: " + strings.Join(s.binaries, " ") + " in " + binDir,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: s.created}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{entrypoint},
		Env:        []string{pathEnv},
		Labels: map[string]string{
			labelSource:   s.source,
			labelVersion:  s.version,
			labelRevision: s.revision,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// binariesTar is the layer's uncompressed tar: usr/, usr/bin/ and the
// binaries, root-owned, executable, all at the same fixed time.
func binariesTar(dir string, binaries []string, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(binDir, "/")
	for _, d := range []string{path.Dir(rel), rel} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, fmt.Errorf("layer tar: %w", err)
		}
	}
	sorted := append([]string(nil), binaries...)
	sort.Strings(sorted)
	for _, b := range sorted {
		src := filepath.Join(dir, b)
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("binary %s (build it first, e.g. make image): %w", b, err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(rel, b), Mode: 0o755, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer tar: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("layer tar: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

// writeDirTar writes the tree under dir into the tar file out, entries
// sorted and stamped with mtime, so the same tree gives the same bytes.
func writeDirTar(dir, out string, mtime time.Time) (err error) {
	var names []string
	if err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", out, cerr)
		}
	}()
	tw := tar.NewWriter(f)
	for _, p := range names {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, fi.Size()
		default:
			return fmt.Errorf("%s: not a file or directory", p)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p); err != nil {
				return fmt.Errorf("writing %s: %w", out, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(w, f)
	return err
}
