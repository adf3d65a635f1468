#!/usr/bin/env bash
# Builds, at pinned versions, the binaries the tests and the demo run:
# etcd, kube-apiserver, kube-controller-manager, kubectl, the CNI reference
# plugins, the Multus thin plugin, controller-gen, golangci-lint, and KubeVirt's
# virt-controller with the KubeVirt CRDs generated from the same module, and
# whereabouts (the e2e test of the move from whereabouts, and `make bench`),
# and KubeVirt's ipam-extensions (the IPAMClaims controller and pod webhook
# the network addons operator installs; the coexistence tests run it), and
# helm, promtool and kubeconform (the chart, alert rule and manifest checks),
# and the real-node lane's kubelet, kube-scheduler and base images' contents
# (pause built from Kubernetes' source, Debian's busybox-static), and
# KubeVirt's node side for it: virt-handler, virt-chroot, virt-launcher and
# the helpers of its image (component kubevirt-node), and the launcher
# image's root filesystem from Debian packages (component launcher-rootfs).
#
# Nothing prebuilt can be downloaded here, but everything builds from the Go
# module proxy. Each component is built in a throwaway module that pins its
# version (go install pkg@version fails for modules whose version list the
# proxy refuses) and cached outside the checkout, keyed by version, so a fresh
# clone does not rebuild:
#   ${IPKEEPER_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper/tools}/<name>-<version>/
#
# Usage: hack/tools.sh [component...]     (default: all)
#        hack/tools.sh --env              (prints the binaries' paths, builds nothing)
set -euo pipefail

K8S_VERSION=v1.34.2
ETCD_VERSION=v3.6.4
CNI_PLUGINS_VERSION=v1.9.0
MULTUS_VERSION=v4.2.3
CONTROLLER_TOOLS_VERSION=v0.19.0
GOLANGCI_LINT_VERSION=v2.6.2
# The e2e test of `import whereabouts` and `make bench`'s side-by-side figure.
WHEREABOUTS_VERSION=v0.9.4
KUBEVIRT_VERSION=v1.8.2
# Modules of the KubeVirt build that the checksum database does not list
# (github.com/rhobs/operator-observability-toolkit v0.0.30). Their hashes are
# pinned in hack/kubevirt-${KUBEVIRT_VERSION}.go.sum instead, and the go
# command checks the downloads against that file; the list applies to that
# build only.
KUBEVIRT_NOSUMDB=github.com/rhobs
# KubeVirt's node side (component kubevirt-node, the real-node lane): the
# programs of KubeVirt's virt-handler image (virt-handler; virt-chroot, which
# it execs) and of its virt-launcher image (virt-launcher, virt-launcher-
# monitor, virt-probe, virt-tail, virt-freezer, libvirt-hook-client, the C
# container-disk, built gcc -static as KubeVirt does), from the same module
# as virt-controller. Four need cgo: virt-handler, virt-chroot and
# virt-freezer only kernel headers and libc (node-labeller's KVM probe,
# runc's userns helper), virt-launcher links libvirt.org/go/libvirt, built
# against Debian's libvirt-dev (9.0 on bookworm; the binding compiles newer
# APIs conditionally, and runs against the rootfs's newer libvirt0). One module is
# replaced: libguestfs.org/libnbd, a cgo binding the module proxy refuses,
# which virt-launcher uses only for the backup / changed-block-tracking NBD
# client; hack/stubs/libnbd (see its README) declares that API and fails
# every call, so those features fail with an error naming the stub.
KUBEVIRT_NODE_CGO="virt-handler virt-chroot virt-launcher virt-freezer"
KUBEVIRT_NODE_PURE="virt-launcher-monitor virt-probe virt-tail virt-launcher/libvirt-hook-client"
# The virt-launcher image's root filesystem (component launcher-rootfs):
# Debian's libvirt and QEMU, debootstrapped from the mirror the machine's apt
# sources name (never a URL of ours). Debian builds libvirt with the
# monolithic libvirtd only; a shim /usr/sbin/virtqemud
# (hack/launcher-rootfs/virtqemud) runs it where KubeVirt runs virtqemud. Bump the revision whenever
# the package list, the shim or the recipe changes: it names the cache.
LAUNCHER_SUITE=trixie
LAUNCHER_ROOTFS_REVISION=1
LAUNCHER_PACKAGES="libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-log libvirt-clients qemu-system-x86 qemu-utils ipxe-qemu seabios iproute2 nftables xorriso procps"
# The cloud-init guest's root filesystem (component guest-rootfs), for the
# guest network configuration scenario: Debian's cloud-init, which reads
# the NoCloud disk KubeVirt makes of ipkeeper's Secret, and ifupdown, which
# applies what cloud-init renders (/etc/network/interfaces.d), as a
# Debian guest without netplan does; debootstrapped like the launcher's,
# from the same suite. Bump the revision whenever the list changes.
GUEST_ROOTFS_REVISION=1
GUEST_ROOTFS_PACKAGES="cloud-init ifupdown iproute2 procps"
# kubevirt/ipam-extensions is not served by the module proxy: it builds from
# a source archive, ipam-extensions-<version>.tar.gz in the directory
# IPKEEPER_THIRD_PARTY_DIR names (default: ../shared/third_party beside the
# checkout, when it holds one; checked against the sha256 below), else from
# the tag's archive on GitHub. Its go.mod pins ipamclaims v0.5.0-alpha,
# which the proxy refuses; v0.5.1-alpha (ipkeeper's) is API-compatible.
IPAM_EXTENSIONS_VERSION=v0.6.0
IPAM_EXTENSIONS_SHA256=644ea618c3c4122eed59d05dcbc9d4f9d6064ada3f42839b2b6f8d2e6708889c
IPAM_EXTENSIONS_IPAMCLAIMS=v0.5.1-alpha
# Packaging and monitoring checks: the Helm chart (helm lint, template,
# install), the alert rules' unit tests (promtool test rules), and the
# rendered manifests' schema check in `make lint` (kubeconform).
HELM_VERSION=v3.22.0
PROMETHEUS_VERSION=v0.316.0
KUBECONFORM_VERSION=v0.7.0
# kube-schemas: what hack/kubeconform.sh turns into kubeconform's schemas:
# the swagger.json of K8S_VERSION, and the Prometheus Operator's CRDs
# (PrometheusRule, ServiceMonitor), which controller-gen writes from the
# operator's monitoring API module (the CRD manifests are in no module the
# proxy serves).
PROMETHEUS_OPERATOR_VERSION=v0.95.2
# netplan's generator (Debian's netplan.io and libnetplan0, unpacked, never
# installed): the reference parser of the network config version 2 that
# cloud-init hands to it; the guest network configuration tests render
# ipkeeper's Secrets through it. The distribution's version: Debian only
# serves its current one.
NETPLAN_DEBS="netplan.io libnetplan0"

ROOT="${IPKEEPER_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper/tools}"

log() { printf '[tools] %s\n' "$*" >&2; }
die() { printf '[tools] ERROR: %s\n' "$*" >&2; exit 1; }

# kubevirt-node's cache directory: KubeVirt's version, and when
# hack/kubevirt-patches holds patches (applied to a copy of the module's
# source before that build, see its README), a hash of them, so a changed
# patch is a new build.
kubevirt_node_dir() {
	local patches
	patches=$(cd "$(dirname "${BASH_SOURCE[0]}")" && find kubevirt-patches -maxdepth 1 -name '*.patch' 2>/dev/null | LC_ALL=C sort)
	if [[ -z "$patches" ]]; then
		echo "$ROOT/kubevirt-node-${KUBEVIRT_VERSION}"
	else
		# shellcheck disable=SC2086
		echo "$ROOT/kubevirt-node-${KUBEVIRT_VERSION}-patched-$(cd "$(dirname "${BASH_SOURCE[0]}")" && cat $patches | sha256sum | cut -c1-12)"
	fi
}

# --env prints, as shell assignments, where each pinned binary lives, so
# make and the test framework agree on one set of paths (and versions).
if [[ "${1:-}" == "--env" ]]; then
	cat <<ENV
IPKEEPER_TOOLS_DIR=$ROOT
IPKEEPER_ETCD=$ROOT/etcd-${ETCD_VERSION}/etcd
IPKEEPER_KUBE_APISERVER=$ROOT/kubernetes-${K8S_VERSION}/kube-apiserver
IPKEEPER_KUBE_CONTROLLER_MANAGER=$ROOT/kubernetes-${K8S_VERSION}/kube-controller-manager
IPKEEPER_KUBECTL=$ROOT/kubernetes-${K8S_VERSION}/kubectl
IPKEEPER_KUBELET=$ROOT/kubernetes-node-${K8S_VERSION}/kubelet
IPKEEPER_KUBE_SCHEDULER=$ROOT/kubernetes-node-${K8S_VERSION}/kube-scheduler
IPKEEPER_NODE_IMAGES_DIR=$ROOT/node-images-${K8S_VERSION}
IPKEEPER_GUEST_KERNEL_DIR=$ROOT/guest-kernel
IPKEEPER_GUEST_ROOTFS=$ROOT/guest-rootfs-${LAUNCHER_SUITE}-${GUEST_ROOTFS_REVISION}/rootfs
IPKEEPER_MULTUS_THIN_ENTRYPOINT=$ROOT/multus-${MULTUS_VERSION}/thin_entrypoint
IPKEEPER_CNI_PLUGINS_DIR=$ROOT/cni-plugins-${CNI_PLUGINS_VERSION}
IPKEEPER_MULTUS=$ROOT/multus-${MULTUS_VERSION}/multus
IPKEEPER_CONTROLLER_GEN=$ROOT/controller-gen-${CONTROLLER_TOOLS_VERSION}/controller-gen
IPKEEPER_GOLANGCI_LINT=$ROOT/golangci-lint-${GOLANGCI_LINT_VERSION}/golangci-lint
IPKEEPER_WHEREABOUTS_DIR=$ROOT/whereabouts-${WHEREABOUTS_VERSION}
IPKEEPER_VIRT_CONTROLLER=$ROOT/kubevirt-${KUBEVIRT_VERSION}/virt-controller
IPKEEPER_KUBEVIRT_CRDS_DIR=$ROOT/kubevirt-${KUBEVIRT_VERSION}/crds
IPKEEPER_KUBEVIRT_NODE_DIR=$(kubevirt_node_dir)
IPKEEPER_LAUNCHER_ROOTFS=$ROOT/kubevirt-launcher-rootfs-${LAUNCHER_SUITE}-${LAUNCHER_ROOTFS_REVISION}/rootfs
IPKEEPER_IPAM_EXTENSIONS=$ROOT/ipam-extensions-${IPAM_EXTENSIONS_VERSION}/manager
IPKEEPER_IPAM_EXTENSIONS_VERSION=${IPAM_EXTENSIONS_VERSION}
IPKEEPER_HELM=$ROOT/helm-${HELM_VERSION}/helm
IPKEEPER_PROMTOOL=$ROOT/promtool-${PROMETHEUS_VERSION}/promtool
IPKEEPER_KUBECONFORM=$ROOT/kubeconform-${KUBECONFORM_VERSION}/kubeconform
IPKEEPER_KUBE_SCHEMAS_DIR=$ROOT/kube-schemas-${K8S_VERSION}-prometheus-operator-${PROMETHEUS_OPERATOR_VERSION}
IPKEEPER_NETPLAN_GENERATE=$ROOT/netplan/usr/libexec/netplan/generate
ENV
	exit 0
fi

command -v go >/dev/null || die "go is not on PATH"

# unmet COMPONENT WHY: a prerequisite of the real-node lane's components
# (root, libvirt-dev) is missing. Asked for by name, or with CI=true, that
# is an error; in the default list it is a notice and the component is
# skipped, so that a developer without them still gets the other tools (the
# lane itself skips outside CI without them).
DEFAULT_LIST=0
unmet() {
	if [[ $DEFAULT_LIST == 1 && "${CI:-}" != true ]]; then
		log "$1: skipped, $2"
		return 0
	fi
	die "$1: $2"
}

# done_marker DIR: a component counts as built only when every binary is in
# place and the marker was written last, so an interrupted build is redone.
built() { [[ -f "$1/.complete" ]]; }

# build_in_module DIR GOMOD_CONTENT OUTPUT PKG [LDFLAGS]
# Creates a throwaway module in a temp dir, builds PKG into DIR/OUTPUT,
# without cgo unless CGO=1 is set (KubeVirt's node side links C libraries).
# With GOSUM_PIN set (a go.sum file in hack/), the module starts from those
# lines, so the modules they name are verified against them; NOSUMDB (a
# GONOSUMDB list) names the modules the checksum database is not asked about,
# which must be the ones GOSUM_PIN covers.
build_in_module() {
	local dir=$1 gomod=$2 out=$3 pkg=$4 ldflags=${5:-}
	local work
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	printf '%s\n' "$gomod" >"$work/go.mod"
	if [[ -n "${GOSUM_PIN:-}" ]]; then
		cp "$GOSUM_PIN" "$work/go.sum" || die "no pinned go.sum $GOSUM_PIN"
	fi
	if [[ "$pkg" == "./" ]]; then
		printf '%s\n' "${MAIN_GO:?}" >"$work/main.go"
	fi
	log "  go build $pkg -> $dir/$out"
	(cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED="${CGO:-0}" GOTOOLCHAIN=local GONOSUMDB="${NOSUMDB:-${GONOSUMDB:-}}" \
		go build -trimpath -ldflags "-s -w $ldflags" -o "$dir/$out" "$pkg") ||
		die "building $pkg failed (module in $work kept for inspection)"
}

# apt_download DIR PACKAGE...: the packages' .deb files, from the machine's
# apt sources, into DIR (nothing is installed); apt's lists are updated
# once if they are missing or stale, which needs root.
apt_download() {
	local dir=$1
	shift
	if ! (cd "$dir" && apt-get download -qq "$@" >/dev/null 2>&1); then
		[[ $(id -u) -eq 0 ]] || die "apt-get download $* failed, and not root to update apt's lists"
		apt-get update -qq >/dev/null
		(cd "$dir" && apt-get download -qq "$@") || die "apt-get download $* failed"
	fi
}

# module_path FIELD MODULE@VERSION prints a field (GoMod: its go.mod file,
# Dir: its source tree) of a module downloaded into the module cache.
module_path() {
	local field=$1 mod=$2 out
	out=$(cd "$(mktemp -d)" && go mod download -json "$mod" | sed -n "s/.*\"$field\": \"\(.*\)\",*/\1/p")
	[[ -e "$out" ]] || die "could not download $mod (no $field)"
	echo "$out"
}

k8s_gomod() {
	local minor=${K8S_VERSION#v1.}
	local staging_version="v0.${minor}"
	local modfile
	modfile=$(module_path GoMod "k8s.io/kubernetes@${K8S_VERSION}")
	echo "module ipkeeper.tools/k8s"
	echo "go 1.24.0"
	echo "require k8s.io/kubernetes ${K8S_VERSION}"
	grep '=> ./staging' "$modfile" | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
}

# build_k8s_binaries DIR BINARY...: binaries of k8s.io/kubernetes's cmd/,
# all from one throwaway module (so the module and build caches serve
# every one after the first), stamped with the version.
build_k8s_binaries() {
	local dir=$1 gomod minor ld b
	shift
	if built "$dir"; then log "kubernetes ${K8S_VERSION} $*: cached in $dir"; return; fi
	log "kubernetes ${K8S_VERSION}: building $* (the first build takes 5-10 minutes)"
	mkdir -p "$dir"
	gomod=$(k8s_gomod)
	minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	ld="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"
	for b in "$@"; do
		build_in_module "$dir" "$gomod" "$b" "k8s.io/kubernetes/cmd/$b" "$ld"
	done
	touch "$dir/.complete"
}

build_k8s() { build_k8s_binaries "$ROOT/kubernetes-${K8S_VERSION}" kube-apiserver kube-controller-manager kubectl; }

# The real-node lane's kubelet and kube-scheduler.
build_k8s_node() { build_k8s_binaries "$ROOT/kubernetes-node-${K8S_VERSION}" kubelet kube-scheduler; }

# The real-node lane's base images' contents, without Docker: the pause
# program from Kubernetes' own build/pause/linux/pause.c (gcc -static, as
# Kubernetes builds it) and Debian's busybox-static (downloaded, unpacked,
# never installed). tests/framework packs each into an OCI image archive.
build_node_images() {
	local dir="$ROOT/node-images-${K8S_VERSION}"
	if built "$dir"; then log "node images: cached in $dir"; return; fi
	command -v gcc >/dev/null || die "node images: gcc is needed to build pause"
	command -v apt-get >/dev/null || die "node images: apt-get is needed to download busybox-static"
	log "node images: pause ${K8S_VERSION} (gcc -static), busybox (Debian's busybox-static)"
	local src work
	src=$(module_path Dir "k8s.io/kubernetes@${K8S_VERSION}")
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	rm -rf "$dir"
	mkdir -p "$dir"
	gcc -Os -Wall -Werror -static -DVERSION="${K8S_VERSION}" -o "$dir/pause" "$src/build/pause/linux/pause.c" ||
		die "building pause failed"
	apt_download "$work" busybox-static
	dpkg -x "$work"/busybox-static_*.deb "$work/bb"
	cp "$work/bb/bin/busybox" "$dir/busybox"
	touch "$dir/.complete"
}

# The real-node lane's guest kernel: Debian's cloud kernel (the
# distribution's current one: Debian serves only that), its vmlinuz and the
# virtio modules a guest needs for its NICs and disks, and ISO 9660 (the
# NoCloud disk KubeVirt makes for cloud-init), unpacked from the package,
# never installed. tests/framework builds the guests' initramfs around them.
# The modules are loaded in this order: each after those it depends on. The
# cache is rebuilt when the list changes.
GUEST_KERNEL_PACKAGE=linux-image-cloud-amd64
GUEST_KERNEL_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net virtio_blk cdrom isofs"
build_guest_kernel() {
	local dir="$ROOT/guest-kernel"
	if built "$dir" && [[ "$(cat "$dir/modules/order" 2>/dev/null)" == "$GUEST_KERNEL_MODULES" ]]; then
		log "guest kernel: cached in $dir"
		return
	fi
	command -v apt-get >/dev/null || die "guest kernel: apt-get is needed to download ${GUEST_KERNEL_PACKAGE}"
	log "guest kernel: Debian's ${GUEST_KERNEL_PACKAGE}"
	local work pkg m ko
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	apt_download "$work" "$GUEST_KERNEL_PACKAGE"
	pkg=$(dpkg-deb -f "$work"/"${GUEST_KERNEL_PACKAGE}"_*.deb Depends | tr ',' '\n' | grep -o 'linux-image-[^ ]*' | head -1)
	[[ -n "$pkg" ]] || die "guest kernel: ${GUEST_KERNEL_PACKAGE} depends on no linux-image package"
	apt_download "$work" "$pkg"
	rm -rf "$dir"
	mkdir -p "$dir/modules" "$work/x"
	dpkg -x "$work/${pkg}"_*.deb "$work/x"
	cp "$work"/x/boot/vmlinuz-* "$dir/vmlinuz"
	for m in $GUEST_KERNEL_MODULES; do
		ko=$(find "$work/x/lib/modules" -name "$m.ko" | head -1)
		[[ -n "$ko" ]] || die "guest kernel: $pkg has no module $m.ko"
		cp "$ko" "$dir/modules/"
	done
	echo "$GUEST_KERNEL_MODULES" >"$dir/modules/order"
	echo "$pkg" >"$dir/package"
	touch "$dir/.complete"
}

build_etcd() {
	local dir="$ROOT/etcd-${ETCD_VERSION}"
	if built "$dir"; then log "etcd ${ETCD_VERSION}: cached in $dir"; return; fi
	log "etcd ${ETCD_VERSION}: building"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/etcd
go 1.24.0
require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
replace go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 ${ETCD_VERSION}
replace go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 ${ETCD_VERSION}
replace go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 ${ETCD_VERSION}
replace go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 ${ETCD_VERSION}"
	MAIN_GO='package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }' build_in_module "$dir" "$gomod" etcd "./"
	touch "$dir/.complete"
}

build_cni_plugins() {
	local dir="$ROOT/cni-plugins-${CNI_PLUGINS_VERSION}"
	if built "$dir"; then log "CNI plugins ${CNI_PLUGINS_VERSION}: cached in $dir"; return; fi
	log "CNI reference plugins ${CNI_PLUGINS_VERSION}: building bridge, macvlan, loopback, host-local"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/cni
go 1.24.0
require github.com/containernetworking/plugins ${CNI_PLUGINS_VERSION}"
	for p in main/bridge main/macvlan main/loopback ipam/host-local; do
		build_in_module "$dir" "$gomod" "${p#*/}" "github.com/containernetworking/plugins/plugins/$p"
	done
	touch "$dir/.complete"
}

build_multus() {
	local dir="$ROOT/multus-${MULTUS_VERSION}"
	if built "$dir"; then log "multus ${MULTUS_VERSION}: cached in $dir"; return; fi
	log "Multus ${MULTUS_VERSION}: building the thin plugin and its DaemonSet's entrypoints"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/multus
go 1.24.0
require gopkg.in/k8snetworkplumbingwg/multus-cni.v4 ${MULTUS_VERSION}"
	build_in_module "$dir" "$gomod" multus "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
	# The entrypoint of Multus' thin-plugin DaemonSet, which writes its
	# configuration and kubeconfig onto the node (the real-node lane runs it).
	# The entrypoints of Multus' thin-plugin DaemonSet and the passthru
	# plugin its image carries, with the module's own DaemonSet manifest:
	# the real-node lane deploys Multus as its users do.
	build_in_module "$dir" "$gomod" thin_entrypoint "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/thin_entrypoint"
	build_in_module "$dir" "$gomod" install_multus "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/install_multus"
	build_in_module "$dir" "$gomod" passthru "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/passthru-cni"
	local src
	src=$(module_path Dir "gopkg.in/k8snetworkplumbingwg/multus-cni.v4@${MULTUS_VERSION}")
	install -m 0644 "$src/deployments/multus-daemonset.yml" "$dir/multus-daemonset.yml"
	touch "$dir/.complete"
}

build_controller_gen() {
	local dir="$ROOT/controller-gen-${CONTROLLER_TOOLS_VERSION}"
	if built "$dir"; then log "controller-gen ${CONTROLLER_TOOLS_VERSION}: cached in $dir"; return; fi
	log "controller-gen ${CONTROLLER_TOOLS_VERSION}: building"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/controllergen
go 1.24.0
require sigs.k8s.io/controller-tools ${CONTROLLER_TOOLS_VERSION}"
	build_in_module "$dir" "$gomod" controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen"
	touch "$dir/.complete"
}

build_golangci_lint() {
	local dir="$ROOT/golangci-lint-${GOLANGCI_LINT_VERSION}"
	if built "$dir"; then log "golangci-lint ${GOLANGCI_LINT_VERSION}: cached in $dir"; return; fi
	log "golangci-lint ${GOLANGCI_LINT_VERSION}: building"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/golangcilint
go 1.24.0
require github.com/golangci/golangci-lint/v2 ${GOLANGCI_LINT_VERSION}"
	build_in_module "$dir" "$gomod" golangci-lint "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	touch "$dir/.complete"
}

# whereabouts, the IPAM plugin `make bench` compares against, with its CRDs
# (copied from the module's doc/crds) next to the binary. Its go.mod pins
# gogo/protobuf with a replace, which a requiring module must repeat.
build_whereabouts() {
	local dir="$ROOT/whereabouts-${WHEREABOUTS_VERSION}"
	if built "$dir"; then log "whereabouts ${WHEREABOUTS_VERSION}: cached in $dir"; return; fi
	log "whereabouts ${WHEREABOUTS_VERSION}: building the IPAM plugin"
	mkdir -p "$dir/crds"
	local gomod="module ipkeeper.tools/whereabouts
go 1.25.5
require github.com/k8snetworkplumbingwg/whereabouts ${WHEREABOUTS_VERSION}
replace github.com/gogo/protobuf => github.com/gogo/protobuf v1.3.2"
	build_in_module "$dir" "$gomod" whereabouts "github.com/k8snetworkplumbingwg/whereabouts/cmd"
	local src
	src=$(module_path Dir "github.com/k8snetworkplumbingwg/whereabouts@${WHEREABOUTS_VERSION}")
	[[ -d "$src/doc/crds" ]] || die "no doc/crds in github.com/k8snetworkplumbingwg/whereabouts@${WHEREABOUTS_VERSION}"
	cp "$src"/doc/crds/whereabouts.cni.cncf.io_*.yaml "$dir/crds/"
	touch "$dir/.complete"
}

# kubevirt_gomod: a module requiring kubevirt.io/kubevirt with the module's
# own replace block, except that its staging modules (kubevirt.io/api,
# kubevirt.io/client-go, local paths there) come from the proxy at the same
# version.
kubevirt_gomod() {
	local modfile
	modfile=$(module_path GoMod "kubevirt.io/kubevirt@${KUBEVIRT_VERSION}")
	echo "module ipkeeper.tools/kubevirt"
	echo "go 1.24.0"
	echo "require kubevirt.io/kubevirt ${KUBEVIRT_VERSION}"
	awk '/^replace \(/{in_block=1; next} in_block && /^\)/{in_block=0} in_block && NF' "$modfile" |
		grep -v '=> \./staging' | sed 's/^[[:space:]]*/replace /'
	echo "replace kubevirt.io/api => kubevirt.io/api ${KUBEVIRT_VERSION}"
	echo "replace kubevirt.io/client-go => kubevirt.io/client-go ${KUBEVIRT_VERSION}"
}

# The CRDs virt-operator would install, written one file per CRD by the
# module's own constructors, so the CRDs always match the binary.
KUBEVIRT_CRDGEN_GO='package main

import (
	"fmt"
	"os"
	"path/filepath"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

func main() {
	dir := os.Args[1]
	for _, f := range []func() (*extv1.CustomResourceDefinition, error){
		components.NewVirtualMachineInstanceCrd, components.NewVirtualMachineCrd, components.NewPresetCrd,
		components.NewReplicaSetCrd, components.NewVirtualMachineInstanceMigrationCrd, components.NewKubeVirtCrd,
		components.NewVirtualMachinePoolCrd, components.NewVirtualMachineSnapshotCrd,
		components.NewVirtualMachineSnapshotContentCrd, components.NewVirtualMachineRestoreCrd,
		components.NewVirtualMachineExportCrd, components.NewVirtualMachineInstancetypeCrd,
		components.NewVirtualMachineClusterInstancetypeCrd, components.NewVirtualMachinePreferenceCrd,
		components.NewVirtualMachineClusterPreferenceCrd, components.NewMigrationPolicyCrd,
		components.NewVirtualMachineCloneCrd, components.NewVirtualMachineBackupCrd,
		components.NewVirtualMachineBackupTrackerCrd,
	} {
		crd, err := f()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		crd.TypeMeta.APIVersion, crd.TypeMeta.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
		out, err := yaml.Marshal(crd)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, crd.Name+".yaml"), out, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}'

# What virt-operator would install for virt-handler, rendered by its own
# code (components, rbac) so that the lane runs virt-handler as KubeVirt
# deploys it: the DaemonSet, its ServiceAccount and roles, the CA and
# virt-handler's certificates (made when the program runs, valid for a day)
# the CA bundle ConfigMap and KubeVirt's PriorityClass. Usage:
# node-manifests NAMESPACE REGISTRY TAG [emulation] (emulation: the node
# labeller prefers QEMU's emulation to KVM).
KUBEVIRT_NODEGEN_GO='package main

import (
	"fmt"
	"os"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
	"kubevirt.io/kubevirt/pkg/virt-operator/util"
)

func main() {
	if len(os.Args) != 4 && (len(os.Args) != 5 || os.Args[4] != "emulation") {
		fmt.Fprintln(os.Stderr, "usage: node-manifests NAMESPACE REGISTRY TAG [emulation]")
		os.Exit(2)
	}
	ns, registry, tag := os.Args[1], os.Args[2], os.Args[3]
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubevirt"},
		Spec: v1.KubeVirtSpec{ImageRegistry: registry, ImageTag: tag}}
	config := util.GetTargetConfigFromKV(kv)
	ds := components.NewHandlerDaemonSet(config, "", "", "")
	if len(os.Args) == 5 {
		for i := range ds.Spec.Template.Spec.InitContainers[0].Env {
			if e := &ds.Spec.Template.Spec.InitContainers[0].Env[i]; e.Name == "PREFERRED_VIRTTYPE" {
				e.Value = "qemu"
			}
		}
	}
	objs := []any{components.NewKubeVirtPriorityClassCR(), ds}
	for _, o := range rbac.GetAllHandler(ns) {
		objs = append(objs, o)
	}
	day := &metav1.Duration{Duration: 24 * time.Hour}
	ca := components.NewCACertSecrets(ns)[0]
	if err := components.PopulateSecretWithCertificate(ca, nil, day); err != nil {
		fail(err)
	}
	caCert, err := components.LoadCertificates(ca)
	if err != nil {
		fail(err)
	}
	objs = append(objs, ca)
	for _, s := range components.NewCertSecrets(ns, ns) {
		if s.Name != components.VirtHandlerCertSecretName && s.Name != components.VirtHandlerServerCertSecretName &&
			s.Name != components.VirtHandlerMigrationClientCertSecretName && s.Name != components.VirtHandlerVsockClientCertSecretName {
			continue
		}
		if err := components.PopulateSecretWithCertificate(s, caCert, day); err != nil {
			fail(err)
		}
		objs = append(objs, s)
	}
	for _, cm := range components.NewCAConfigMaps(ns) {
		if cm.Name == components.KubeVirtCASecretName {
			cm.Data = map[string]string{components.CABundleKey: string(ca.Data[k8sv1.TLSCertKey])}
			objs = append(objs, cm)
		}
	}
	for _, o := range objs {
		out, err := yaml.Marshal(o)
		if err != nil {
			fail(err)
		}
		fmt.Printf("---\n%s", out)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "node-manifests:", err)
	os.Exit(1)
}'

build_kubevirt() {
	local dir="$ROOT/kubevirt-${KUBEVIRT_VERSION}"
	if built "$dir"; then log "kubevirt ${KUBEVIRT_VERSION}: cached in $dir"; return; fi
	log "KubeVirt ${KUBEVIRT_VERSION}: building virt-controller and generating its CRDs (first build takes several minutes)"
	mkdir -p "$dir"
	local gomod pin
	gomod=$(kubevirt_gomod)
	pin="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kubevirt-${KUBEVIRT_VERSION}.go.sum"
	[[ -f "$pin" ]] || die "no $pin: pin the go.sum lines of the modules in KUBEVIRT_NOSUMDB ($KUBEVIRT_NOSUMDB) for ${KUBEVIRT_VERSION}"
	GOSUM_PIN=$pin NOSUMDB=$KUBEVIRT_NOSUMDB \
		build_in_module "$dir" "$gomod" virt-controller "kubevirt.io/kubevirt/cmd/virt-controller"
	GOSUM_PIN=$pin NOSUMDB=$KUBEVIRT_NOSUMDB MAIN_GO=$KUBEVIRT_CRDGEN_GO \
		build_in_module "$dir" "$gomod" crdgen "./"
	rm -rf "$dir/crds" && mkdir -p "$dir/crds"
	"$dir/crdgen" "$dir/crds" || die "generating the KubeVirt CRDs failed"
	rm -f "$dir/crdgen"
	touch "$dir/.complete"
}

# KubeVirt's node side (see KUBEVIRT_NODE_CGO above), into one directory:
# the programs, flat, by name, and launcher-files/, the files of KubeVirt's
# virt-launcher image that come from the module (its qemu.conf and
# virtqemud.conf, the qemu hook, node-labeller.sh, nsswitch.conf), laid out
# as in that image; tests/framework assembles the launcher image from them
# and the launcher rootfs (the programs go to /usr/bin).
build_kubevirt_node() {
	local dir
	dir=$(kubevirt_node_dir)
	if built "$dir"; then log "kubevirt node ${KUBEVIRT_VERSION}: cached in $dir"; return; fi
	command -v gcc >/dev/null || { unmet kubevirt-node "gcc is needed (cgo)"; return; }
	pkg-config --exists libvirt 2>/dev/null || { unmet kubevirt-node "virt-launcher links libvirt: install libvirt-dev and pkg-config"; return; }
	[[ -f /usr/include/linux/kvm.h ]] || { unmet kubevirt-node "virt-handler needs the kernel headers: install linux-libc-dev"; return; }
	log "KubeVirt ${KUBEVIRT_VERSION} node side: building ${KUBEVIRT_NODE_CGO} ${KUBEVIRT_NODE_PURE} container-disk (first build takes several minutes)"
	local hack gomod pin ld src b f work
	hack="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	pin="$hack/kubevirt-${KUBEVIRT_VERSION}.go.sum"
	[[ -f "$pin" ]] || die "no $pin: pin the go.sum lines of the modules in KUBEVIRT_NOSUMDB ($KUBEVIRT_NOSUMDB) for ${KUBEVIRT_VERSION}"
	[[ -f "$hack/stubs/libnbd/go.mod" ]] || die "no $hack/stubs/libnbd (the libnbd stub)"
	gomod="$(kubevirt_gomod)
replace libguestfs.org/libnbd => $hack/stubs/libnbd"
	src=$(module_path Dir "kubevirt.io/kubevirt@${KUBEVIRT_VERSION}")
	local patches=()
	for f in "$hack"/kubevirt-patches/*.patch; do [[ -f "$f" ]] && patches+=("$f"); done
	if ((${#patches[@]})); then
		cp -r "$src" "$work/kubevirt" && chmod -R u+w "$work/kubevirt"
		for f in "${patches[@]}"; do
			log "  applying ${f#"$hack"/}"
			(cd "$work/kubevirt" && git apply -p1 "$f") ||
				die "kubevirt-node: $f does not apply to kubevirt.io/kubevirt@${KUBEVIRT_VERSION}"
		done
		gomod+=$'\n'"replace kubevirt.io/kubevirt => $work/kubevirt"
	fi
	ld="-X kubevirt.io/client-go/version.gitVersion=${KUBEVIRT_VERSION} -X kubevirt.io/client-go/version.gitTreeState=clean"
	rm -rf "$dir"
	mkdir -p "$dir"
	for b in $KUBEVIRT_NODE_CGO; do
		CGO=1 GOSUM_PIN=$pin NOSUMDB=$KUBEVIRT_NOSUMDB \
			build_in_module "$dir" "$gomod" "${b##*/}" "kubevirt.io/kubevirt/cmd/$b" "$ld"
	done
	for b in $KUBEVIRT_NODE_PURE; do
		GOSUM_PIN=$pin NOSUMDB=$KUBEVIRT_NOSUMDB \
			build_in_module "$dir" "$gomod" "${b##*/}" "kubevirt.io/kubevirt/cmd/$b" "$ld"
	done
	gcc -O2 -static -o "$dir/container-disk" "$src/cmd/container-disk-v2alpha/main.c" || die "building container-disk failed"
	GOSUM_PIN=$pin NOSUMDB=$KUBEVIRT_NOSUMDB MAIN_GO=$KUBEVIRT_NODEGEN_GO \
		build_in_module "$dir" "$gomod" node-manifests "./"
	for f in etc/libvirt/qemu.conf:cmd/virt-launcher/qemu.conf etc/libvirt/virtqemud.conf:cmd/virt-launcher/virtqemud.conf \
		etc/libvirt/hooks/qemu:cmd/virt-launcher/qemu etc/nsswitch.conf:cmd/virt-launcher/nsswitch.conf \
		usr/bin/node-labeller.sh:cmd/virt-launcher/node-labeller/node-labeller.sh; do
		install -D -m "$([[ $f == *hooks/qemu:* || $f == *.sh:* ]] && echo 0755 || echo 0644)" \
			"$src/${f#*:}" "$dir/launcher-files/${f%%:*}"
	done
	touch "$dir/.complete"
}

# launcher_mirror prints the first Debian mirror of the machine's apt
# sources (one-line .list and deb822 .sources files) that serves
# LAUNCHER_SUITE: the build uses the mirror the machine is configured with,
# and none is written into the checkout.
launcher_mirror() {
	local f uris=() uri
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f "$f" ]] || continue
		while read -r uri; do uris+=("$uri"); done < <(
			sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' "$f")
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f "$f" ]] || continue
		while read -r uri; do uris+=("$uri"); done < <(awk '
			BEGIN { RS = ""; FS = "\n" }
			{ deb = 0; enabled = 1; u = ""
			  for (i = 1; i <= NF; i++) {
				if ($i ~ /^[Tt]ypes:/ && $i ~ /[[:space:]]deb([[:space:]]|$)/) deb = 1
				if ($i ~ /^[Ee]nabled:[[:space:]]*[Nn]o/) enabled = 0
				if ($i ~ /^URIs:/) { u = $i; sub(/^URIs:[[:space:]]*/, "", u) }
			  }
			  if (deb && enabled) { n = split(u, a, /[[:space:]]+/); for (j = 1; j <= n; j++) if (a[j] != "") print a[j] } }' "$f")
	done
	for uri in "${uris[@]}"; do
		uri=${uri%/}
		if curl -fsSL --max-time 20 -o /dev/null "$uri/dists/${LAUNCHER_SUITE}/Release" 2>/dev/null; then
			echo "$uri"
			return 0
		fi
	done
	return 1
}

# debootstrap_rootfs COMPONENT DIR PACKAGES...: DIR/rootfs, debootstrap
# --variant=minbase of LAUNCHER_SUITE from the machine's own mirror plus
# PACKAGES (apt, no recommends); DIR/packages.txt lists what was installed,
# with versions; documentation, manual pages, locales, logs and apt's
# caches removed. The caller finishes the tree and marks DIR complete.
debootstrap_rootfs() {
	local component=$1 dir=$2 mirror proxy="" rootfs="$2/rootfs"
	shift 2
	mirror=$(launcher_mirror) ||
		die "$component: no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/*.{list,sources} serves dists/${LAUNCHER_SUITE}: add a deb line (or deb822 stanza) for one"
	eval "$(apt-config shell proxy Acquire::http::Proxy)"
	log "$component: debootstrap --variant=minbase ${LAUNCHER_SUITE} from $mirror, with $*"
	rm -rf "$dir"
	mkdir -p "$dir"
	export http_proxy=${proxy:-${http_proxy:-}}
	debootstrap --variant=minbase "$LAUNCHER_SUITE" "$rootfs" "$mirror" >"$dir/build.log" 2>&1 ||
		die "$component: debootstrap failed (log: $dir/build.log, and $rootfs/debootstrap/debootstrap.log)"
	# apt, not debootstrap --include, installs the packages: debootstrap
	# orders systemd's pre-dependency wrongly. In a mount namespace of its
	# own, so that the chroot's /proc is gone when it ends; no service starts.
	printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d" && chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
	# shellcheck disable=SC2016
	unshare --mount --propagation private -- sh -c 'r=$1 && shift && mount -t proc proc "$r/proc" &&
		chroot "$r" apt-get -qq update && DEBIAN_FRONTEND=noninteractive chroot "$r" apt-get -qq install -y --no-install-recommends "$@"' \
		sh "$rootfs" "$@" >>"$dir/build.log" 2>&1 ||
		die "$component: installing $* failed (log: $dir/build.log)"
	rm -f "$rootfs/usr/sbin/policy-rc.d"
	# shellcheck disable=SC2016
	chroot "$rootfs" dpkg-query -W -f '${Package} ${Version}\n' >"$dir/packages.txt"
	find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
	find "$rootfs/var/log" -type f -delete
	rm -rf "$rootfs"/usr/share/{man,info,locale,lintian,linda} "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* \
		"$rootfs/debootstrap"
}

# The virt-launcher image's root filesystem (see LAUNCHER_PACKAGES above):
# /var/run the relative link ../run (virt-handler reads
# /proc/<pid>/root/var/run, which an absolute link would resolve in its own
# root), the qemu user and group (107, as in KubeVirt's image, named by its
# qemu.conf), the virtqemud shim.
build_launcher_rootfs() {
	local dir="$ROOT/kubevirt-launcher-rootfs-${LAUNCHER_SUITE}-${LAUNCHER_ROOTFS_REVISION}"
	if built "$dir"; then log "launcher rootfs ${LAUNCHER_SUITE}-${LAUNCHER_ROOTFS_REVISION}: cached in $dir"; return; fi
	[[ $(id -u) -eq 0 ]] || { unmet launcher-rootfs "debootstrap needs root"; return; }
	command -v debootstrap >/dev/null || { unmet launcher-rootfs "install debootstrap"; return; }
	local rootfs="$dir/rootfs" hack
	hack="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
	# shellcheck disable=SC2086
	debootstrap_rootfs launcher-rootfs "$dir" $LAUNCHER_PACKAGES
	[[ -x "$rootfs/usr/sbin/libvirtd" ]] || die "launcher-rootfs: no /usr/sbin/libvirtd in the packages"
	[[ ! -e "$rootfs/usr/sbin/virtqemud" ]] || die "launcher-rootfs: ${LAUNCHER_SUITE} ships /usr/sbin/virtqemud now: drop the shim"
	rm -rf "$rootfs/var/run" && ln -s ../run "$rootfs/var/run"
	grep -q '^qemu:' "$rootfs/etc/group" || echo 'qemu:x:107:' >>"$rootfs/etc/group"
	grep -q '^qemu:' "$rootfs/etc/passwd" || echo 'qemu:x:107:107:qemu:/home/qemu:/bin/bash' >>"$rootfs/etc/passwd"
	mkdir -p "$rootfs/home/qemu" "$rootfs/usr/libexec/ipkeeper" && chown 107:107 "$rootfs/home/qemu"
	ln -sfn /usr/sbin/libvirtd "$rootfs/usr/libexec/ipkeeper/virtqemud"
	install -m 0755 "$hack/launcher-rootfs/virtqemud" "$rootfs/usr/sbin/virtqemud"
	log "launcher rootfs: $(du -sh "$rootfs" | cut -f1) in $rootfs"
	touch "$dir/.complete"
}

# The cloud-init guest's root filesystem (see GUEST_ROOTFS_PACKAGES above):
# tests/framework packs it, with its own /init, into the guest's initramfs.
build_guest_rootfs() {
	local dir="$ROOT/guest-rootfs-${LAUNCHER_SUITE}-${GUEST_ROOTFS_REVISION}"
	if built "$dir"; then log "guest rootfs ${LAUNCHER_SUITE}-${GUEST_ROOTFS_REVISION}: cached in $dir"; return; fi
	[[ $(id -u) -eq 0 ]] || { unmet guest-rootfs "debootstrap needs root"; return; }
	command -v debootstrap >/dev/null || { unmet guest-rootfs "install debootstrap"; return; }
	# shellcheck disable=SC2086
	debootstrap_rootfs guest-rootfs "$dir" $GUEST_ROOTFS_PACKAGES
	[[ -x "$dir/rootfs/usr/bin/cloud-init" && -x "$dir/rootfs/usr/sbin/ifup" ]] || die "guest-rootfs: no cloud-init or ifup in the packages"
	log "guest rootfs: $(du -sh "$dir/rootfs" | cut -f1) in $dir/rootfs"
	touch "$dir/.complete"
}

# ipam-extensions: its source from IPKEEPER_THIRD_PARTY_DIR or GitHub, built
# in its own module tree with the one replace above. Its install.yaml (RBAC,
# webhook) is kept next to the binary: the tests run it with that RBAC.
build_ipam_extensions() {
	local dir="$ROOT/ipam-extensions-${IPAM_EXTENSIONS_VERSION}"
	if built "$dir"; then log "ipam-extensions ${IPAM_EXTENSIONS_VERSION}: cached in $dir"; return; fi
	log "ipam-extensions ${IPAM_EXTENSIONS_VERSION}: building the manager (about a minute)"
	local work archive="ipam-extensions-${IPAM_EXTENSIONS_VERSION}.tar.gz"
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	# A machine may keep these sources next to the checkout (../shared/third_party).
	if [[ -z "${IPKEEPER_THIRD_PARTY_DIR:-}" ]]; then
		local beside
		beside="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared/third_party"
		[[ -f "$beside/$archive" ]] && IPKEEPER_THIRD_PARTY_DIR=$(cd "$beside" && pwd)
	fi
	if [[ -n "${IPKEEPER_THIRD_PARTY_DIR:-}" && -f "$IPKEEPER_THIRD_PARTY_DIR/$archive" ]]; then
		log "  source: $IPKEEPER_THIRD_PARTY_DIR/$archive"
		echo "${IPAM_EXTENSIONS_SHA256}  $IPKEEPER_THIRD_PARTY_DIR/$archive" | sha256sum -c --quiet - ||
			die "$IPKEEPER_THIRD_PARTY_DIR/$archive does not match its pinned sha256"
		cp "$IPKEEPER_THIRD_PARTY_DIR/$archive" "$work/src.tar.gz"
	else
		local url="https://github.com/kubevirt/ipam-extensions/archive/refs/tags/${IPAM_EXTENSIONS_VERSION}.tar.gz"
		log "  source: $url (set IPKEEPER_THIRD_PARTY_DIR to a directory holding $archive to build offline)"
		curl -fsSL --retry 3 -o "$work/src.tar.gz" "$url" || die "downloading $url failed"
	fi
	mkdir "$work/src"
	tar -xzf "$work/src.tar.gz" -C "$work/src" --strip-components=1
	[[ -f "$work/src/cmd/main.go" && -f "$work/src/dist/install.yaml" ]] || die "$archive is not an ipam-extensions source tree"
	mkdir -p "$dir"
	(cd "$work/src" &&
		go mod edit -replace "github.com/k8snetworkplumbingwg/ipamclaims=github.com/k8snetworkplumbingwg/ipamclaims@${IPAM_EXTENSIONS_IPAMCLAIMS}" &&
		GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w" -o "$dir/manager" ./cmd) ||
		die "building ipam-extensions failed"
	cp "$work/src/dist/install.yaml" "$dir/install.yaml"
	touch "$dir/.complete"
}

build_helm() {
	local dir="$ROOT/helm-${HELM_VERSION}"
	if built "$dir"; then log "helm ${HELM_VERSION}: cached in $dir"; return; fi
	log "helm ${HELM_VERSION}: building"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/helm
go 1.24.0
require helm.sh/helm/v3 ${HELM_VERSION}"
	build_in_module "$dir" "$gomod" helm "helm.sh/helm/v3/cmd/helm" \
		"-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
	touch "$dir/.complete"
}

# promtool only (not the Prometheus server): `promtool test rules` runs the
# alert rules' unit tests, `promtool check rules` their syntax.
build_promtool() {
	local dir="$ROOT/promtool-${PROMETHEUS_VERSION}"
	if built "$dir"; then log "promtool ${PROMETHEUS_VERSION}: cached in $dir"; return; fi
	log "promtool ${PROMETHEUS_VERSION}: building"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/promtool
go 1.24.0
require github.com/prometheus/prometheus ${PROMETHEUS_VERSION}"
	build_in_module "$dir" "$gomod" promtool "github.com/prometheus/prometheus/cmd/promtool"
	touch "$dir/.complete"
}

build_kubeconform() {
	local dir="$ROOT/kubeconform-${KUBECONFORM_VERSION}"
	if built "$dir"; then log "kubeconform ${KUBECONFORM_VERSION}: cached in $dir"; return; fi
	log "kubeconform ${KUBECONFORM_VERSION}: building"
	mkdir -p "$dir"
	local gomod="module ipkeeper.tools/kubeconform
go 1.24.0
require github.com/yannh/kubeconform ${KUBECONFORM_VERSION}"
	build_in_module "$dir" "$gomod" kubeconform "github.com/yannh/kubeconform/cmd/kubeconform"
	touch "$dir/.complete"
}

# The inputs of the manifests' schema check (hack/kubeconform.sh): the
# Kubernetes swagger.json and the Prometheus Operator's CRDs (crds/).
build_kube_schemas() {
	local dir="$ROOT/kube-schemas-${K8S_VERSION}-prometheus-operator-${PROMETHEUS_OPERATOR_VERSION}"
	if built "$dir"; then log "kube-schemas ${K8S_VERSION}, prometheus-operator ${PROMETHEUS_OPERATOR_VERSION}: cached in $dir"; return; fi
	build_controller_gen
	log "kube-schemas: the swagger.json of Kubernetes ${K8S_VERSION}, the CRDs of prometheus-operator ${PROMETHEUS_OPERATOR_VERSION}"
	mkdir -p "$dir"
	local src work mod="github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"
	src=$(module_path Dir "k8s.io/kubernetes@${K8S_VERSION}")
	cp "$src/api/openapi-spec/swagger.json" "$dir/swagger.json"
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	printf 'module ipkeeper.tools/promcrds\ngo 1.24.0\nrequire %s %s\n' "$mod" "$PROMETHEUS_OPERATOR_VERSION" >"$work/go.mod"
	printf 'package main\n\nimport _ "%s/v1"\n\nfunc main() {}\n' "$mod" >"$work/main.go"
	rm -rf "$dir/crds"
	(cd "$work" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod tidy &&
		GOFLAGS=-mod=mod GOTOOLCHAIN=local "$ROOT/controller-gen-${CONTROLLER_TOOLS_VERSION}/controller-gen" \
			crd:allowDangerousTypes=true paths="$mod/v1" output:crd:dir="$dir/crds") ||
		die "generating the prometheus-operator CRDs failed"
	touch "$dir/.complete"
}

# netplan's generator, from the Debian packages apt can download (the
# machine's sources), unpacked into the cache: nothing is installed. Its
# shared library sits next to it (run it with LD_LIBRARY_PATH, as
# tests/framework.Netplan does).
build_netplan() {
	local dir="$ROOT/netplan"
	if built "$dir"; then log "netplan: cached in $dir"; return; fi
	command -v apt-get >/dev/null || die "netplan: apt-get is needed to download ${NETPLAN_DEBS}"
	log "netplan: downloading ${NETPLAN_DEBS}"
	local work
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	# shellcheck disable=SC2086
	apt_download "$work" $NETPLAN_DEBS
	rm -rf "$dir"
	mkdir -p "$dir"
	local deb
	for deb in "$work"/*.deb; do
		dpkg -x "$deb" "$dir"
	done
	local lib
	lib=$(cd "$dir/usr/lib" && ls -d ./*/libnetplan.so.0.* | head -1)
	[[ -n "$lib" ]] || die "netplan: no libnetplan.so in the packages"
	ln -sf "$(basename "$lib")" "$dir/usr/lib/$(dirname "$lib")/libnetplan.so.0"
	[[ -x "$dir/usr/libexec/netplan/generate" ]] || die "netplan: no usr/libexec/netplan/generate in the packages"
	touch "$dir/.complete"
}

components=("$@")
[[ ${#components[@]} -gt 0 ]] || DEFAULT_LIST=1 components=(etcd kubernetes kubernetes-node node-images guest-kernel cni-plugins multus controller-gen kubevirt kubevirt-node launcher-rootfs guest-rootfs whereabouts ipam-extensions helm promtool kubeconform netplan)
for c in "${components[@]}"; do
	case "$c" in
	etcd) build_etcd ;;
	kubernetes) build_k8s ;;
	kubernetes-node) build_k8s_node ;;
	node-images) build_node_images ;;
	guest-kernel) build_guest_kernel ;;
	cni-plugins) build_cni_plugins ;;
	multus) build_multus ;;
	controller-gen) build_controller_gen ;;
	golangci-lint) build_golangci_lint ;;
	whereabouts) build_whereabouts ;;
	kubevirt) build_kubevirt ;;
	kubevirt-node) build_kubevirt_node ;;
	launcher-rootfs) build_launcher_rootfs ;;
	guest-rootfs) build_guest_rootfs ;;
	ipam-extensions) build_ipam_extensions ;;
	helm) build_helm ;;
	promtool) build_promtool ;;
	kubeconform) build_kubeconform ;;
	netplan) build_netplan ;;
	kube-schemas) build_kube_schemas ;;
	*) die "unknown component '$c' (known: etcd kubernetes kubernetes-node node-images guest-kernel cni-plugins multus controller-gen golangci-lint kubevirt kubevirt-node launcher-rootfs guest-rootfs whereabouts ipam-extensions helm promtool kubeconform kube-schemas)" ;;
	esac
done
log "all requested tools are in $ROOT"
