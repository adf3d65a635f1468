// SPDX-License-Identifier: Apache-2.0

// Package claimstatus is the one home of what ipkeeper reads and writes on
// IPAMClaims beyond their spec: status.ips (read with Entries, Addresses,
// Records and Filled; written with Record), the conditions (their types,
// reasons and messages: Allocated, NotAllocated, InPool), the status
// write itself (Write), and the annotations that ask for addresses or name
// the claim's NAD. Every component calls it: ipkeeper-controller writes
// status.ips and the conditions (package claimaddrs; AddressesInPool in
// package poolstatus), `kubectl ipkeeper import whereabouts` records the
// addresses it imports, the agent and the other commands only read.
package claimstatus

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConditionIPsAllocated is the condition the IPAM sets when it allocates
// a claim's addresses, with OVN-Kubernetes' type and reasons so tools
// reading claims work with either IPAM. ipkeeper-controller writes it when
// it fills the claim; an import of another IPAM's addresses writes it too.
const ConditionIPsAllocated = "IPsAllocated"

// Reasons of ConditionIPsAllocated. The first three are OVN-Kubernetes';
// the others name the mistake and so who must fix it (the claim's,
// its NAD's or its pool's author), where OVN-Kubernetes says InternalError.
const (
	ReasonAllocated = "SuccessfulAllocation"
	ReasonExhausted = "SubnetExhausted"
	ReasonConflict  = "IPAddressConflict"
	// ReasonOutsidePool: an address the claim records or requests is one
	// its network does not hand out (outside every range, the gateway,
	// excluded, the network or broadcast address, a family it lacks).
	ReasonOutsidePool = "OutsidePool"
	// ReasonInvalid: what the claim says cannot be read: a status.ips
	// entry, its requested addresses, its NAD annotation.
	ReasonInvalid = "Invalid"
	// ReasonPoolNotFound: the network's IPPool does not exist (yet).
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonPoolInvalid: the network's IPPool cannot be read.
	ReasonPoolInvalid = "PoolInvalid"
	// ReasonNADNotFound: the claim's NAD (NADAnnotation) does not exist.
	ReasonNADNotFound = "NADNotFound"
	// ReasonNADInvalid: the claim's network cannot be served as its NADs
	// say: a NAD that cannot be parsed or is of another network, NADs of
	// the network naming different pools, a NAD that disagrees with its
	// network's definition or overlaps an older network.
	ReasonNADInvalid = "NADInvalid"
	// ReasonNotAdmitted: the pool's spec.namespaceSelector does not
	// select the claim's namespace.
	ReasonNotAdmitted = "NamespaceNotAdmitted"
	// ReasonQuotaExceeded: the claim's namespace holds as many addresses
	// of the pool as its spec.maxAddressesPerNamespace allows, released
	// and retained ones included.
	ReasonQuotaExceeded = "QuotaExceeded"
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

// ConditionHeld says the claim still holds addresses its status.ips no
// longer records (an administrator edited it) because a pod that uses the
// claim still runs, whose guest may use them: True while they are held,
// removed once they are released (no pod of the claim runs any more).
const ConditionHeld = "AddressesHeld"

// ReasonPodRunning is ConditionHeld's reason.
const ReasonPodRunning = "PodRunning"

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

// RequestedFallbackAnnotation says what a claim does when an address it
// requests (RequestedAnnotation) is held by someone else before its first
// allocation: FallbackWait (the default) keeps it without addresses,
// retrying, until the holder lets go; FallbackOtherAddresses gives it
// other addresses at once, and ConditionRequested says which address was
// held and by whom. ipkeeper-controller reads it from a VM's template
// annotations (a standalone VMI's annotations) next to
// network.kubevirt.io/addresses, and records it on the claims it makes;
// without it there, a VM that KubeVirt made by a clone or a restore gets
// FallbackOtherAddresses: its request was copied from its source, which
// may still hold those addresses.
const RequestedFallbackAnnotation = "ipkeeper.io/requested-addresses-fallback"

// Values of RequestedFallbackAnnotation.
const (
	FallbackWait           = "wait"
	FallbackOtherAddresses = "other-addresses"
)

// LogicalNetworkAnnotation, on the IPAMClaims ipkeeper-controller makes
// for VMs, records the KubeVirt network name (spec.networks[].name), which
// a hashed claim name no longer shows; messages name the network by it.
const LogicalNetworkAnnotation = "ipkeeper.io/logical-network"

// NADAnnotation, on an IPAMClaim, names ("namespace/name") the
// NetworkAttachmentDefinition its network is attached through: the claim's
// addresses come from that NAD's pool. ipkeeper-controller sets it on the
// claims it makes for VMs; without it, the NAD its owner VM or VMI (else
// its launchers) uses for the claim's spec.network says where, and only
// for a claim nothing owns or uses, the NADs of its spec.network whose
// IPAM is ipkeeper (those of the claim's namespace first).
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

// ConditionGuestAddresses on a claim says whether the guest uses the
// claim's addresses, as its guest agent reports them in the VMI's status;
// package guestnet sets it.
const ConditionGuestAddresses = "GuestAddresses"

// The reasons of ConditionGuestAddresses.
const (
	ReasonGuestUsesItsAddresses = "GuestUsesItsAddresses"
	ReasonGuestAddressesDiffer  = "GuestAddressesDiffer"
)

// Reasons of ConditionRequested.
const (
	ReasonRequestedReserved = "Reserved"
	// ReasonRequestedOutsidePool: an address the pool does not hand out
	// (outside every range, the gateway, excluded) or of a family it lacks.
	ReasonRequestedOutsidePool = ReasonOutsidePool
	// ReasonRequestedTaken: someone else holds the address.
	ReasonRequestedTaken = "Taken"
	// ReasonRequestedInvalid: the request cannot be read (malformed, more
	// than one address per family) or the network's config is broken.
	ReasonRequestedInvalid = ReasonInvalid
	// ReasonRequestedPoolNotFound: the network's IPPool does not exist (yet).
	ReasonRequestedPoolNotFound = ReasonPoolNotFound
	// ReasonRequestedExhausted: the other family of a dual-stack network,
	// which the VM did not request, has no free address.
	ReasonRequestedExhausted = "Exhausted"
	// ReasonRequestedAlreadyAllocated: the claim already holds other
	// addresses; a request applies only before the first allocation.
	ReasonRequestedAlreadyAllocated = "AlreadyAllocated"
	// ReasonRequestedTakenOthersGiven: a requested address was held by
	// someone else at the claim's first allocation, and the claim's
	// RequestedFallbackAnnotation asked for other addresses then.
	ReasonRequestedTakenOthersGiven = "TakenOtherAddressesGiven"
)

// Entry is one entry of a claim's status.ips, read.
type Entry struct {
	// Index is the entry's position in status.ips, Raw the entry as written.
	Index int
	Raw   string
	// IP is the address; Prefix has the length it was recorded with (the
	// address's full length for a bare address).
	IP     netip.Addr
	Prefix netip.Prefix
}

// EntryError is an entry of status.ips that is not an address.
type EntryError struct {
	Index int
	Raw   string
	Err   error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("status.ips[%d] %q: %v", e.Index, e.Raw, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

// Filled says whether the claim records its addresses: status.ips, which
// ipkeeper-controller writes once, when it fills the claim.
func Filled(claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	return len(claim.Status.IPs) > 0
}

// Entries reads every entry of the claim's status.ips; the first that is
// not an address is an *EntryError naming it.
func Entries(claim *ipamclaimsv1alpha1.IPAMClaim) ([]Entry, error) {
	out := make([]Entry, 0, len(claim.Status.IPs))
	for i, s := range claim.Status.IPs {
		ip, err := ParseIP(s)
		if err != nil {
			return nil, &EntryError{Index: i, Raw: s, Err: err}
		}
		p, perr := netip.ParsePrefix(s)
		if perr != nil {
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		out = append(out, Entry{Index: i, Raw: s, IP: ip, Prefix: p})
	}
	return out, nil
}

// Addresses returns the addresses the claim's status.ips records, in
// order, skipping entries that are not addresses (Entries reports those).
func Addresses(claim *ipamclaimsv1alpha1.IPAMClaim) []netip.Addr {
	var out []netip.Addr
	for _, s := range claim.Status.IPs {
		if ip, err := ParseIP(s); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// Records says whether the claim's status.ips records ip.
func Records(claim *ipamclaimsv1alpha1.IPAMClaim, ip netip.Addr) bool {
	return slices.Contains(Addresses(claim), ip)
}

// Record appends to status.ips the addresses it does not record yet, as
// CIDRs (what IPAMs write); it returns whether anything was added.
func Record(st *ipamclaimsv1alpha1.IPAMClaimStatus, ips ...netip.Prefix) bool {
	changed := false
	for _, p := range ips {
		if slices.ContainsFunc(st.IPs, func(s string) bool { ip, err := ParseIP(s); return err == nil && ip == p.Addr() }) {
			continue
		}
		st.IPs = append(st.IPs, p.String())
		changed = true
	}
	return changed
}

// Allocated returns ConditionIPsAllocated, True, for the addresses st
// records on network; note, when set, is added to the message in
// parentheses (how they were allocated).
func Allocated(st *ipamclaimsv1alpha1.IPAMClaimStatus, network, note string, generation int64) metav1.Condition {
	msg := fmt.Sprintf("%s allocated on network %q", strings.Join(st.IPs, ", "), network)
	if note != "" {
		msg += " (" + note + ")"
	}
	return metav1.Condition{Type: ConditionIPsAllocated, Status: metav1.ConditionTrue, Reason: ReasonAllocated, Message: msg, ObservedGeneration: generation}
}

// NotAllocated returns ConditionIPsAllocated, False, with one of its
// reasons and a message saying why.
func NotAllocated(reason, message string, generation int64) metav1.Condition {
	return metav1.Condition{Type: ConditionIPsAllocated, Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: generation}
}

// Write writes the claim's status with an update, not a patch: it holds
// only for the version read, so addresses someone wrote meanwhile are
// never overwritten (a conflict says so). status.ips is never written
// null: the CRD's schema requires the list.
func Write(ctx context.Context, c client.Client, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	if claim.Status.IPs == nil {
		claim.Status.IPs = []string{}
	}
	if err := c.Status().Update(ctx, claim); err != nil {
		return fmt.Errorf("writing the status of IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}
