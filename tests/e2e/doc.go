// SPDX-License-Identifier: Apache-2.0

// Package e2e runs ipkeeper end to end, as root, on real network namespaces.
//
// TestMain builds cmd/ipkeeper and cmd/ipkeeper-agent from this checkout,
// starts the local control plane of tests/framework (etcd, kube-apiserver,
// kube-controller-manager), and runs one ipkeeper-agent for the package. The
// tests then drive the CNI reference plugins (bridge, macvlan) through libcni
// exactly as a container runtime would; those delegate IPAM to the ipkeeper
// shim the agent installed, which forwards to the agent over its unix socket.
//
// Only the kubelet is missing: Pod objects are created bound to the agent's
// node (spec.nodeName) and stay Pending, and the tests play the runtime.
//
// Run as root with `make test-e2e`, or `go test -count=1 -v ./tests/e2e/`.
// Without root every test skips, except with CI=true, where that is a failure.
package e2e
