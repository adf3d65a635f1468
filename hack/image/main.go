// SPDX-License-Identifier: Apache-2.0

// Command image packs ipkeeper's four static binaries into an OCI image
// without Docker, a daemon or a base image: the base is empty (scratch), so
// nothing is downloaded, and go-containerregistry writes the layer, config,
// manifests and archives itself. `make image` builds the binaries for each
// platform and runs it; docs/install.md says what comes out and how to push
// it.
//
// Every timestamp is the -created time (the commit's, from `make image`) and
// every tar is sorted, so the same binaries give the same digests.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var (
		s         spec
		ref       = fs.String("image", "", "name and tag recorded in the archives, e.g. ghcr.io/ipkeeper/ipkeeper:v0.1.0")
		binaries  = fs.String("binaries", "", "binaries to put into "+binDir+", space-separated")
		platforms = fs.String("platforms", "linux/amd64,linux/arm64", "platforms, comma- or space-separated; the binaries of each are in <bin-dir>/<os>_<arch>")
		created   = fs.Int64("created", 0, "timestamp of the image and its files, in seconds since the epoch (make image: the commit's)")
		outDir    = fs.String("out", "", "output directory")
	)
	fs.StringVar(&s.binariesDir, "bin-dir", "", "directory with a <os>_<arch> subdirectory of binaries per platform")
	fs.StringVar(&s.version, "version", "", "value of the "+labelVersion+" label")
	fs.StringVar(&s.revision, "revision", "", "value of the "+labelRevision+" label (the commit)")
	fs.StringVar(&s.source, "source", "https://github.com/ipkeeper/ipkeeper", "value of the "+labelSource+" label")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := s.complete(*ref, *binaries, *platforms, *created, *outDir); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		return 2
	}
	idx, err := build(s, *outDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		return 1
	}
	digest, err := idx.Digest()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		return 1
	}
	fmt.Printf("%s %s (%d platforms) in %s\n", s.ref, digest, len(s.platforms), *outDir)
	return 0
}

// complete checks the flags and fills in the rest of the spec.
func (s *spec) complete(ref, binaries, platforms string, created int64, outDir string) error {
	if outDir == "" {
		return fmt.Errorf("-out: required")
	}
	if s.binariesDir == "" {
		return fmt.Errorf("-bin-dir: required")
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-image %q: want a name with a tag, e.g. ghcr.io/ipkeeper/ipkeeper:v0.1.0: %w", ref, err)
	}
	s.ref = tag
	s.binaries = strings.Fields(binaries)
	if len(s.binaries) == 0 {
		return fmt.Errorf("-binaries: required")
	}
	if s.platforms, err = parsePlatforms(platforms); err != nil {
		return fmt.Errorf("-platforms: %w", err)
	}
	if created < 0 {
		return fmt.Errorf("-created %d: want seconds since the epoch", created)
	}
	s.created = time.Unix(created, 0).UTC()
	if s.version == "" {
		return fmt.Errorf("-version: required")
	}
	return nil
}
