#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# What the test suites make outside the repository and must remove when
# they end: network namespaces and host interfaces (e2e sandboxes and
# bridges), temporary directories (control planes, agents, e2e and chaos
# clusters, benchmarks, real nodes), the real nodes' cgroups, and processes
# of the binaries they start.
#
#   hack/leftovers.sh snapshot FILE   record what exists now
#   hack/leftovers.sh check FILE      fail, listing them, if anything exists
#                                     now that FILE did not record
#
# `make test` takes the snapshot first and checks last, so what a
# developer's machine had before (another run's, killed) is not blamed.
set -euo pipefail

list() {
	if command -v ip >/dev/null; then
		ip netns list 2>/dev/null | awk '$1 ~ /^ipkc-/ {print "network namespace " $1}'
		ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^ipkc/ {sub(/@.*/, "", $2); print "interface " $2}'
	fi
	local d
	for d in /tmp/ipkeeper-controlplane-* /tmp/ipkeeper-lanes.* /tmp/ipk-agent-* /tmp/ipke2e-* /tmp/ipkchaos-* /tmp/ipkb-* /tmp/ipkn-* \
		/tmp/k8s_test_framework_* /tmp/envtest-serving-certs-*; do
		[[ -e $d ]] && echo "directory $d"
	done
	for d in /sys/fs/cgroup/*/ipkn-*; do
		[[ -e $d ]] && echo "cgroup $d"
	done
	local p
	for p in kube-apiserver etcd kube-controller-manager kube-scheduler kubelet containerd virt-controller ipkeeper-agent ipkeeper-controller; do
		pgrep -f -- "/$p( |\$)" | sed "s/^/process $p /" || true
	done
}

case "${1:-}" in
snapshot)
	list | sort >"$2"
	;;
check)
	left=$(comm -13 "$2" <(list | sort))
	if [[ -n $left ]]; then
		echo "make test left these behind:" >&2
		echo "$left" >&2
		exit 1
	fi
	echo "make test left nothing behind (network namespaces, interfaces, temporary directories, processes)"
	;;
*)
	echo "usage: $0 snapshot|check FILE" >&2
	exit 2
	;;
esac
