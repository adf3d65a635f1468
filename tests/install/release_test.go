// SPDX-License-Identifier: Apache-2.0

package install

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

const (
	releaseVersion = "v0.0.0-test"
	// releaseNamespace is where install.yaml and the chart's defaults put
	// ipkeeper.
	releaseNamespace = "ipkeeper-system"
)

// `make release` against a registry on this machine, then what a user
// does with its assets: the registry serves the image install.yaml and the
// chart pin, SHA256SUMS holds, and install.yaml (then the chart) installed
// onto the control plane runs, with its own commands and the binaries
// pulled from the registry, and serves an ADD and a DEL.
func TestReleaseInstalls(t *testing.T) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	repo := u.Host + "/ipkeeper"
	out := t.TempDir()

	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "release",
		"VERSION="+releaseVersion, "IMAGE="+repo, "IMAGE_PLATFORMS=linux/"+runtime.GOARCH, "RELEASE_DIR="+out)
	cmd.Dir = root
	makeOut, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, makeOut)
	}
	t.Logf("make release took %s", time.Since(start).Round(time.Second))

	assets := releaseChecksums(t, out)
	pinned := releasePinnedImage(t, filepath.Join(out, "install.yaml"), repo)
	for _, a := range assets {
		if strings.HasPrefix(a, "install") && strings.HasSuffix(a, ".yaml") {
			if got := releaseImages(t, filepath.Join(out, a)); !allEqual(got, pinned.String()) {
				t.Errorf("%s runs %v; want every container on %s", a, got, pinned)
			}
		}
	}
	for _, want := range []string{"install.yaml", "install-cert-manager.yaml", "install-existing-crds.yaml"} {
		if !slices.Contains(assets, want) {
			t.Errorf("the release has no %s (assets: %v)", want, assets)
		}
	}
	releaseCheckPlugin(t, root, out, assets)
	releaseCheckRegistry(t, pinned)
	chartPkg := fmt.Sprintf("ipkeeper-%s.tgz", strings.TrimPrefix(releaseVersion, "v"))
	_, err = os.Stat(filepath.Join(root, "charts", "ipkeeper", "Chart.yaml"))
	hasChart := err == nil
	switch {
	case hasChart && !slices.Contains(assets, chartPkg):
		t.Fatalf("the release has no %s (assets: %v)", chartPkg, assets)
	case hasChart:
		releaseCheckChart(t, filepath.Join(out, chartPkg), pinned)
	case slices.Contains(assets, chartPkg):
		t.Errorf("the release has a chart package %s but the checkout has no chart", chartPkg)
	case !strings.Contains(string(makeOut), "no Helm chart at"):
		t.Errorf("without a chart, make release did not say so:\n%s", makeOut)
	}

	bins := releasePullBinaries(t, pinned)

	t.Run("install.yaml", func(t *testing.T) {
		file := filepath.Join(out, "install.yaml")
		t.Cleanup(func() { releaseUninstallManifests(t, file) })
		if _, err := cp.Kubectl(ctx, nil, "apply", "--server-side", "-f", file); err != nil {
			t.Fatal(err)
		}
		t.Run("serves", func(t *testing.T) { serveAnAdd(t, bins, "installyaml-node", "10.123.0.0/24") })
		// The installed commands are what runs: a flag the binaries do not
		// know fails.
		for _, workload := range []string{"deployment/ipkeeper-controller", "daemonset/ipkeeper-agent"} {
			t.Run("unknown flag in "+workload, func(t *testing.T) {
				releaseUnknownFlagFails(t, bins, workload)
			})
		}
	})
	t.Run("chart", func(t *testing.T) {
		if !hasChart {
			t.Skip("the checkout has no charts/ipkeeper")
		}
		helm := func(ctx context.Context, args ...string) ([]byte, error) {
			return framework.Helm(ctx, cp.Tools, cp.KubeconfigPath, args...)
		}
		t.Cleanup(func() {
			if _, err := helm(context.Background(), "uninstall", "ipkeeper", "--namespace", releaseNamespace, "--wait", "--timeout", "3m"); err != nil {
				t.Error(err)
			}
			// Helm leaves the namespace --create-namespace made.
			if err := cp.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}); err != nil {
				t.Error(err)
			}
			releaseWaitNamespaceGone(t)
		})
		// Into the release's namespace, which helm creates.
		if _, err := helm(ctx, "install", "ipkeeper", filepath.Join(out, chartPkg), "--namespace", releaseNamespace, "--create-namespace", "--wait=false"); err != nil {
			t.Fatal(err)
		}
		serveAnAdd(t, bins, "chart-node", "10.123.1.0/24")
	})
}

// releaseUnknownFlagFails adds a flag no binary knows to the installed
// workload's container and checks that RunInstalled fails the test,
// saying so.
func releaseUnknownFlagFails(t *testing.T, bins *framework.Binaries, workload string) {
	ctx := context.Background()
	patch := func(op string) {
		p := `[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--no-such-flag=1"}]`
		if op == "remove" {
			p = `[{"op":"remove","path":"/spec/template/spec/containers/0/args/` + releaseLastArg(t, workload) + `"}]`
		}
		if _, err := cp.Kubectl(ctx, nil, "patch", "--namespace", releaseNamespace, workload, "--type=json", "-p", p); err != nil {
			t.Fatal(err)
		}
	}
	patch("add")
	t.Cleanup(func() { patch("remove") })
	fake := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cp.RunInstalled(fake, framework.InstalledOptions{Namespace: releaseNamespace, Binaries: bins, Node: "unknown-flag-node", ReadyTimeout: 30 * time.Second})
	}()
	<-done
	if !strings.Contains(fake.fatal, "flag provided but not defined: -no-such-flag") {
		t.Errorf("RunInstalled with --no-such-flag in %s: failed with %q; want the binary's refusal", workload, fake.fatal)
	}
}

// releaseLastArg is the index of the last argument of workload's first
// container.
func releaseLastArg(t *testing.T, workload string) string {
	t.Helper()
	out, err := cp.Kubectl(context.Background(), nil, "get", "--namespace", releaseNamespace, workload, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	if err := json.Unmarshal(out, &args); err != nil || len(args) == 0 || args[len(args)-1] != "--no-such-flag=1" {
		t.Fatalf("the args of %s are %s (%v); want --no-such-flag=1 last", workload, out, err)
	}
	return fmt.Sprint(len(args) - 1)
}

// fatalRecorder is a testing.TB whose Fatal records the failure and ends
// the goroutine, for checking that a helper fails a test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); runtime.Goexit() }

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// releaseChecksums checks SHA256SUMS against the files of out and returns
// the assets it lists: every file of out but itself.
func releaseChecksums(t *testing.T, out string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var listed []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q: want <sha256>  <file>", sc.Text())
		}
		data, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS says %s for %s, its sha256 is %x", sum, file, got)
		}
		listed = append(listed, file)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "SHA256SUMS" {
			files = append(files, e.Name())
		}
	}
	slices.Sort(files)
	if !slices.Equal(listed, files) {
		t.Errorf("SHA256SUMS lists %v; the release directory has %v", listed, files)
	}
	return listed
}

// releaseCheckPlugin checks the kubectl plugin's krew assets: the archive
// for this machine's platform (the one built) and ipkeeper.yaml are
// listed in SHA256SUMS, and the manifest names the archive by its sha256
// under the default base URL; the archive holds the checkout's LICENSE and
// a kubectl-ipkeeper of the release's version.
func releaseCheckPlugin(t *testing.T, root, out string, assets []string) {
	t.Helper()
	archive := "kubectl-ipkeeper_linux_" + runtime.GOARCH + ".tar.gz"
	for _, want := range []string{archive, "ipkeeper.yaml"} {
		if !slices.Contains(assets, want) {
			t.Errorf("SHA256SUMS does not list %s (assets: %v)", want, assets)
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "ipkeeper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct{ URI, Sha256, Bin string }
		}
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("ipkeeper.yaml: %v", err)
	}
	if m.Kind != "Plugin" || m.Metadata.Name != "ipkeeper" || m.Spec.Version != releaseVersion || len(m.Spec.Platforms) != 1 {
		t.Fatalf("ipkeeper.yaml: %+v; want the Plugin ipkeeper %s for one platform", m, releaseVersion)
	}
	p := m.Spec.Platforms[0]
	sum := sha256.Sum256(releaseRead(t, filepath.Join(out, archive)))
	wantURI := "https://github.com/ipkeeper/ipkeeper/releases/download/" + releaseVersion + "/" + archive
	if p.URI != wantURI || p.Sha256 != hex.EncodeToString(sum[:]) || p.Bin != "kubectl-ipkeeper" {
		t.Errorf("ipkeeper.yaml's platform: %+v; want uri %s, sha256 %x, bin kubectl-ipkeeper", p, wantURI, sum)
	}
	files := releaseReadTgz(t, filepath.Join(out, archive))
	if len(files) != 2 || !bytes.Equal(files["LICENSE"], releaseRead(t, filepath.Join(root, "LICENSE"))) {
		t.Errorf("%s holds %d files; want kubectl-ipkeeper and the checkout's LICENSE", archive, len(files))
	}
	bin := filepath.Join(t.TempDir(), "kubectl-ipkeeper")
	if err := os.WriteFile(bin, files["kubectl-ipkeeper"], 0o755); err != nil {
		t.Fatal(err)
	}
	if v, err := exec.Command(bin, "--version").Output(); err != nil || strings.TrimSpace(string(v)) != releaseVersion {
		t.Errorf("kubectl-ipkeeper --version of %s: %q, %v; want %s", archive, v, err, releaseVersion)
	}
}

func releaseRead(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// releaseImages lists the container images of the objects in file.
func releaseImages(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return images
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers, InitContainers []struct{ Image string }
					}
				}
			}
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		for _, c := range append(obj.Spec.Template.Spec.InitContainers, obj.Spec.Template.Spec.Containers...) {
			images = append(images, c.Image)
		}
	}
}

// releasePinnedImage is the one image install.yaml runs, which must be
// repo by digest.
func releasePinnedImage(t *testing.T, installYAML, repo string) name.Digest {
	t.Helper()
	images := releaseImages(t, installYAML)
	if len(images) < 2 || !allEqual(images, images[0]) {
		t.Fatalf("install.yaml runs %v; want the controller and the agent on one image", images)
	}
	d, err := name.NewDigest(images[0], name.StrictValidation)
	if err != nil || d.Context().Name() != repo {
		t.Fatalf("install.yaml runs %s; want %s@sha256:... (%v)", images[0], repo, err)
	}
	return d
}

// releaseCheckRegistry checks that the registry serves pinned, as an
// index of the one platform built, and the release's tag as the same.
func releaseCheckRegistry(t *testing.T, pinned name.Digest) {
	t.Helper()
	idx, err := remote.Index(pinned)
	if err != nil {
		t.Fatalf("the registry does not serve %s: %v", pinned, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.OS != "linux" || m.Manifests[0].Platform.Architecture != runtime.GOARCH {
		t.Errorf("the index %s holds %+v; want one image for linux/%s", pinned, m.Manifests, runtime.GOARCH)
	}
	desc, err := remote.Head(pinned.Context().Tag(releaseVersion))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest.String() != pinned.DigestStr() {
		t.Errorf("the registry serves tag %s as %s, install.yaml pins %s", releaseVersion, desc.Digest, pinned.DigestStr())
	}
}

// releaseCheckChart checks the chart package's values pin the image and
// its versions are the release's.
func releaseCheckChart(t *testing.T, pkg string, pinned name.Digest) {
	t.Helper()
	files := releaseReadTgz(t, pkg)
	var values struct {
		Image struct{ Repository, Digest string }
	}
	if err := yaml.Unmarshal(files["ipkeeper/values.yaml"], &values); err != nil {
		t.Fatalf("the chart's values: %v", err)
	}
	if values.Image.Repository != pinned.Context().Name() || values.Image.Digest != pinned.DigestStr() {
		t.Errorf("the chart's values have image.repository %q, image.digest %q; want %s", values.Image.Repository, values.Image.Digest, pinned)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(files["ipkeeper/Chart.yaml"], &chart); err != nil {
		t.Fatalf("the chart's Chart.yaml: %v", err)
	}
	if chart.Version != strings.TrimPrefix(releaseVersion, "v") || chart.AppVersion != releaseVersion {
		t.Errorf("the chart package has version %q, appVersion %q; want %s, %s", chart.Version, chart.AppVersion, strings.TrimPrefix(releaseVersion, "v"), releaseVersion)
	}
}

func releaseReadTgz(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatalf("reading %s: %v", file, err)
			}
		}
	}
}

// releasePullBinaries pulls pinned's image for this machine's platform
// from the registry, as a kubelet would, and returns its binaries.
func releasePullBinaries(t *testing.T, pinned name.Digest) *framework.Binaries {
	t.Helper()
	img, err := remote.Image(pinned, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		t.Fatalf("pulling %s: %v", pinned, err)
	}
	dir := t.TempDir()
	fs := mutate.Extract(img)
	defer func() { _ = fs.Close() }()
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the image's files: %v", err)
		}
		if h.Typeflag != tar.TypeReg || path.Dir(h.Name) != "usr/bin" {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(h.Name)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bins := &framework.Binaries{Shim: filepath.Join(dir, "ipkeeper"), Agent: filepath.Join(dir, "ipkeeper-agent"), Controller: filepath.Join(dir, "ipkeeper-controller")}
	for _, b := range []string{bins.Agent, bins.Controller, filepath.Join(dir, "kubectl-ipkeeper")} {
		v, err := exec.Command(b, "--version").Output()
		if err != nil || strings.TrimSpace(string(v)) != releaseVersion {
			t.Errorf("%s --version of the pulled image: %q, %v; want %s", filepath.Base(b), v, err, releaseVersion)
		}
	}
	if _, err := os.Stat(bins.Shim); err != nil {
		t.Errorf("the pulled image has no CNI plugin: %v", err)
	}
	return bins
}

// releaseUninstallManifests deletes what file installed but its CRDs,
// which the control plane installed at start and other tests use, and
// waits until the install namespace is gone.
func releaseUninstallManifests(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var keep [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "" && meta.Kind != "CustomResourceDefinition" {
			keep = append(keep, doc)
		}
	}
	if _, err := cp.Kubectl(context.Background(), bytes.Join(keep, []byte("\n---\n")), "delete", "--ignore-not-found", "--wait", "--timeout=3m", "-f", "-"); err != nil {
		t.Error(err)
	}
	releaseWaitNamespaceGone(t)
}

func releaseWaitNamespaceGone(t *testing.T) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}
	if err := framework.WaitGone(context.Background(), cp.Client, ns, 3*time.Minute); err != nil {
		t.Errorf("uninstalling: %v", err)
	}
}

func allEqual(s []string, v string) bool {
	return len(s) > 0 && !slices.ContainsFunc(s, func(x string) bool { return x != v })
}
