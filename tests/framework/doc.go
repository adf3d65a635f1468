// SPDX-License-Identifier: Apache-2.0

// Package framework starts a real local Kubernetes control plane for
// ipkeeper's integration and end-to-end tests: etcd and kube-apiserver
// (through controller-runtime's envtest) plus kube-controller-manager running
// the garbage collector and namespace controllers, so owner references and
// namespace deletion behave as on a cluster. All CRDs are installed, clients
// are handed out, component logs are captured (and printed when a test
// fails), and Stop tears everything down.
//
// The binaries are built at pinned versions by `make tools` (hack/tools.sh)
// into a cache outside the checkout. Nothing is mocked: KubeVirt is the one
// part that cannot run here, and tests that need it simulate what it writes.
package framework
