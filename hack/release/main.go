// SPDX-License-Identifier: Apache-2.0

// Command release makes the assets of an ipkeeper release from the image
// `make image` built: it pushes the image (the OCI layout's index, every
// platform) to the registry as <image>:<version>, and writes into the
// output directory
//
//	install.yaml              kustomize of manifests/
//	install-<overlay>.yaml    kustomize of each manifests/overlays/<overlay>
//	ipkeeper-<semver>.tgz     the Helm chart charts/ipkeeper, when it exists
//	kubectl-ipkeeper_<os>_<arch>.tar.gz
//	                          the kubectl plugin and LICENSE, for each
//	                          platform of the image (-bin-dir's binaries)
//	ipkeeper.yaml             the krew plugin manifest of those archives
//	SHA256SUMS                the sha256 of each of them
//
// the install files each pinning the image by its digest,
// <image>@sha256:..., so that what is installed is exactly what was built
// and pushed; the archives' entries all have the -created time, so that
// the same commit gives the same bytes. `make release`
// builds the image and runs it; docs/install.md says how to use the
// assets.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var (
		o         options
		checkOnly bool
	)
	fs.StringVar(&o.version, "version", "", "the release's version, a semantic version with a leading v: v1.2.3 or v1.2.3-rc.1; the image's tag")
	fs.StringVar(&o.image, "image", "", "the image's repository, without tag or digest, e.g. ghcr.io/ipkeeper/ipkeeper")
	fs.StringVar(&o.layoutDir, "layout", "", "OCI image layout of the image, as `make image` writes it (<IMAGE_DIR>/oci)")
	fs.StringVar(&o.outDir, "out", "", "output directory for the assets")
	fs.StringVar(&o.manifestsDir, "manifests", "manifests", "the kustomize tree: its root is install.yaml, each overlays/<name> install-<name>.yaml")
	fs.StringVar(&o.chartDir, "chart", "charts/ipkeeper", "the Helm chart; skipped, with a message, when the directory does not exist")
	fs.StringVar(&o.kubectl, "kubectl", os.Getenv("IPKEEPER_KUBECTL"), "kubectl, for its kustomize (default $IPKEEPER_KUBECTL)")
	fs.StringVar(&o.helm, "helm", os.Getenv("IPKEEPER_HELM"), "helm, to package the chart (default $IPKEEPER_HELM)")
	fs.StringVar(&o.binDir, "bin-dir", "", "the binaries `make image` built, <os>_<arch>/kubectl-ipkeeper for each platform of the image (<IMAGE_DIR>/bin)")
	fs.StringVar(&o.license, "license", "LICENSE", "the license file each kubectl plugin archive carries")
	fs.StringVar(&o.pluginBaseURL, "plugin-base-url", defaultPluginBaseURL, "where the release's assets are downloaded from, as <base>/<version>/<asset>: the krew manifest's uris")
	fs.Int64Var(&o.created, "created", 0, "the time of the kubectl plugin archives' files, in seconds since the epoch (make release: SOURCE_DATE_EPOCH, the commit's)")
	fs.BoolVar(&o.push, "push", true, "push the image; false: only render, pinned to the digest a push would give")
	fs.BoolVar(&o.insecure, "insecure", false, "talk plain HTTP to the registry (loopback and private addresses always are)")
	fs.BoolVar(&checkOnly, "check", false, "only check -version, -image and -plugin-base-url, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.validate(checkOnly); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		return 2
	}
	if checkOnly {
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := release(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		return 1
	}
	return 0
}
