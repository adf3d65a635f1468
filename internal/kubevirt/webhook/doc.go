// SPDX-License-Identifier: Apache-2.0

// Package webhook is the virt-launcher pod mutating webhook: it adds an
// ipam-claim-reference to each network selection element of a launcher pod
// whose NAD allows persistent IPs, naming the claim the controller keeps for
// that (VM, network), so the IPAM (ipkeeper's, OVN-Kubernetes', or any that
// honours IPAMClaims) gives the VM the same addresses on every pod.
//
// It reads only the NADs the pod references, so a broken NAD elsewhere in
// the cluster never blocks a VM; a NAD the pod does use and that cannot be
// parsed denies the pod with a message naming the NAD and the field.
package webhook
