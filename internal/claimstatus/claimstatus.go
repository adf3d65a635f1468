// SPDX-License-Identifier: Apache-2.0

// Package claimstatus holds the IPAMClaim conditions ipkeeper sets that
// more than one component writes: one definition of their type, reasons
// and messages for the agent (at ADD) and the controller (when a pool
// changes under a running VM).
package claimstatus

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionIPsAllocated is the condition the IPAM sets when it allocates
// a claim's addresses, with OVN-Kubernetes' type and reasons so tools
// reading claims work with either IPAM. The agent writes it at ADD; an
// import of another IPAM's addresses writes it too.
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

// RequestedAnnotation, on an IPAMClaim, holds the addresses the claim's VM
// requested for the network (a JSON list, as in the VM's
// network.kubevirt.io/addresses), or "invalid" when the VM's request could
// not be read. ipkeeper-controller sets it when it creates the claim, so
// that it is there before any launcher pod can see the claim: while it is
// present and the claim's status.ips is empty, ipkeeper-agent allocates
// nothing for the claim (the controller reserves the requested addresses
// and records them, or says in ConditionRequested why it cannot).
const RequestedAnnotation = "ipkeeper.io/requested-addresses"

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
