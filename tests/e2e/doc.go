// SPDX-License-Identifier: Apache-2.0

// Package e2e runs ipkeeper end to end, as root, on real network namespaces.
//
// TestMain builds cmd/ipkeeper, cmd/ipkeeper-agent and cmd/ipkeeper-controller
// from this checkout, starts the local control plane of tests/framework
// (etcd, kube-apiserver, kube-controller-manager) and on it the one harness
// every test shares: a Cluster (cluster.go) of three nodes, each with an
// ipkeeper-agent process and a CNI bin dir, and the ipkeeper-controller
// process with its webhook.
//
// Tests reach the agents in one of two ways, both through the real CNI
// reference plugins (bridge, macvlan) and the ipkeeper shim the agent
// installed, which forwards to the agent over its unix socket:
//
//   - as the kubelet and Multus: Cluster.RunPod runs the node's Multus for a
//     pod, and the cluster's kubelet loop tears sandboxes down when pods go;
//   - as a container runtime with a plugin list of its own: an Attachment
//     (cni.go) on one node drives libcni directly, so a test controls every
//     ADD and DEL (retries, late DELs, repeated IPAM steps).
//
// Pods are created bound to a node (spec.nodeName); no kubelet runs them.
//
// Run as root with `make test-e2e`, or `go test -count=1 -v ./tests/e2e/`.
// Without root every test skips, except with CI=true, where that is a failure.
package e2e
