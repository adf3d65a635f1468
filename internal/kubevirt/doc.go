// SPDX-License-Identifier: Apache-2.0

// Package kubevirt holds what ipkeeper knows about KubeVirt's objects: which
// networks of a VM are Multus secondary networks, the pod interface name
// KubeVirt gives each, how a virt-launcher pod is recognised and tied to its
// VMI, and where the PersistentIPs feature gate is read. It has no controller
// logic, so the controller and the webhook agree on these facts.
package kubevirt
