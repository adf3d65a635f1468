// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	sigsyaml "sigs.k8s.io/yaml"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name, version, image string
		wantErr              string
	}{
		{"release", "v0.1.0", "ghcr.io/ipkeeper/ipkeeper", ""},
		{"pre-release", "v1.2.3-rc.1", "registry.example.org:5000/team/ipkeeper", ""},
		{"test version", "v0.0.0-test", "127.0.0.1:5000/ipkeeper", ""},
		{"no v", "0.1.0", "ghcr.io/ipkeeper/ipkeeper", "want a semantic version"},
		{"two parts", "v0.1", "ghcr.io/ipkeeper/ipkeeper", "want a semantic version"},
		{"leading zero", "v0.01.0", "ghcr.io/ipkeeper/ipkeeper", "want a semantic version"},
		{"build metadata", "v0.1.0+abc", "ghcr.io/ipkeeper/ipkeeper", "no build metadata"},
		{"git describe", "5046d80-dirty", "ghcr.io/ipkeeper/ipkeeper", "want a semantic version"},
		{"empty image", "v0.1.0", "", "required"},
		{"tag", "v0.1.0", "ghcr.io/ipkeeper/ipkeeper:v0.1.0", "without tag or digest"},
		{"digest", "v0.1.0", "ghcr.io/ipkeeper/ipkeeper@sha256:" + strings.Repeat("a", 64), "without tag or digest"},
		{"no registry", "v0.1.0", "ipkeeper/ipkeeper", "with its registry"},
		{"upper case", "v0.1.0", "ghcr.io/IPkeeper", "with its registry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := options{version: tt.version, image: tt.image, pluginBaseURL: defaultPluginBaseURL}
			err := o.validate(true)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.repo.Name() != tt.image || o.chartVersion != strings.TrimPrefix(tt.version, "v") {
					t.Errorf("repo %q, chart version %q", o.repo.Name(), o.chartVersion)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
	o := options{version: "v0.1.0", image: "ghcr.io/ipkeeper/ipkeeper", pluginBaseURL: defaultPluginBaseURL}
	if err := o.validate(false); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("without -layout, -out, -kubectl, -bin-dir: %v, want required", err)
	}
	o.layoutDir, o.outDir, o.kubectl, o.binDir, o.created = "oci", "out", "kubectl", "bin", -1
	if err := o.validate(false); err == nil || !strings.Contains(err.Error(), "-created -1") {
		t.Errorf("-created -1: %v, want an error naming it", err)
	}
	o.created, o.pluginBaseURL = 0, "github.com/ipkeeper"
	if err := o.validate(true); err == nil || !strings.Contains(err.Error(), `-plugin-base-url "github.com/ipkeeper"`) {
		t.Errorf("a base URL without scheme: %v, want an error naming it", err)
	}
}

const pinnedRef = "registry.example.org/ipkeeper@sha256:0123456789012345678901234567890123456789012345678901234567890123"

func TestPinValues(t *testing.T) {
	pinned, err := name.NewDigest(pinnedRef)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, in, want, wantErr string }{
		{
			name: "plain values, comments and blank lines kept",
			in:   "# The image.\nimage:\n  # where\n  repository: ghcr.io/ipkeeper/ipkeeper  # the registry\n  tag: \"\"\n\n  digest: \"\" # by digest\n\nreplicas: 2\n",
			want: "# The image.\nimage:\n  # where\n  repository: registry.example.org/ipkeeper  # the registry\n  tag: \"\"\n\n  digest: \"sha256:0123456789012345678901234567890123456789012345678901234567890123\" # by digest\n\nreplicas: 2\n",
		},
		{
			name: "digest added",
			in:   "image:\n    repository: 'ghcr.io/ipkeeper/ipkeeper'\n    pullPolicy: IfNotPresent\n",
			want: "image:\n    repository: \"registry.example.org/ipkeeper\"\n    digest: sha256:0123456789012345678901234567890123456789012345678901234567890123\n    pullPolicy: IfNotPresent\n",
		},
		{name: "no image", in: "replicas: 2\n", wantErr: "no image mapping"},
		{name: "image a string", in: "image: ghcr.io/ipkeeper/ipkeeper\n", wantErr: "no image mapping"},
		{name: "no repository", in: "image:\n  digest: \"\"\n", wantErr: "no image.repository"},
		{name: "multi-line repository", in: "image:\n  repository: >-\n    ghcr.io/ipkeeper/ipkeeper\n", wantErr: "image.repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pinValues([]byte(tt.in), pinned)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestCheckPinned(t *testing.T) {
	pinned, err := name.NewDigest(pinnedRef)
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(images ...string) string {
		s := "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
		for _, img := range images {
			s += "        - name: c\n          image: " + img + "\n"
		}
		return s
	}
	tests := []struct{ name, yaml, wantErr string }{
		{"pinned", deploy(pinnedRef) + "---\napiVersion: v1\nkind: Pod\nspec:\n  initContainers:\n    - image: " + pinnedRef + "\n  containers:\n    - image: " + pinnedRef + "\n", ""},
		{"a tag", deploy(pinnedRef) + "---\n" + deploy("ghcr.io/ipkeeper/ipkeeper:v0.1.0"), "ghcr.io/ipkeeper/ipkeeper:v0.1.0"},
		{"an init container", "kind: DaemonSet\nspec:\n  template:\n    spec:\n      initContainers:\n        - image: busybox\n      containers:\n        - image: " + pinnedRef + "\n", "busybox"},
		{"no image", "kind: ConfigMap\ndata:\n  image: x\n", "no container image"},
		{"a container without image", deploy(""), `container image ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPinned([]byte(tt.yaml), pinned)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestWriteSums(t *testing.T) {
	dir := t.TempDir()
	for n, content := range map[string]string{"install.yaml": "a\n", "ipkeeper-0.1.0.tgz": "", "other": "not an asset"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeSums(dir, []string{"ipkeeper-0.1.0.tgz", "install.yaml"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		t.Fatal(err)
	}
	// sha256sum's own output for these contents.
	want := "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7  install.yaml\n" +
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  ipkeeper-0.1.0.tgz\n"
	if string(got) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s", got, want)
	}
}

func TestCheckManifestsTag(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "base"), 0o755); err != nil {
		t.Fatal(err)
	}
	k := "images:\n  - name: ipkeeper\n    newName: ghcr.io/ipkeeper/ipkeeper\n    newTag: v0.1.0\n"
	if err := os.WriteFile(filepath.Join(dir, "base", "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ version, wantErr, wantNote string }{
		{"v0.1.0", "", ""},
		{"v0.2.0", "names ghcr.io/ipkeeper/ipkeeper:v0.1.0, not v0.2.0", ""},
		{"v0.2.0-rc.1", "", "note:"},
	}
	for _, tt := range tests {
		var note strings.Builder
		err := checkManifestsTag(dir, tt.version, &note)
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: got %v, want error %q", tt.version, err, tt.wantErr)
		}
		if !strings.Contains(note.String(), tt.wantNote) || (tt.wantNote == "" && note.Len() > 0) {
			t.Errorf("%s: said %q, want %q", tt.version, note.String(), tt.wantNote)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "base", "kustomization.yaml"), []byte("resources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkManifestsTag(dir, "v0.1.0", io.Discard); err == nil || !strings.Contains(err.Error(), "names no tag") {
		t.Errorf("without images: %v", err)
	}
}

func TestKustomizations(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"overlays/a", "overlays/b", "overlays/not-a-kustomization", "components/c"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"kustomization.yaml", "overlays/a/kustomization.yaml", "overlays/b/kustomization.yaml", "components/c/kustomization.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := kustomizations(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range ks {
		rel, _ := filepath.Rel(dir, k.dir)
		got = append(got, rel+"="+k.asset)
	}
	want := ".=install.yaml overlays/a=install-a.yaml overlays/b=install-b.yaml"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

// testLayout writes an OCI layout like hack/image's: one index, tagged
// tag, of one image labelled with version.
func testLayout(t *testing.T, tag, version string) (string, v1.ImageIndex) {
	t.Helper()
	img, err := mutate.Config(empty.Image, v1.Config{Labels: map[string]string{versionLabel: version}})
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		t.Fatal(err)
	}
	return dir, idx
}

func TestLoadIndexChecksTheVersion(t *testing.T) {
	dir, idx := testLayout(t, "v0.1.0", "v0.1.0")
	got, err := loadIndex(dir, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("loaded index %s, want %s", d, want)
	}
	if _, err := loadIndex(dir, "v0.2.0"); err == nil || !strings.Contains(err.Error(), `built as tag "v0.1.0", not v0.2.0`) {
		t.Errorf("another version: %v", err)
	}
	dir, _ = testLayout(t, "v0.2.0", "v0.1.0")
	if _, err := loadIndex(dir, "v0.2.0"); err == nil || !strings.Contains(err.Error(), `org.opencontainers.image.version="v0.1.0", not v0.2.0`) {
		t.Errorf("an image labelled with another version: %v", err)
	}
	if _, err := loadIndex(t.TempDir(), "v0.1.0"); err == nil || !strings.Contains(err.Error(), "run make image first") {
		t.Errorf("no layout: %v", err)
	}
}

func TestPushServesTheDigest(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := testLayout(t, "v0.1.0", "v0.1.0")
	idx, err := loadIndex(dir, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	o := options{version: "v0.1.0", image: u.Host + "/ipkeeper", pluginBaseURL: defaultPluginBaseURL}
	if err := o.validate(true); err != nil {
		t.Fatal(err)
	}
	pinned := o.repo.Digest(d.String())
	if err := push(context.Background(), idx, o.repo.Tag(o.version), pinned); err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(o.repo.Tag("v0.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if gd, _ := got.Digest(); gd != d {
		t.Errorf("the registry serves the tag as %s, want %s", gd, d)
	}
}

// testPluginOptions writes a kubectl-ipkeeper for each platform into a
// bin dir laid out as `make image` builds it, and a LICENSE.
func testPluginOptions(t *testing.T, platforms ...string) pluginOptions {
	t.Helper()
	dir := t.TempDir()
	o := pluginOptions{
		version: "v0.1.0", binDir: filepath.Join(dir, "bin"), license: filepath.Join(dir, "LICENSE"),
		baseURL: "https://example.org/dl", mtime: time.Unix(1700000000, 0).UTC(), outDir: filepath.Join(dir, "out"),
	}
	testWrite(t, o.license, "the license\n")
	for _, p := range platforms {
		testWrite(t, filepath.Join(o.binDir, p, pluginBin), "binary for "+p)
	}
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return o
}

func testWrite(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

var testPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

func TestPluginArchives(t *testing.T) {
	o := testPluginOptions(t, "linux_amd64", "linux_arm64")
	assets, err := writePlugin(o, testPlatforms)
	if err != nil {
		t.Fatal(err)
	}
	want := "kubectl-ipkeeper_linux_amd64.tar.gz kubectl-ipkeeper_linux_arm64.tar.gz ipkeeper.yaml"
	if strings.Join(assets, " ") != want {
		t.Errorf("assets %v, want %s", assets, want)
	}
	for _, p := range []string{"linux_amd64", "linux_arm64"} {
		got := readArchive(t, filepath.Join(o.outDir, "kubectl-ipkeeper_"+p+".tar.gz"))
		want := []string{
			"LICENSE 644 0:0 the license\n",
			"kubectl-ipkeeper 755 0:0 binary for " + p,
		}
		if !slices.Equal(got.entries, want) {
			t.Errorf("%s holds %q, want %q", p, got.entries, want)
		}
		for _, mt := range got.mtimes {
			if !mt.Equal(o.mtime) {
				t.Errorf("%s: an entry's time is %s, want %s", p, mt, o.mtime)
			}
		}
	}

	// The same inputs, elsewhere: the same bytes.
	o2 := testPluginOptions(t, "linux_amd64", "linux_arm64")
	if _, err := writePlugin(o2, testPlatforms); err != nil {
		t.Fatal(err)
	}
	for _, a := range assets {
		first, second := readFile(t, filepath.Join(o.outDir, a)), readFile(t, filepath.Join(o2.outDir, a))
		if !bytes.Equal(first, second) {
			t.Errorf("%s differs between two builds of the same files", a)
		}
	}
}

// archiveContents is each entry of a .tar.gz as "name mode uid:gid
// content", in order, and its times.
type archiveContents struct {
	entries []string
	mtimes  []time.Time
}

func readArchive(t *testing.T, file string) archiveContents {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(readFile(t, file)))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var c archiveContents
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return c
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if h.Typeflag != tar.TypeReg || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: entry %s has type %c, owner %q:%q; want a file without owner names", file, h.Name, h.Typeflag, h.Uname, h.Gname)
		}
		c.entries = append(c.entries, fmt.Sprintf("%s %o %d:%d %s", h.Name, h.Mode, h.Uid, h.Gid, data))
		c.mtimes = append(c.mtimes, h.ModTime)
	}
}

func readFile(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testKrewPlugin mirrors krew's own manifest type (pkg/index: JSON field
// names, read by sigs.k8s.io/yaml), so that a field krew does not know
// fails UnmarshalStrict.
type testKrewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Homepage         string `json:"homepage"`
		Platforms        []struct {
			URI      string `json:"uri"`
			Sha256   string `json:"sha256"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func TestPluginManifest(t *testing.T) {
	o := testPluginOptions(t, "linux_amd64", "linux_arm64")
	o.baseURL = "https://downloads.example.org/ipkeeper/"
	if _, err := writePlugin(o, testPlatforms); err != nil {
		t.Fatal(err)
	}
	var m testKrewPlugin
	if err := sigsyaml.UnmarshalStrict(readFile(t, filepath.Join(o.outDir, "ipkeeper.yaml")), &m); err != nil {
		t.Fatalf("ipkeeper.yaml: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "ipkeeper" {
		t.Errorf("ipkeeper.yaml is %s %s %s; want krew's Plugin ipkeeper", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != o.version || m.Spec.Homepage != "https://github.com/ipkeeper/ipkeeper" || m.Spec.ShortDescription == "" || m.Spec.Description == "" {
		t.Errorf("ipkeeper.yaml's spec: version %q, homepage %q, shortDescription %q, description %q", m.Spec.Version, m.Spec.Homepage, m.Spec.ShortDescription, m.Spec.Description)
	}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"]
		if seen[platform] || len(p.Selector.MatchLabels) != 2 {
			t.Errorf("platform %s: named twice, or selector %v is not os and arch", platform, p.Selector.MatchLabels)
		}
		seen[platform] = true
		archive := "kubectl-ipkeeper_" + platform + ".tar.gz"
		if want := "https://downloads.example.org/ipkeeper/v0.1.0/" + archive; p.URI != want {
			t.Errorf("platform %s: uri %s, want %s", platform, p.URI, want)
		}
		if sum := sha256.Sum256(readFile(t, filepath.Join(o.outDir, archive))); p.Sha256 != hex.EncodeToString(sum[:]) {
			t.Errorf("platform %s: sha256 %s, the archive's is %x", platform, p.Sha256, sum)
		}
		if p.Bin != "kubectl-ipkeeper" {
			t.Errorf("platform %s: bin %q", platform, p.Bin)
		}
	}
	if len(seen) != 2 || !seen["linux_amd64"] || !seen["linux_arm64"] {
		t.Errorf("ipkeeper.yaml names the platforms %v; want linux_amd64 and linux_arm64", seen)
	}
}

func TestPluginMissingBinary(t *testing.T) {
	o := testPluginOptions(t, "linux_amd64")
	_, err := writePlugin(o, testPlatforms)
	wantPath := filepath.Join(o.binDir, "linux_arm64", "kubectl-ipkeeper")
	if err == nil || !strings.Contains(err.Error(), "linux/arm64") || !strings.Contains(err.Error(), wantPath) {
		t.Errorf("without the arm64 binary: %v; want an error naming linux/arm64 and %s", err, wantPath)
	}
	o.license = filepath.Join(t.TempDir(), "LICENSE")
	if _, err := writePlugin(o, testPlatforms[:1]); err == nil || !strings.Contains(err.Error(), o.license) {
		t.Errorf("without the license: %v; want an error naming %s", err, o.license)
	}
}

func TestImagePlatforms(t *testing.T) {
	_, idx := testLayout(t, "v0.1.0", "v0.1.0")
	got, err := imagePlatforms(idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || pluginArchiveName(got[0]) != "kubectl-ipkeeper_linux_amd64.tar.gz" {
		t.Errorf("platforms %v, want linux/amd64", got)
	}
	img, _ := mutate.Config(empty.Image, v1.Config{})
	variant := mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}}})
	if _, err := imagePlatforms(variant); err == nil || !strings.Contains(err.Error(), "without variant") {
		t.Errorf("an arm/v7 image: %v", err)
	}
}

func TestCheckBaseURL(t *testing.T) {
	for base, ok := range map[string]bool{
		defaultPluginBaseURL: true, "http://127.0.0.1:8080/dl": true,
		"": false, "github.com/ipkeeper": false, "file:///tmp": false, "https://x.org/dl?a=b": false,
	} {
		if err := checkBaseURL(base); (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", base, err, ok)
		}
	}
}

// The image Artifact Hub lists is pinned with the rest: the annotation's
// entries get the digest, every other line of Chart.yaml is kept.
func TestPinChartImages(t *testing.T) {
	pinned, err := name.NewDigest("registry.example.org/ipkeeper@sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	in := `apiVersion: v2
name: ipkeeper
annotations:
  artifacthub.io/license: Apache-2.0
  # Every image the chart deploys.
  artifacthub.io/images: |
    - name: ipkeeper
      image: ghcr.io/ipkeeper/ipkeeper:v0.1.0

  # The CRDs.
  artifacthub.io/crds: |
    - kind: IPPool
`
	out, err := pinChartImages([]byte(in), pinned)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(in, "      image: ghcr.io/ipkeeper/ipkeeper:v0.1.0", "      image: "+pinned.String(), 1)
	if string(out) != want {
		t.Fatalf("pinned Chart.yaml:\n%s\nwant:\n%s", out, want)
	}
	shown := strings.Replace(want, "apiVersion: v2", "apiVersion: v2\nversion: 0.1.0", 1)
	if err := checkChartImages([]byte(shown), pinned); err != nil {
		t.Errorf("checkChartImages on the pinned chart: %v", err)
	}
	if err := checkChartImages([]byte(in), pinned); err == nil || !strings.Contains(err.Error(), "ghcr.io/ipkeeper/ipkeeper:v0.1.0") {
		t.Errorf("checkChartImages on the unpinned chart: %v, want an error naming the tag", err)
	}
	if _, err := pinChartImages([]byte("annotations:\n  artifacthub.io/images: '- name: x'\n"), pinned); err == nil || !strings.Contains(err.Error(), "literal block") {
		t.Errorf("a quoted annotation: %v, want an error saying it is not a literal block", err)
	}
}
