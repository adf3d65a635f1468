// SPDX-License-Identifier: Apache-2.0

// Package claimstatus holds what ipkeeper reads and writes on IPAMClaims
// beyond their spec: the conditions (their type, reasons and messages),
// the annotations that ask for addresses or name the claim's NAD, and how
// status.ips entries are read. ipkeeper-controller writes a claim's status;
// the agent and the kubectl plugin read it.
package claimstatus

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionIPsAllocated is the condition the IPAM sets when it allocates
// a claim's addresses, with OVN-Kubernetes' type and reasons so tools
// reading claims work with either IPAM. ipkeeper-controller writes it when
// it fills the claim; an import of another IPAM's addresses writes it too.
const ConditionIPsAllocated = "IPsAllocated"

// Reasons of ConditionIPsAllocated.
const (
	ReasonAllocated = "SuccessfulAllocation"
	ReasonExhausted = "SubnetExhausted"
	ReasonConflict  = "IPAddressConflict"
	ReasonInternal  = "InternalError"
)

// ConditionInPool says whether the claim's addresses are ones their pool
// still hands out. False once a range was removed or an address excluded
// under it; the claim keeps the address all the same.
const ConditionInPool = "AddressesInPool"

// Reasons of ConditionInPool.
const (
	ReasonInPool    = "InPool"
	ReasonOutOfPool = "OutOfPool"
)

// InPool returns the ConditionInPool of a claim whose addresses in pools
// are outside them as listed (each "IP (why)"); none listed means True.
func InPool(pools []string, outside []string, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionInPool, Status: metav1.ConditionTrue, Reason: ReasonInPool,
		Message: fmt.Sprintf("every address is one IPPool %s hands out", strings.Join(quote(pools), ", ")), ObservedGeneration: generation}
	if len(outside) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonOutOfPool
		c.Message = fmt.Sprintf("IPPool %s no longer hands out %s; the claim keeps the address while it exists, and it is not handed to anyone else",
			strings.Join(quote(pools), ", "), strings.Join(outside, ", "))
	}
	return c
}

// Outside renders an address the pool no longer hands out, and why, for
// InPool's list; agent and controller alike, so they agree on the message.
func Outside(ip netip.Addr, why error) string {
	return fmt.Sprintf("%s (%v)", ip, why)
}

func quote(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// RequestedAnnotation, on an IPAMClaim, holds the addresses asked for on
// the claim's network (a JSON list of one address per IP family, bare or
// with a prefix length), or "invalid" when a VM's request could not be
// read. ipkeeper-controller sets it on the claims it makes for VMs, from
// the VM's network.kubevirt.io/addresses; on a claim made by hand or by
// another tool, whoever creates the claim sets it. Before the claim's
// first addresses, the controller reserves exactly these (or says in
// ConditionRequested why it cannot), never others.
const RequestedAnnotation = "ipkeeper.io/requested-addresses"

// LogicalNetworkAnnotation, on the IPAMClaims ipkeeper-controller makes
// for VMs, records the KubeVirt network name (spec.networks[].name), which
// a hashed claim name no longer shows; messages name the network by it.
const LogicalNetworkAnnotation = "ipkeeper.io/logical-network"

// NADAnnotation, on an IPAMClaim, names ("namespace/name") the
// NetworkAttachmentDefinition its network is attached through: the claim's
// addresses come from that NAD's pool. ipkeeper-controller sets it on the
// claims it makes for VMs; without it, the NADs of the claim's
// spec.network whose IPAM is ipkeeper say where (those of the claim's
// namespace first).
const NADAnnotation = "ipkeeper.io/network-attachment-definition"

// ParseIP reads an entry of a claim's status.ips: "10.0.0.5/24" (what
// IPAMs write) or a bare address.
func ParseIP(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("not an IP address or CIDR: %w", err)
	}
	return ip, nil
}

// ConditionRequested says whether the addresses the VM requested for the
// network are the claim's: True once reserved and recorded in status.ips.
const ConditionRequested = "RequestedAddresses"

// Reasons of ConditionRequested.
const (
	ReasonRequestedReserved = "Reserved"
	// ReasonRequestedOutsidePool: an address the pool does not hand out
	// (outside every range, the gateway, excluded) or of a family it lacks.
	ReasonRequestedOutsidePool = "OutsidePool"
	// ReasonRequestedTaken: someone else holds the address.
	ReasonRequestedTaken = "Taken"
	// ReasonRequestedInvalid: the request cannot be read (malformed, more
	// than one address per family) or the network's config is broken.
	ReasonRequestedInvalid = "Invalid"
	// ReasonRequestedPoolNotFound: the network's IPPool does not exist (yet).
	ReasonRequestedPoolNotFound = "PoolNotFound"
	// ReasonRequestedExhausted: the other family of a dual-stack network,
	// which the VM did not request, has no free address.
	ReasonRequestedExhausted = "Exhausted"
	// ReasonRequestedAlreadyAllocated: the claim already holds other
	// addresses; a request applies only before the first allocation.
	ReasonRequestedAlreadyAllocated = "AlreadyAllocated"
)
