// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	testImage    = "example.org/ipkeeper:v9.8.7-test"
	testVersion  = "v9.8.7-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testCreated  = 1700000000
)

var repoRoot = filepath.Join("..", "..")

// TestImage runs `make image`, as an operator would, and reads everything
// it wrote back with go-containerregistry: one build serves every subtest
// (it compiles the binaries for amd64 and arm64).
func TestImage(t *testing.T) {
	if raceDetector {
		// It pushes some 130 MB through gzip, which the race detector slows
		// from seconds to minutes; nothing in it runs concurrently.
		t.Skip("not with -race: make test-image runs it")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not in PATH")
	}
	out := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_DIR="+out, "IMAGE="+testImage,
		"VERSION="+testVersion, "REVISION="+testRevision, "SOURCE_DATE_EPOCH="+strconv.Itoa(testCreated))
	cmd.Dir = repoRoot
	// Not a sub-make of `make test`: its jobserver and flags stay out.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, b)
	}
	t.Logf("make image took %s", time.Since(start).Round(100*time.Millisecond))

	binaries := makefileBinaries(t)
	created := time.Unix(testCreated, 0).UTC()
	platforms := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}}
	elfMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

	top, err := layout.ImageIndexFromPath(filepath.Join(out, layoutDirName))
	if err != nil {
		t.Fatalf("reading the OCI layout: %v", err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want one (the image index, so `crane push` needs no --index)", len(topManifest.Manifests))
	}
	entry := topManifest.Manifests[0]
	if got := entry.Annotations[annotationRefName]; got != "v9.8.7-test" {
		t.Errorf("index.json %s = %q, want the tag", annotationRefName, got)
	}
	if got := entry.Annotations[annotationImageName]; got != testImage {
		t.Errorf("index.json %s = %q, want %q", annotationImageName, got, testImage)
	}
	idx, err := top.ImageIndex(entry.Digest)
	if err != nil {
		t.Fatalf("the image index: %v", err)
	}
	idxManifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var gotPlatforms []v1.Platform
	images := map[string]v1.Image{} // by architecture
	for _, d := range idxManifest.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		gotPlatforms = append(gotPlatforms, *d.Platform)
		if images[d.Platform.Architecture], err = idx.Image(d.Digest); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(gotPlatforms, platforms) {
		t.Fatalf("platforms %v, want %v", gotPlatforms, platforms)
	}

	t.Run("config", func(t *testing.T) {
		for arch, img := range images {
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != arch {
				t.Errorf("%s: config platform %s/%s", arch, cf.OS, cf.Architecture)
			}
			uid, _, _ := strings.Cut(cf.Config.User, ":")
			if n, err := strconv.Atoi(uid); err != nil || n == 0 {
				t.Errorf("%s: user %q, want a numeric non-root uid (runAsNonRoot needs a number)", arch, cf.Config.User)
			}
			if cf.Config.User != "65532:65532" {
				t.Errorf("%s: user %q, want the controller's securityContext 65532:65532", arch, cf.Config.User)
			}
			if want := []string{"/usr/bin/ipkeeper-controller"}; !slices.Equal(cf.Config.Entrypoint, want) {
				t.Errorf("%s: entrypoint %q, want %q", arch, cf.Config.Entrypoint, want)
			}
			wantLabels := map[string]string{
				"org.opencontainers.image.source":   "https://github.com/ipkeeper/ipkeeper",
				"org.opencontainers.image.version":  testVersion,
				"org.opencontainers.image.revision": testRevision,
			}
			if !reflect.DeepEqual(cf.Config.Labels, wantLabels) {
				t.Errorf("%s: labels %v, want %v", arch, cf.Config.Labels, wantLabels)
			}
			if !cf.Created.Equal(created) {
				t.Errorf("%s: created %s, want SOURCE_DATE_EPOCH %s", arch, cf.Created.Time, created)
			}
		}
	})

	// The host's agent, unpacked from its layer, for the run subtest.
	var hostAgent []byte
	t.Run("layers", func(t *testing.T) {
		for arch, img := range images {
			files := layerFiles(t, img, created)
			var names []string
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			var want []string
			for _, b := range binaries {
				want = append(want, "usr/bin/"+b)
			}
			sort.Strings(want)
			if !slices.Equal(names, want) {
				t.Errorf("%s: files %q, want exactly %q", arch, names, want)
			}
			for _, n := range names {
				f := files[n]
				if f.hdr.Mode != 0o755 || f.hdr.Uid != 0 || f.hdr.Gid != 0 {
					t.Errorf("%s: %s mode %o owner %d:%d, want 755 root:root", arch, n, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid)
				}
				checkStatic(t, arch+": "+n, f.data, elfMachine[arch])
			}
			if arch == runtime.GOARCH {
				hostAgent = files["usr/bin/ipkeeper-agent"].data
			}
		}
	})

	t.Run("run", func(t *testing.T) {
		if runtime.GOOS != "linux" || images[runtime.GOARCH] == nil {
			t.Skipf("no image for %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		if hostAgent == nil {
			t.Fatal("no ipkeeper-agent in the host's layer")
		}
		agent := filepath.Join(t.TempDir(), "ipkeeper-agent")
		if err := os.WriteFile(agent, hostAgent, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command(agent, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("ipkeeper-agent --help: %v\n%s", err, b)
		}
		if !strings.Contains(string(b), "-cni-bin-dir") {
			t.Errorf("ipkeeper-agent --help does not list -cni-bin-dir:\n%s", b)
		}
		b, err = exec.Command(agent, "--version").Output()
		if err != nil || strings.TrimSpace(string(b)) != testVersion {
			t.Errorf("ipkeeper-agent --version = %q, %v; want %q (the Makefile's ldflags)", b, err, testVersion)
		}
	})

	t.Run("docker-archive", func(t *testing.T) {
		tag, err := name.NewTag(testImage)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range platforms {
			path := filepath.Join(out, dockerArchiveName(p))
			m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{testImage}) {
				t.Errorf("%s: manifest.json %+v, want one image tagged %s", path, m, testImage)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			// Same config and layer blobs as the layout's image (the
			// manifests differ only in media types).
			assertSameImage(t, path, img, images[p.Architecture])
		}
	})

	t.Run("oci-archive", func(t *testing.T) {
		archive := filepath.Join(out, ociArchiveName)
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		tr := tar.NewReader(f)
		seen := map[string]bool{}
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", archive, err)
			}
			if hdr.Typeflag != tar.TypeReg {
				continue
			}
			got, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(out, layoutDirName, hdr.Name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %s differs from the layout's (%v)", archive, hdr.Name, err)
			}
			seen[hdr.Name] = true
		}
		for _, n := range []string{"oci-layout", "index.json", "blobs/sha256/" + entry.Digest.Hex} {
			if !seen[n] {
				t.Errorf("%s has no %s", archive, n)
			}
		}
	})

	t.Run("deterministic", func(t *testing.T) {
		// The same binaries packed again, elsewhere: same digest, same bytes.
		var s spec
		s.binariesDir, s.version, s.revision, s.source = filepath.Join(out, "bin"), testVersion, testRevision, "https://github.com/ipkeeper/ipkeeper"
		if err := s.complete(testImage, strings.Join(binaries, " "), "linux/amd64 linux/arm64", testCreated, t.TempDir()); err != nil {
			t.Fatal(err)
		}
		again := t.TempDir()
		idx2, err := build(s, again)
		if err != nil {
			t.Fatal(err)
		}
		d1, _ := idx.Digest()
		d2, err := idx2.Digest()
		if err != nil || d1 != d2 {
			t.Errorf("second build: index %s (%v), first %s", d2, err, d1)
		}
		for _, n := range []string{ociArchiveName, dockerArchiveName(platforms[0]), dockerArchiveName(platforms[1])} {
			if a, b := fileSum(t, filepath.Join(out, n)), fileSum(t, filepath.Join(again, n)); a != b {
				t.Errorf("%s differs between two builds", n)
			}
		}
	})

	t.Run("push", func(t *testing.T) {
		// What `crane push bin/image/oci REF` does, against an in-memory registry.
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		defer srv.Close()
		ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/ipkeeper:v9.8.7-test")
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(ref, idx); err != nil {
			t.Fatalf("push: %v", err)
		}
		pulled, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pull: %v", err)
		}
		d1, _ := idx.Digest()
		if d2, err := pulled.Digest(); err != nil || d1 != d2 {
			t.Errorf("pulled index %s (%v), pushed %s", d2, err, d1)
		}
	})

	t.Run("dockerfile", func(t *testing.T) {
		// Docker cannot run here, so the Dockerfile is compared with the built
		// image on what it states: base, binaries and where, user,
		// entrypoint, environment, labels, and the same `make build`.
		df := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
		cf, err := images["amd64"].ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if df.from != "scratch" {
			t.Errorf("Dockerfile final stage FROM %q, want scratch like make image", df.from)
		}
		if !df.makeBuild {
			t.Error("Dockerfile does not build with `make build` (the Makefile's flags)")
		}
		sort.Strings(df.copied)
		want := append([]string(nil), binaries...)
		sort.Strings(want)
		if !slices.Equal(df.copied, want) || df.copyDest != "/usr/bin/" {
			t.Errorf("Dockerfile copies %q into %q, want %q into /usr/bin/", df.copied, df.copyDest, want)
		}
		if df.user != cf.Config.User {
			t.Errorf("Dockerfile USER %q, image %q", df.user, cf.Config.User)
		}
		if !slices.Equal(df.entrypoint, cf.Config.Entrypoint) {
			t.Errorf("Dockerfile ENTRYPOINT %q, image %q", df.entrypoint, cf.Config.Entrypoint)
		}
		if !slices.Equal(df.env, cf.Config.Env) {
			t.Errorf("Dockerfile ENV %q, image %q", df.env, cf.Config.Env)
		}
		wantLabels := map[string]string{
			labelSource:   cf.Config.Labels[labelSource],
			labelVersion:  "${VERSION}",
			labelRevision: "${REVISION}",
		}
		if !reflect.DeepEqual(df.labels, wantLabels) {
			t.Errorf("Dockerfile labels %v, want %v", df.labels, wantLabels)
		}
	})
}

// makefileBinaries is the Makefile's BINARIES: what the image must hold.
func makefileBinaries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BINARIES := (.+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no BINARIES := in the Makefile")
	}
	return strings.Fields(string(m[1]))
}

type layerFile struct {
	hdr  *tar.Header
	data []byte
}

// layerFiles reads the image's single layer: its regular files by name.
// Every entry must be sorted, root-owned and stamped with created.
func layerFiles(t *testing.T, img v1.Image, created time.Time) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	files := map[string]layerFile{}
	tr := tar.NewReader(rc)
	prev := ""
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name <= prev {
			t.Errorf("layer entry %s after %s: not sorted", hdr.Name, prev)
		}
		prev = hdr.Name
		if !hdr.ModTime.Equal(created) || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("layer entry %s: time %s owner %d:%d, want %s root:root", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid, created)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = layerFile{hdr: hdr, data: data}
	}
	return files
}

// checkStatic fails unless data is an ELF executable for machine with no
// program interpreter and no dynamic section: nothing to load from the
// (empty) image or from the host the agent copies the plugin onto.
func checkStatic(t *testing.T, what string, data []byte, machine elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not ELF: %v", what, err)
		return
	}
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s: ELF %s %s, want %s executable", what, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has %s: dynamically linked", what, p.Type)
		}
	}
}

func assertSameImage(t *testing.T, what string, got, want v1.Image) {
	t.Helper()
	gc, err := got.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	wc, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if gc != wc {
		t.Errorf("%s: config %s, layout's %s", what, gc, wc)
	}
	gl, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := want.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(gl) != len(wl) {
		t.Fatalf("%s: %d layers, layout's %d", what, len(gl), len(wl))
	}
	for i := range gl {
		// The compressed digests: the same blob, and nothing to decompress.
		gd, err1 := gl[i].Digest()
		wd, err2 := wl[i].Digest()
		if err1 != nil || err2 != nil || gd != wd {
			t.Errorf("%s: layer %d %s, layout's %s (%v, %v)", what, i, gd, wd, err1, err2)
		}
	}
}

func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// dockerfile is what the Dockerfile's final stage states.
type dockerfile struct {
	from       string
	makeBuild  bool // some stage runs `make build`
	copied     []string
	copyDest   string
	user       string
	entrypoint []string
	env        []string
	labels     map[string]string
}

// parseDockerfile reads the few instructions the image is made of; it is
// no general parser: it knows this Dockerfile's forms and fails on others.
func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	cont := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cont+l)
		cont = ""
	}
	var df dockerfile
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			df = dockerfile{makeBuild: df.makeBuild, from: strings.Fields(rest)[0]}
		case "RUN":
			df.makeBuild = df.makeBuild || strings.Contains(rest, "make build")
		case "COPY":
			f := strings.Fields(rest)
			if len(f) < 2 || !strings.HasPrefix(f[0], "--from=") {
				continue
			}
			df.copyDest = f[len(f)-1]
			for _, src := range f[1 : len(f)-1] {
				df.copied = append(df.copied, filepath.Base(src))
			}
		case "USER":
			df.user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &df.entrypoint); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT %s: want the JSON form: %v", rest, err)
			}
		case "ENV":
			df.env = append(df.env, rest)
		case "LABEL":
			df.labels = map[string]string{}
			for _, kv := range regexp.MustCompile(`([\w.-]+)="([^"]*)"`).FindAllStringSubmatch(rest, -1) {
				df.labels[kv[1]] = kv[2]
			}
		}
	}
	return df
}

// TestFlags: bad input is refused naming the flag and the value.
func TestFlags(t *testing.T) {
	tests := []struct {
		name, image, platforms, version string
		want                            string
	}{
		{"no tag", "example.org/ipkeeper", "linux/amd64", "v1", `-image "example.org/ipkeeper"`},
		{"bad name", "Example.org/IPK:v1", "linux/amd64", "v1", `-image "Example.org/IPK:v1"`},
		{"no arch", testImage, "linux", "v1", `-platforms: platform "linux"`},
		{"variant", testImage, "linux/arm/v7", "v1", `-platforms: platform "linux/arm/v7"`},
		{"no platform", testImage, " , ", "v1", "-platforms"},
		{"no version", testImage, "linux/amd64", "", "-version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := spec{binariesDir: "bin", version: tt.version}
			err := s.complete(tt.image, "ipkeeper", tt.platforms, 0, "out")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("complete: %v, want an error containing %s", err, tt.want)
			}
		})
	}
	s := spec{binariesDir: "bin", version: "v1"}
	if err := s.complete(testImage, "ipkeeper", "linux/amd64 linux/arm64", 0, "out"); err != nil {
		t.Fatal(err)
	}
	if len(s.platforms) != 2 || s.platforms[1].Variant != "v8" {
		t.Errorf("platforms %v, want amd64 and arm64/v8", s.platforms)
	}
}
