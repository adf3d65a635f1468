// SPDX-License-Identifier: Apache-2.0

// Package guestnet keeps, for each VM that asks for it (the annotation
// ipkeeper.io/guest-network-config: "true"), a Secret with the cloud-init
// network configuration of its ipkeeper networks: network config version
// 2, each NIC matched by its MAC (the VM interface's own, else its claim's,
// package macaddr), with its claim's addresses, IPv4 and IPv6, and the
// routes and DNS of its network's definition. A VM references the Secret
// from a cloudInitNoCloud volume (networkDataSecretRef); KubeVirt mounts it
// into the launcher, so the guest finds its addresses at first boot.
//
// Why: KubeVirt's bridge binding hands the guest only IPv4, by its DHCP
// server; it cannot hand out the pod's IPv6 address, and SR-IOV or macvtap
// NICs get no DHCP at all. The claim is filled when it is made, so the
// Secret is ready before the VM's first boot.
//
// The Secret is written only when every ipkeeper network of the VM has a
// filled claim (a half-written configuration would boot the guest without
// an address), by server-side apply; ipkeeper-controller may create and
// patch Secrets, never read them, and the policy
// ipkeeper-controller-secrets limits it to the Secrets it labels.
package guestnet
