// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// A claim-backed attachment's addresses are its IPAMClaim's, and
// ipkeeper-controller is their one writer: it chooses and reserves them
// when the claim exists, before any launcher pod runs, and records them
// in status.ips. The agent only reads. Its ADD waits (bounded) for the
// claim to have addresses, checks the pod may use the claim, and checks
// live that each recorded address is reserved for the claim; it creates,
// adopts and releases nothing of a claim's. Both launchers of a live
// migration, on two nodes, read the same status: there is nothing to race.

// claimAddresses returns the addresses of the IPAMClaim the attachment
// references, as the claim records them. An ADD waits for the claim to
// have them; a CHECK (wait false) judges the claim as it is.
func (a *Agent) claimAddresses(ctx context.Context, req *request, pod *corev1.Pod, claimName string, wait bool) ([]netip.Prefix, error) {
	network := req.cfg.Name
	if err := a.persistentIPsAllowed(ctx, req, pod, claimName); err != nil {
		return nil, err
	}
	var claim *ipamclaimsv1alpha1.IPAMClaim
	var err error
	if wait {
		claim, err = a.claims.Wait(ctx, pod.Namespace, claimName, a.opts.ClaimWaitTimeout)
	} else {
		claim, err = a.claims.Get(ctx, pod.Namespace, claimName)
	}
	if err != nil {
		return nil, fail(reasonClaim, codeTryAgainLater, fmt.Errorf("pod %s/%s interface %s: %w", pod.Namespace, pod.Name, req.IfName, explainWait(err)))
	}
	if claim.DeletionTimestamp != nil { // a CHECK; an ADD waits for the claim made again
		return nil, fail(reasonClaim, codeTryAgainLater, fmt.Errorf("pod %s/%s interface %s: %s", pod.Namespace, pod.Name, req.IfName, deletingMessage(claim)))
	}
	if err := a.mayUseClaim(pod, claim); err != nil {
		return nil, err
	}
	if claim.Spec.Network != "" && claim.Spec.Network != network {
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
			"IPAMClaim %s/%s is for network %q (spec.network), but pod %s/%s interface %s attaches to network %q",
			claim.Namespace, claim.Name, claim.Spec.Network, pod.Namespace, pod.Name, req.IfName, network))
	}
	ips, err := a.recordedAddresses(ctx, req, claim)
	if err != nil {
		return nil, err
	}
	if err := staticAgrees(req, claim, ips); err != nil {
		return nil, err
	}
	return ips, nil
}

// explainWait adds to a claim that never got addresses what its
// conditions say (the controller's reason), so the pod's event tells why.
func explainWait(err error) error {
	var na *noAddressesError
	if !errors.As(err, &na) {
		return err
	}
	claim := na.claim
	if claim.DeletionTimestamp != nil {
		return err
	}
	why, ok := controllerSays(claim)
	if !ok {
		why = "ipkeeper-controller has not recorded them yet (is it running? " + whyClaim(claim) + ")"
	}
	return fmt.Errorf("%w: %s", err, why)
}

// controllerSays quotes the claim's condition that says why
// ipkeeper-controller could not give or keep its addresses (the request's
// first, then IPsAllocated), if one is False.
func controllerSays(claim *ipamclaimsv1alpha1.IPAMClaim) (string, bool) {
	for _, t := range []string{claimstatus.ConditionRequested, claimstatus.ConditionIPsAllocated} {
		if c := meta.FindStatusCondition(claim.Status.Conditions, t); c != nil && c.Status == metav1.ConditionFalse {
			return t + "=False, " + c.Reason + ": " + c.Message, true
		}
	}
	return "", false
}

func whyClaim(claim *ipamclaimsv1alpha1.IPAMClaim) string {
	return "`kubectl ipkeeper why claim " + claim.Name + " -n " + claim.Namespace + "`"
}

// recordedAddresses returns the claim's status.ips, each after a live read
// of its reservation: it must exist and be the claim's, or lent to it (a
// decentralized live migration's receiver). An address its
// pool no longer hands out (a range removed, an exclude added) is kept
// while the claim's reservation holds it: the VM keeps its address, and
// the controller's AddressesInPool condition says it left the pool.
func (a *Agent) recordedAddresses(ctx context.Context, req *request, claim *ipamclaimsv1alpha1.IPAMClaim) ([]netip.Prefix, error) {
	network, pool := req.cfg.Name, req.pool.Name
	recorded, err := claimstatus.Entries(claim)
	if err != nil {
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("IPAMClaim %s/%s %w", claim.Namespace, claim.Name, err))
	}
	ips := make([]netip.Prefix, 0, len(recorded))
	for _, rec := range recorded {
		ip, i := rec.IP, rec.Index
		name := naming.Reservation(req.pool.Key, ip)
		r, err := a.store.Get(ctx, name)
		switch {
		case errors.Is(err, ErrGone) && req.pool.Usable(ip) != nil:
			// Final: ipkeeper-controller never reserves an address the
			// network does not hand out (IPsAllocated=False OutsidePool),
			// so a retry cannot succeed until the claim or the pool is fixed.
			return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
				"IPAMClaim %s/%s records %s (status.ips[%d]), which network %q never hands out (%w), so ipkeeper-controller will never reserve it: fix the claim's status.ips or the pool; %s",
				claim.Namespace, claim.Name, ip, i, network, req.pool.Usable(ip), neverReservedWhy(claim)))
		case errors.Is(err, ErrGone):
			// Try again later: ipkeeper-controller reserves what a claim
			// records (an administrator's edit of status.ips) within moments.
			return nil, fail(reasonClaim, codeTryAgainLater, fmt.Errorf(
				"IPAMClaim %s/%s records %s (status.ips[%d]), but network %q (IPPool %q) has no reservation of it (%s); ipkeeper-controller reserves the addresses a claim records: see %s",
				claim.Namespace, claim.Name, ip, i, network, pool, name, whyClaim(claim)))
		case err != nil:
			return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("IPAMClaim %s/%s: checking the reservation of %s: %w", claim.Namespace, claim.Name, ip, err))
		case !reservation.ClaimMayUse(r, claim.UID):
			return nil, fail(reasonConflict, codeInvalidConfig, fmt.Errorf("IPAMClaim %s/%s records %s (status.ips[%d]), but on network %q it %s",
				claim.Namespace, claim.Name, ip, i, network, reservation.DescribeHolder(r.Name, r, claim.Namespace)))
		}
		ips = append(ips, recordedPrefix(rec, req.pool))
	}
	return ips, nil
}

// neverReservedWhy is what the claim's condition says of an address the
// network never hands out, or where to look before the controller said.
func neverReservedWhy(claim *ipamclaimsv1alpha1.IPAMClaim) string {
	if why, ok := controllerSays(claim); ok {
		return "the claim says " + why
	}
	return "see " + whyClaim(claim)
}

// staticAgrees refuses a static request (the ips capability) next to a
// claim whose addresses differ: a claim's addresses are chosen by
// ipkeeper-controller, and a pod's static ips never change them.
func staticAgrees(req *request, claim *ipamclaimsv1alpha1.IPAMClaim, ips []netip.Prefix) error {
	var differ []string
	for _, p := range req.cfg.StaticIPs {
		found := false
		for _, got := range ips {
			found = found || got.Addr() == p.Addr()
		}
		if !found {
			differ = append(differ, p.Addr().String())
		}
	}
	if len(differ) == 0 {
		return nil
	}
	return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
		"the attachment requests static ips %s and references IPAMClaim %s/%s, which holds %s: a claim's addresses are chosen by ipkeeper-controller "+
			"(ask for given ones with network.kubevirt.io/addresses on the VM, or %s on the claim), never by a pod's ips; drop the ips request or make it match",
		strings.Join(differ, ", "), claim.Namespace, claim.Name, strings.Join(claim.Status.IPs, ", "), claimstatus.RequestedAnnotation))
}

// recordedPrefix returns a recorded address with the prefix length of the
// pool's range containing it (the network as it is now), else, for one
// whose range was removed, the length it was recorded with.
func recordedPrefix(rec claimstatus.Entry, pool *ipam.Pool) netip.Prefix {
	if r, ok := pool.Containing(rec.IP); ok {
		return netip.PrefixFrom(rec.IP, r.Subnet().Bits())
	}
	return rec.Prefix
}
