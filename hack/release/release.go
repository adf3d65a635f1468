// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

const (
	// manifestsImage is the image name manifests/base/kustomization.yaml
	// gives the containers; the release replaces it with the pinned one.
	manifestsImage = "ghcr.io/ipkeeper/ipkeeper"
	// refNameAnnotation names the tag of the layout's index (hack/image).
	refNameAnnotation = "org.opencontainers.image.ref.name"
	// versionLabel is the image config's version label (hack/image).
	versionLabel = "org.opencontainers.image.version"
	sumsFile     = "SHA256SUMS"
)

type options struct {
	version, image         string
	layoutDir, outDir      string
	manifestsDir, chartDir string
	kubectl, helm          string
	push, insecure         bool
	// The kubectl plugin's krew assets (krew.go).
	binDir, license, pluginBaseURL string
	created                        int64 // SOURCE_DATE_EPOCH
	// Set by validate.
	repo         name.Repository // of image
	chartVersion string          // version without the v
}

// semver is a semantic version (semver.org) with a leading v and no build
// metadata: an image tag cannot hold the "+" it starts with.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
	`(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?$`)

// validate checks the flags; errors name the flag, the value and what is
// wanted. With checkOnly, only -version, -image and -plugin-base-url.
func (o *options) validate(checkOnly bool) error {
	if !semver.MatchString(o.version) {
		return fmt.Errorf("-version %q (VERSION): want a semantic version with a leading v and no build metadata, e.g. v0.1.0 or v0.2.0-rc.1", o.version)
	}
	o.chartVersion = strings.TrimPrefix(o.version, "v")
	if o.image == "" {
		return errors.New("-image (IMAGE): required, a repository such as ghcr.io/ipkeeper/ipkeeper")
	}
	if last := o.image[strings.LastIndex(o.image, "/")+1:]; strings.ContainsAny(last, ":@") {
		return fmt.Errorf("-image %q (IMAGE): want a repository without tag or digest, e.g. ghcr.io/ipkeeper/ipkeeper: the tag is the version (%s) and the digest is the image's", o.image, o.version)
	}
	var nameOpts []name.Option
	nameOpts = append(nameOpts, name.StrictValidation)
	if o.insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	repo, err := name.NewRepository(o.image, nameOpts...)
	if err != nil {
		return fmt.Errorf("-image %q (IMAGE): want a repository with its registry, e.g. ghcr.io/ipkeeper/ipkeeper: %w", o.image, err)
	}
	o.repo = repo
	// Before anything is built or pushed: a final release must be the tag
	// the manifests name (empty -manifests: not checked).
	if o.manifestsDir != "" {
		if err := checkManifestsTag(o.manifestsDir, o.version, os.Stderr); err != nil {
			return err
		}
	}
	if err := checkBaseURL(o.pluginBaseURL); err != nil {
		return err
	}
	if checkOnly {
		return nil
	}
	for flag, v := range map[string]string{"-layout": o.layoutDir, "-out": o.outDir, "-kubectl": o.kubectl, "-bin-dir": o.binDir} {
		if v == "" {
			return fmt.Errorf("%s: required", flag)
		}
	}
	if o.created < 0 {
		return fmt.Errorf("-created %d (SOURCE_DATE_EPOCH): want the commit's time in seconds since the epoch", o.created)
	}
	return nil
}

// pluginOptions is what writePlugin needs of o.
func (o options) pluginOptions() pluginOptions {
	return pluginOptions{
		version: o.version, binDir: o.binDir, license: o.license, baseURL: o.pluginBaseURL,
		mtime: time.Unix(o.created, 0).UTC(), outDir: o.outDir,
	}
}

// release writes the assets, then pushes the image; it reports on w.
func release(ctx context.Context, o options, w io.Writer) error {
	idx, err := loadIndex(o.layoutDir, o.version)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("the image index's digest: %w", err)
	}
	pinned := o.repo.Digest(digest.String())
	// Everything that can fail is done before the push: a tag whose
	// manifests or chart do not render must not leave a published image
	// without its assets.
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.outDir, err)
	}
	assets, err := renderManifests(ctx, o, pinned)
	if err != nil {
		return err
	}
	chart, err := packageChart(ctx, o, pinned, w)
	if err != nil {
		return err
	}
	if chart != "" {
		assets = append(assets, chart)
	}
	platforms, err := imagePlatforms(idx)
	if err != nil {
		return err
	}
	plugin, err := writePlugin(o.pluginOptions(), platforms)
	if err != nil {
		return err
	}
	assets = append(assets, plugin...)
	if err := writeSums(o.outDir, assets); err != nil {
		return err
	}
	if o.push {
		if err := push(ctx, idx, o.repo.Tag(o.version), pinned); err != nil {
			return err
		}
		fmt.Fprintf(w, "pushed %s as %s\n", pinned, o.repo.Tag(o.version))
	} else {
		fmt.Fprintf(w, "not pushed (-push=false); the assets pin %s\n", pinned)
	}
	for _, a := range append(assets, sumsFile) {
		fmt.Fprintf(w, "wrote %s\n", filepath.Join(o.outDir, a))
	}
	return nil
}

// loadIndex reads the image index `make image` wrote into the OCI layout
// dir, and checks it was built for version: its tag and every image's
// version label.
func loadIndex(dir, version string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s (run make image first): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("the OCI layout %s holds %d entries; want the one image index hack/image writes", dir, len(m.Manifests))
	}
	entry := m.Manifests[0]
	if tag := entry.Annotations[refNameAnnotation]; tag != version {
		return nil, fmt.Errorf("the image in %s was built as tag %q, not %s: build it for this version (make image VERSION=%s IMAGE=<repo>:%s)", dir, tag, version, version, version)
	}
	idx, err := top.ImageIndex(entry.Digest)
	if err != nil {
		return nil, fmt.Errorf("reading the image index %s of %s: %w", entry.Digest, dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the image index %s of %s: %w", entry.Digest, dir, err)
	}
	if len(im.Manifests) == 0 {
		return nil, fmt.Errorf("the image index %s of %s has no image", entry.Digest, dir)
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("reading image %s of %s: %w", d.Digest, dir, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("reading the config of image %s of %s: %w", d.Digest, dir, err)
		}
		if got := cf.Config.Labels[versionLabel]; got != version {
			return nil, fmt.Errorf("image %s (%s) of %s has %s=%q, not %s", d.Digest, d.Platform, dir, versionLabel, got, version)
		}
	}
	return idx, nil
}

// push writes idx as tag, with the credentials of the Docker config
// (docker login, or a credential helper), and checks the registry serves
// it by its digest.
func push(ctx context.Context, idx v1.ImageIndex, tag name.Tag, pinned name.Digest) error {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return fmt.Errorf("pushing %s: %w", tag, err)
	}
	for _, ref := range []name.Reference{pinned, tag} {
		desc, err := remote.Head(ref, opts...)
		if err != nil {
			return fmt.Errorf("reading back %s: %w", ref, err)
		}
		if desc.Digest.String() != pinned.DigestStr() {
			return fmt.Errorf("the registry serves %s as %s, not %s", ref, desc.Digest, pinned.DigestStr())
		}
	}
	return nil
}

// checkManifestsTag checks the tag manifests/base/kustomization.yaml
// gives the image: `kubectl apply -k` of a release tag's manifests runs
// it, so a release (not a pre-release) must name its own version there.
// The assets pin the digest whatever the tag says.
func checkManifestsTag(manifestsDir, version string, w io.Writer) error {
	file := filepath.Join(manifestsDir, "base", "kustomization.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading the manifests' image tag: %w", err)
	}
	var k struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	if err := sigsyaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	tag := ""
	for _, img := range k.Images {
		if img.NewName == manifestsImage {
			tag = img.NewTag
		}
	}
	switch {
	case tag == version:
		return nil
	case tag == "":
		return fmt.Errorf("%s names no tag of %s", file, manifestsImage)
	case strings.Contains(version, "-"):
		fmt.Fprintf(w, "note: %s names %s:%s; this pre-release's assets pin its own image by digest\n", file, manifestsImage, tag)
		return nil
	}
	return fmt.Errorf("%s names %s:%s, not %s: `kubectl apply -k` of the tag's manifests would run another image; set newTag to %s before tagging", file, manifestsImage, tag, version, version)
}

// kustomization is one install file: the kustomize directory and the
// asset it renders into.
type kustomization struct{ dir, asset string }

// kustomizations lists the manifests root and every overlay.
func kustomizations(manifestsDir string) ([]kustomization, error) {
	ks := []kustomization{{manifestsDir, "install.yaml"}}
	entries, err := os.ReadDir(filepath.Join(manifestsDir, "overlays"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing the overlays: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(manifestsDir, "overlays", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); e.IsDir() && err == nil {
			ks = append(ks, kustomization{dir, "install-" + e.Name() + ".yaml"})
		}
	}
	return ks, nil
}

// renderManifests writes install.yaml and install-<overlay>.yaml, each
// kustomize's output with the image pinned, and returns their names.
func renderManifests(ctx context.Context, o options, pinned name.Digest) ([]string, error) {
	ks, err := kustomizations(o.manifestsDir)
	if err != nil {
		return nil, err
	}
	var assets []string
	for _, k := range ks {
		out, err := kustomizePinned(ctx, o.kubectl, k.dir, pinned)
		if err != nil {
			return nil, err
		}
		if err := checkPinned(out, pinned); err != nil {
			return nil, fmt.Errorf("%s (from %s): %w", k.asset, k.dir, err)
		}
		header := fmt.Sprintf("# ipkeeper %s, image %s (docs/install.md)\n#   kubectl apply --server-side -f %s\n", o.version, pinned, k.asset)
		if err := os.WriteFile(filepath.Join(o.outDir, k.asset), append([]byte(header), out...), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", k.asset, err)
		}
		assets = append(assets, k.asset)
	}
	return assets, nil
}

// kustomizePinned renders dir through a kustomization of its own that
// replaces the manifests' image with pinned: kustomize's images
// transformer, as a user's kustomization would.
func kustomizePinned(ctx context.Context, kubectl, dir string, pinned name.Digest) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "ipkeeper-release-")
	if err != nil {
		return nil, fmt.Errorf("creating a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("locating %s: %w", dir, err)
	}
	rel, err := filepath.Rel(tmp, abs)
	if err != nil {
		return nil, fmt.Errorf("locating %s: %w", dir, err)
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{filepath.ToSlash(rel)},
		"images": []map[string]string{{
			"name": manifestsImage, "newName": pinned.Context().Name(), "digest": pinned.DigestStr(),
		}},
	}
	b, err := sigsyaml.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("writing the pinning kustomization: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), b, 0o644); err != nil {
		return nil, fmt.Errorf("writing the pinning kustomization: %w", err)
	}
	return runTool(ctx, nil, kubectl, "kustomize", tmp)
}

// checkPinned fails unless every container image of the YAML documents in
// rendered is pinned, and there is one.
func checkPinned(rendered []byte, pinned name.Digest) error {
	images, err := containerImages(rendered)
	if err != nil {
		return err
	}
	if len(images) == 0 {
		return errors.New("no container image in it")
	}
	for _, img := range images {
		if img != pinned.String() {
			return fmt.Errorf("container image %q is not %s", img, pinned)
		}
	}
	return nil
}

// containerImages lists the image of every container, init container and
// ephemeral container of every object in the YAML documents of data.
func containerImages(data []byte) ([]string, error) {
	var images []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return images, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading YAML: %w", err)
		}
		var obj any
		if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("reading YAML: %w", err)
		}
		walkContainers(obj, func(c map[string]any) {
			img, _ := c["image"].(string)
			images = append(images, img)
		})
	}
}

func walkContainers(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if list, ok := child.([]any); ok && (k == "containers" || k == "initContainers" || k == "ephemeralContainers") {
				for _, c := range list {
					if m, ok := c.(map[string]any); ok {
						f(m)
					}
				}
				continue
			}
			walkContainers(child, f)
		}
	case []any:
		for _, child := range v {
			walkContainers(child, f)
		}
	}
}

// packageChart packages the chart with image.repository and image.digest
// pinned in its values (and the image Artifact Hub lists pinned in its
// Chart.yaml), checks that what it renders runs the pinned image,
// and returns the package's name; "" when there is no chart.
func packageChart(ctx context.Context, o options, pinned name.Digest, w io.Writer) (string, error) {
	if _, err := os.Stat(filepath.Join(o.chartDir, "Chart.yaml")); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(w, "no Helm chart at %s: the release has no chart package\n", o.chartDir)
		return "", nil
	}
	if o.helm == "" {
		return "", errors.New("-helm (IPKEEPER_HELM): required to package the chart " + o.chartDir)
	}
	tmp, err := os.MkdirTemp("", "ipkeeper-release-chart-")
	if err != nil {
		return "", fmt.Errorf("creating a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// Helm keeps its caches and repositories here, not in the user's home.
	env := []string{"HELM_CACHE_HOME=" + filepath.Join(tmp, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(tmp, "config"), "HELM_DATA_HOME=" + filepath.Join(tmp, "data")}
	chart := filepath.Join(tmp, "src", filepath.Base(o.chartDir))
	if err := copyTree(o.chartDir, chart); err != nil {
		return "", err
	}
	values := filepath.Join(chart, "values.yaml")
	in, err := os.ReadFile(values)
	if err != nil {
		return "", fmt.Errorf("reading the chart's values: %w", err)
	}
	out, err := pinValues(in, pinned)
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(o.chartDir, "values.yaml"), err)
	}
	if err := os.WriteFile(values, out, 0o644); err != nil {
		return "", fmt.Errorf("writing the chart's values: %w", err)
	}
	chartYAML := filepath.Join(chart, "Chart.yaml")
	in, err = os.ReadFile(chartYAML)
	if err != nil {
		return "", fmt.Errorf("reading the chart's Chart.yaml: %w", err)
	}
	if out, err = pinChartImages(in, pinned); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(o.chartDir, "Chart.yaml"), err)
	}
	if err := os.WriteFile(chartYAML, out, 0o644); err != nil {
		return "", fmt.Errorf("writing the chart's Chart.yaml: %w", err)
	}
	pkgDir := filepath.Join(tmp, "pkg")
	if _, err := runTool(ctx, env, o.helm, "package", chart, "--version", o.chartVersion, "--app-version", o.version, "--destination", pkgDir); err != nil {
		return "", err
	}
	pkgs, err := filepath.Glob(filepath.Join(pkgDir, "*.tgz"))
	if err != nil || len(pkgs) != 1 {
		return "", fmt.Errorf("helm package wrote %v into %s; want one .tgz", pkgs, pkgDir)
	}
	// --kube-version: the pinned helm is built without Kubernetes' version
	// and would render for 1.20, below the chart's kubeVersion; this is the
	// version the tests run (K8S_VERSION in hack/tools.sh).
	rendered, err := runTool(ctx, env, o.helm, "template", "ipkeeper", pkgs[0], "--namespace", "ipkeeper-system", "--kube-version", "v1.34.2")
	if err != nil {
		return "", err
	}
	if err := checkPinned(rendered, pinned); err != nil {
		return "", fmt.Errorf("the chart %s, rendered with its packaged values: %w", o.chartDir, err)
	}
	shown, err := runTool(ctx, env, o.helm, "show", "chart", pkgs[0])
	if err != nil {
		return "", err
	}
	if err := checkChartImages(shown, pinned); err != nil {
		return "", err
	}
	asset := filepath.Base(pkgs[0])
	if err := copyFile(pkgs[0], filepath.Join(o.outDir, asset)); err != nil {
		return "", err
	}
	return asset, nil
}

// pinValues sets image.repository and image.digest in a chart's
// values.yaml by editing those values' text in place (image.digest is
// added after image.repository when missing), so that the packaged
// values keep every comment and blank line of the chart's. An image.tag
// is left alone: the digest must win in the chart's templates, which
// packageChart checks.
func pinValues(in []byte, pinned name.Digest) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(in, &doc); err != nil {
		return nil, fmt.Errorf("reading YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("want a YAML mapping")
	}
	_, image := mappingEntry(doc.Content[0], "image")
	if image == nil || image.Kind != yaml.MappingNode {
		return nil, errors.New("no image mapping (image.repository, image.digest) to pin the image in")
	}
	repoKey, repo := mappingEntry(image, "repository")
	if repo == nil {
		return nil, errors.New("no image.repository")
	}
	lines := strings.SplitAfter(string(in), "\n")
	if err := replaceScalar(lines, repo, pinned.Context().Name()); err != nil {
		return nil, fmt.Errorf("image.repository: %w", err)
	}
	if _, digest := mappingEntry(image, "digest"); digest != nil {
		if err := replaceScalar(lines, digest, pinned.DigestStr()); err != nil {
			return nil, fmt.Errorf("image.digest: %w", err)
		}
	} else {
		added := strings.Repeat(" ", repoKey.Column-1) + "digest: " + pinned.DigestStr() + "\n"
		lines[repo.Line-1] = strings.TrimSuffix(lines[repo.Line-1], "\n") + "\n" + added
	}
	out := []byte(strings.Join(lines, ""))
	// What a reader of the values gets.
	var check struct {
		Image struct{ Repository, Digest string } `json:"image"`
	}
	if err := sigsyaml.Unmarshal(out, &check); err != nil {
		return nil, fmt.Errorf("reading the pinned values back: %w", err)
	}
	if check.Image.Repository != pinned.Context().Name() || check.Image.Digest != pinned.DigestStr() {
		return nil, fmt.Errorf("the pinned values read back as image.repository %q, image.digest %q", check.Image.Repository, check.Image.Digest)
	}
	return out, nil
}

// mappingEntry is the key and value nodes of key in mapping m.
func mappingEntry(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// replaceScalar replaces the text of the one-line scalar node n in lines
// with value, plain or double-quoted as it was; the rest of the line (a
// comment) stays.
func replaceScalar(lines []string, n *yaml.Node, value string) error {
	if n.Kind != yaml.ScalarNode || n.Line < 1 || n.Line > len(lines) {
		return errors.New("want a scalar")
	}
	line := lines[n.Line-1]
	start := n.Column - 1
	if start >= len(line) {
		return fmt.Errorf("line %d: want a value on the key's line", n.Line)
	}
	var end int
	switch n.Style {
	case yaml.DoubleQuotedStyle:
		end = strings.IndexByte(line[start+1:], '"')
		if end < 0 || strings.Contains(line[start:start+1+end], "\\") {
			return fmt.Errorf("line %d: want a one-line double-quoted value without escapes", n.Line)
		}
		end += start + 2
		value = `"` + value + `"`
	case yaml.SingleQuotedStyle:
		end = strings.IndexByte(line[start+1:], '\'')
		if end < 0 {
			return fmt.Errorf("line %d: want a one-line single-quoted value", n.Line)
		}
		end += start + 2
		value = `"` + value + `"`
	case 0:
		end = start + len(n.Value)
		if end > len(line) || line[start:end] != n.Value {
			return fmt.Errorf("line %d: want a one-line plain value", n.Line)
		}
	default:
		return fmt.Errorf("line %d: want a plain or quoted value", n.Line)
	}
	lines[n.Line-1] = line[:start] + value + line[end:]
	return nil
}

// writeSums writes SHA256SUMS for the assets in dir, in sha256sum's
// format, sorted by name: `sha256sum -c SHA256SUMS` checks them.
func writeSums(dir string, assets []string) error {
	sorted := append([]string(nil), assets...)
	sort.Strings(sorted)
	var b strings.Builder
	for _, a := range sorted {
		data, err := os.ReadFile(filepath.Join(dir, a))
		if err != nil {
			return fmt.Errorf("reading %s: %w", a, err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), a)
	}
	if err := os.WriteFile(filepath.Join(dir, sumsFile), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", sumsFile, err)
	}
	return nil
}

func runTool(ctx context.Context, env []string, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("copying %s: %w", src, err)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return fmt.Errorf("copying %s: %w", p, err)
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, target)
		default:
			return fmt.Errorf("copying %s: not a file or directory", p)
		}
	})
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", src, err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}
