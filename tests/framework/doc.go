// SPDX-License-Identifier: Apache-2.0

// Package framework starts a real local Kubernetes control plane for
// ipkeeper's integration, end-to-end, install and chaos tests: etcd and
// kube-apiserver (through controller-runtime's envtest) plus
// kube-controller-manager running the garbage collector and namespace
// controllers, so owner references and namespace deletion behave as on a
// cluster, and, with Options.VirtController, KubeVirt's own virt-controller
// (virtcontroller.go). All CRDs are installed, clients are handed out,
// component logs are captured (and printed when a test fails), and Stop
// tears everything down. It also runs ipkeeper's agent and controller, in
// the test process or as processes (agents.go, controller.go, agentproc.go,
// controllerproc.go), and an installation's manifests as processes
// (installed.go).
//
// The binaries are built at pinned versions by `make tools` (hack/tools.sh)
// into a cache outside the checkout. Only what runs on a node cannot run
// here: KubeVirt drives VMs through the real virt-controller and simulates
// the scheduler's binding, the kubelet (kubevirt_kubelet.go), Multus'
// network-status and dynamic networks controller, virt-api's VMI finalizer
// and virt-handler (kubevirt_handler.go); its VM lifecycle, live migration,
// NIC hotplug and NAD swap are in kubevirt_vm.go, kubevirt_migration.go,
// kubevirt_hotplug.go and kubevirt_swap.go. KubeVirt.Simulated names the
// simulated parts in each test's output.
package framework
