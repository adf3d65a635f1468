// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A claim may ask for given addresses before its first allocation
// (claimstatus.RequestedAnnotation: from a VM's network.kubevirt.io/addresses,
// or written on the claim by whoever makes it). They are reserved exactly,
// or not at all: two VMs asking for one address learn which has it from a
// condition and an Event when they are created, not when the second fails
// to start, and the address is held from then on, running or not. On a
// dual-stack network asked for one family, the other family's address is
// chosen as for any claim.

// logicalNetwork is how messages name the claim's network: the KubeVirt
// network name of a VM's claim, else its CNI network.
func logicalNetwork(claim *ipamclaimsv1alpha1.IPAMClaim) string {
	if n := claim.Annotations[claimstatus.LogicalNetworkAnnotation]; n != "" {
		return n
	}
	return claim.Spec.Network
}

// requestRefused is the outcome of a request that is not honoured: the
// RequestedAddresses condition, and IPsAllocated=False with the reason of
// the mistake: OVN-Kubernetes' for a held address and exhaustion, else the
// request's own (OutsidePool, Invalid, PoolNotFound).
func requestRefused(reason string, retry bool, format string, args ...any) outcome {
	msg := fmt.Sprintf(format, args...)
	ipsReason := reason
	switch reason {
	case claimstatus.ReasonRequestedTaken:
		ipsReason = claimstatus.ReasonConflict
	case claimstatus.ReasonRequestedExhausted:
		ipsReason = claimstatus.ReasonExhausted
	}
	return outcome{
		failure:   &failure{reason: ipsReason, message: "the requested addresses are not the claim's: " + msg},
		requested: &metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: reason, Message: msg},
		retry:     retry,
	}
}

// fillRequested reserves the requested addresses of a claim that has none
// yet, and an address of each family the request does not cover.
func (r *Reconciler) fillRequested(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, pool *ipam.Pool, mine []held) (outcome, error) {
	name := logicalNetwork(claim)
	addrs, err := parseRequest(claim.Annotations[claimstatus.RequestedAnnotation])
	if err != nil {
		return requestRefused(claimstatus.ReasonRequestedInvalid, false, "network %q: %v", name, err), nil
	}
	for _, ip := range addrs {
		if _, err := pool.RangeFor(ip); err != nil {
			// Retried: a pool edit (a range added, an exclude dropped)
			// fixes it without the claim changing.
			return requestRefused(claimstatus.ReasonRequestedOutsidePool, true, "network %q cannot hand out the requested address: %v", name, err), nil
		}
	}
	h := r.holderOf(ctx, claim, net)
	// undo releases, on failure, what this attempt made and what earlier
	// ones left (an answer lost, an attempt cut short): a refused claim
	// holds nothing, so a request is reserved exactly or not at all. It
	// deletes at once whatever the pool's cooldown, as no pod ever got
	// these addresses (agents read a claim's addresses from its status
	// only, and it records none). The claim is read live first: the cache
	// may not show a status an earlier attempt wrote, and what the claim
	// records is the VM's, never rolled back.
	var created []*ipkeeperv1alpha1.IPReservation
	undo := func() {
		ctx := context.WithoutCancel(ctx)
		var fresh ipamclaimsv1alpha1.IPAMClaim
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), &fresh); err != nil || fresh.UID != claim.UID {
			// Gone or made again: the garbage collector releases what
			// the old claim held. Unreadable: the next attempt looks again.
			if client.IgnoreNotFound(err) != nil {
				log.FromContext(ctx).Error(err, "reading the claim before releasing what its refused request reserved; left for the next attempt")
			}
			return
		}
		for _, res := range append(created, reservationsOf(mine)...) {
			if ip, err := netip.ParseAddr(res.Spec.IP); err == nil && claimstatus.Records(&fresh, ip) {
				continue
			}
			err := reservation.Discard(ctx, reservation.KubeStore{Client: r.Client}, res.Name, res.UID, "")
			if err != nil && !errors.Is(err, reservation.ErrGone) {
				log.FromContext(ctx).Error(err, "releasing an address of a claim whose request failed", "reservation", res.Name)
			}
		}
	}
	// The requested addresses first: when one is someone else's, nothing
	// of the other family is taken in vain.
	got := map[bool]netip.Addr{} // by IPv4-ness
	for _, ip := range addrs {
		_, ok, err := r.stillHeld(ctx, claim, mine, func(h held) bool { return h.ip == ip })
		if err != nil {
			return outcome{}, err
		}
		if !ok {
			res, err := r.Alloc.Reserve(ctx, pool, h, ip)
			var taken *reservation.TakenError
			if errors.As(err, &taken) {
				undo()
				held := fmt.Sprintf("%s on network %q %s", ip, name, reservation.DescribeHolder(taken.Name, taken.Holder, claim.Namespace))
				if claim.Annotations[claimstatus.RequestedFallbackAnnotation] == claimstatus.FallbackOtherAddresses {
					return r.fillInstead(ctx, claim, net, pool, mine, held)
				}
				return requestRefused(claimstatus.ReasonRequestedTaken, true, "%s", held), nil
			}
			if f := quotaFailure(err); f != nil {
				undo()
				return outcome{failure: f, retry: true}, nil
			}
			if err != nil {
				undo()
				return outcome{}, fmt.Errorf("IPAMClaim %s/%s: reserving requested %s: %w", claim.Namespace, claim.Name, ip, err)
			}
			created = append(created, res)
		}
		got[ip.Is4()] = ip
	}
	// Then the families the request does not cover, as for any claim.
	var ips []netip.Prefix
	for _, family := range pool.Families() {
		is4 := family[0].Is4()
		if ip, ok := got[is4]; ok {
			ips = append(ips, prefixOf(pool, ip, family))
			continue
		}
		prev, ok, err := r.stillHeld(ctx, claim, mine, func(h held) bool { return h.ip.Is4() == is4 && !slices.Contains(addrs, h.ip) })
		if err != nil {
			undo()
			return outcome{}, err
		}
		if ok {
			ips = append(ips, prefixOf(pool, prev.ip, family))
			continue
		}
		res, err := r.Alloc.Assign(ctx, pool, h, family, string(claim.UID))
		if errors.Is(err, ipam.ErrExhausted) {
			undo()
			return requestRefused(claimstatus.ReasonRequestedExhausted, true, "%s is free, but network %q has no free address of the other IP family (%s), which the claim did not request",
				joinAddrs(addrs), name, rangeList(family)), nil
		}
		if f := quotaFailure(err); f != nil {
			undo()
			return outcome{failure: f, retry: true}, nil
		}
		if err != nil {
			undo()
			return outcome{}, fmt.Errorf("IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		created = append(created, res)
		ip, _ := netip.ParseAddr(res.Spec.IP)
		ips = append(ips, prefixOf(pool, ip, family))
	}
	return outcome{ips: ips, requested: &metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonRequestedReserved,
		Message: fmt.Sprintf("requested %s reserved for network %q; claim addresses %s", joinAddrs(addrs), name, joinPrefixes(ips))}}, nil
}

// fillInstead gives a claim whose requested address is someone else's
// (held says whose) other addresses, as for a claim that requests none,
// because its RequestedFallbackAnnotation asks for that rather than wait:
// a VM cloned or restored from one that still runs would otherwise never
// start. The request is honoured whole or not at all, so none of the
// requested addresses is kept (fillRequested released what it reserved).
// What the claim held before this attempt (mine: an earlier attempt's
// fill, its status write lost or not yet seen) is reused as fill reuses
// it; undo released none of it that the claim records.
func (r *Reconciler) fillInstead(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, pool *ipam.Pool, mine []held, held string) (outcome, error) {
	out, err := r.fill(ctx, claim, net, pool, mine)
	if err != nil {
		return out, err
	}
	if out.failure != nil {
		out.requested = &metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonRequestedTaken,
			Message: fmt.Sprintf("%s, and no other address is free either: %s", held, out.failure.message)}
		return out, nil
	}
	out.requested = &metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonRequestedTakenOthersGiven,
		Message: fmt.Sprintf("%s; the claim got %s instead (%s: %s)", held, joinPrefixes(out.ips), claimstatus.RequestedFallbackAnnotation, claimstatus.FallbackOtherAddresses)}
	return out, nil
}

func reservationsOf(mine []held) []*ipkeeperv1alpha1.IPReservation {
	out := make([]*ipkeeperv1alpha1.IPReservation, len(mine))
	for i, h := range mine {
		out[i] = h.res
	}
	return out
}

// judgeRecorded compares a claim's request with the addresses it already
// records: a request applies only before the first allocation.
func judgeRecorded(claim *ipamclaimsv1alpha1.IPAMClaim) *metav1.Condition {
	name := logicalNetwork(claim)
	addrs, err := parseRequest(claim.Annotations[claimstatus.RequestedAnnotation])
	recorded := map[netip.Addr]bool{}
	for _, ip := range claimstatus.Addresses(claim) {
		recorded[ip] = true
	}
	if err == nil && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !recorded[a] }) {
		return &metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonRequestedReserved,
			Message: fmt.Sprintf("requested %s reserved for network %q; claim addresses %s", joinAddrs(addrs), name, strings.Join(claim.Status.IPs, ", "))}
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested); c != nil && c.Reason == claimstatus.ReasonRequestedTakenOthersGiven {
		// Says whose the address was when the claim got others: kept.
		kept := *c
		return &kept
	}
	return &metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonRequestedAlreadyAllocated,
		Message: fmt.Sprintf("the claim already holds %s; a requested address applies only before a claim's first allocation (deleting the claim while the VM is stopped gives the VM the requested address, or a new one)",
			strings.Join(claim.Status.IPs, ", "))}
}

// parseRequest reads claimstatus.RequestedAnnotation: one or two
// addresses (one per family), each bare or with a prefix length (the
// length is the range's, whatever is written); "invalid" is what the
// claims controller records for a VM annotation it could not read.
func parseRequest(v string) ([]netip.Addr, error) {
	if v == "invalid" {
		return nil, fmt.Errorf("the VM's network.kubevirt.io/addresses annotation could not be read (its Events say why)")
	}
	var raw []string
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("annotation %s %q is not a JSON list of addresses: %w", claimstatus.RequestedAnnotation, v, err)
	}
	if len(raw) == 0 || len(raw) > 2 {
		return nil, fmt.Errorf("%d addresses requested (%s); give one or two, one per IP family", len(raw), strings.Join(raw, ", "))
	}
	out := make([]netip.Addr, 0, len(raw))
	for _, s := range raw {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			p, perr := netip.ParsePrefix(s)
			if perr != nil {
				return nil, fmt.Errorf("%q is not an IP address (or address/prefix length)", s)
			}
			ip = p.Addr()
		}
		if ip.Zone() != "" || ip.Is4In6() {
			return nil, fmt.Errorf("%q: write the address without a zone, and an IPv4 address as IPv4", s)
		}
		for _, prev := range out {
			if prev.Is4() == ip.Is4() {
				return nil, fmt.Errorf("%s and %s are of the same IP family; a network gets one address per family", prev, ip)
			}
		}
		out = append(out, ip)
	}
	return out, nil
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
