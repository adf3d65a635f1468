// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"go.yaml.in/yaml/v3"
)

// The kubectl plugin's krew assets: an archive per platform of the image
// and the plugin manifest naming them (krew.sigs.k8s.io, "Writing Krew
// plugin manifests").
const (
	pluginName     = "ipkeeper"
	pluginBin      = "kubectl-ipkeeper"
	pluginManifest = pluginName + ".yaml" // krew wants the plugin's name
	// defaultPluginBaseURL is where a tag's GitHub release serves its
	// assets, <base>/<version>/<asset>.
	defaultPluginBaseURL = "https://github.com/ipkeeper/ipkeeper/releases/download"
	krewAPIVersion       = "krew.googlecontainertools.github.com/v1alpha2"
	pluginHomepage       = "https://github.com/ipkeeper/ipkeeper"
	pluginShort          = "Inspect ipkeeper's IP reservations, pools and claims"
	pluginDescription    = "Answers who holds an address, why a pod, IPAMClaim or KubeVirt VM\n" +
		"is in the state it is in, how full the IPPools are and which\n" +
		"reservations lost their owner; imports whereabouts' allocations.\n" +
		"Documentation: https://github.com/ipkeeper/ipkeeper/blob/main/docs/cli.md\n"
)

// krewPlugin is krew's plugin manifest (its pkg/index Plugin), with the
// fields a release fills, in the order krew's documentation writes them.
type krewPlugin struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Metadata   krewMetadata `yaml:"metadata"`
	Spec       krewSpec     `yaml:"spec"`
}

type krewMetadata struct {
	Name string `yaml:"name"`
}

type krewSpec struct {
	Version          string         `yaml:"version"`
	Homepage         string         `yaml:"homepage"`
	ShortDescription string         `yaml:"shortDescription"`
	Description      string         `yaml:"description"`
	Platforms        []krewPlatform `yaml:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `yaml:"selector"`
	URI      string       `yaml:"uri"`
	Sha256   string       `yaml:"sha256"`
	Bin      string       `yaml:"bin"`
}

type krewSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

// pluginOptions is what the krew assets are made from.
type pluginOptions struct {
	version string
	binDir  string // <os>_<arch>/kubectl-ipkeeper, as `make image` builds them
	license string // the LICENSE file each archive carries
	baseURL string
	mtime   time.Time // every archive entry's time: the commit's
	outDir  string
}

// checkBaseURL wants an absolute http(s) URL: krew downloads from it.
func checkBaseURL(base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("-plugin-base-url %q (PLUGIN_BASE_URL): want an http(s) URL without query, e.g. %s", base, defaultPluginBaseURL)
	}
	return nil
}

// imagePlatforms lists the platforms of the image index, sorted: the
// plugin is published for exactly those.
func imagePlatforms(idx v1.ImageIndex) ([]v1.Platform, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the image index: %w", err)
	}
	var ps []v1.Platform
	for _, d := range m.Manifests {
		// The binaries' directories are <os>_<arch>: a variant has none.
		if d.Platform == nil || d.Platform.OS == "" || d.Platform.Architecture == "" || d.Platform.Variant != "" {
			return nil, fmt.Errorf("image %s of the index has platform %v; want an os and an architecture without variant", d.Digest, d.Platform)
		}
		ps = append(ps, v1.Platform{OS: d.Platform.OS, Architecture: d.Platform.Architecture})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].String() < ps[j].String() })
	return ps, nil
}

func pluginArchiveName(p v1.Platform) string {
	return fmt.Sprintf("%s_%s_%s.tar.gz", pluginBin, p.OS, p.Architecture)
}

// writePlugin writes an archive for each platform and the manifest naming
// them into o.outDir, and returns their names.
func writePlugin(o pluginOptions, platforms []v1.Platform) ([]string, error) {
	if len(platforms) == 0 {
		return nil, errors.New("the kubectl plugin: no platform")
	}
	license, err := os.ReadFile(o.license)
	if err != nil {
		return nil, fmt.Errorf("the kubectl plugin's license: %w", err)
	}
	manifest := krewPlugin{
		APIVersion: krewAPIVersion, Kind: "Plugin", Metadata: krewMetadata{Name: pluginName},
		Spec: krewSpec{Version: o.version, Homepage: pluginHomepage, ShortDescription: pluginShort, Description: pluginDescription},
	}
	var assets []string
	for _, p := range platforms {
		entry, err := writePluginArchive(o, p, license)
		if err != nil {
			return nil, err
		}
		manifest.Spec.Platforms = append(manifest.Spec.Platforms, entry)
		assets = append(assets, pluginArchiveName(p))
	}
	if err := writeYAML(filepath.Join(o.outDir, pluginManifest), manifest); err != nil {
		return nil, err
	}
	return append(assets, pluginManifest), nil
}

// writePluginArchive writes platform p's archive and returns its entry in
// the manifest.
func writePluginArchive(o pluginOptions, p v1.Platform, license []byte) (krewPlatform, error) {
	bin := filepath.Join(o.binDir, p.OS+"_"+p.Architecture, pluginBin)
	data, err := os.ReadFile(bin)
	if err != nil {
		return krewPlatform{}, fmt.Errorf("the kubectl plugin for %s: %w (make image builds it)", p, err)
	}
	archive, err := tarGz([]archiveFile{{pluginBin, 0o755, data}, {"LICENSE", 0o644, license}}, o.mtime)
	if err != nil {
		return krewPlatform{}, fmt.Errorf("the kubectl plugin's archive for %s: %w", p, err)
	}
	name := pluginArchiveName(p)
	if err := os.WriteFile(filepath.Join(o.outDir, name), archive, 0o644); err != nil {
		return krewPlatform{}, fmt.Errorf("writing %s: %w", name, err)
	}
	uri, err := url.JoinPath(o.baseURL, o.version, name)
	if err != nil {
		return krewPlatform{}, fmt.Errorf("-plugin-base-url %q: %w", o.baseURL, err)
	}
	sum := sha256.Sum256(archive)
	return krewPlatform{
		Selector: krewSelector{MatchLabels: map[string]string{"os": p.OS, "arch": p.Architecture}},
		URI:      uri, Sha256: hex.EncodeToString(sum[:]), Bin: pluginBin,
	}, nil
}

type archiveFile struct {
	name string
	mode int64
	data []byte
}

// tarGz is a gzipped tar of files, sorted, root-owned and all at mtime,
// so that the same files give the same bytes (gzip's own header has no
// name or time).
func tarGz(files []archiveFile, mtime time.Time) ([]byte, error) {
	sorted := append([]archiveFile(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range sorted {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeYAML encodes v into file, two-space indented.
func writeYAML(file string, v any) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(file), err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(file), err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(file), err)
	}
	return nil
}
