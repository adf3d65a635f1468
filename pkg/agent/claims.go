package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/reservation"
)

// The IPsAllocated condition and its reasons, as OVN-Kubernetes writes
// them, so tools reading claims work with either IPAM.
const (
	conditionIPsAllocated = "IPsAllocated"
	reasonAllocated       = "SuccessfulAllocation"
	reasonExhausted       = "SubnetExhausted"
	reasonConflict        = "IPAddressConflict"
	reasonInternal        = "InternalError"
)

// maxStatusRaces bounds the re-reads when another pod (the other side of a
// live migration) writes the claim's status at the same time.
const maxStatusRaces = 5

// allocateForClaim returns the addresses of the IPAMClaim the attachment
// references: those in its status, or new ones owned by the claim, written
// into its status. Reservations are created before the status is written
// and are found by owner UID on a retry, so a crash in between neither
// leaks nor changes the addresses.
func (a *Agent) allocateForClaim(ctx context.Context, req *request, pod *corev1.Pod, claimName string) ([]netip.Prefix, error) {
	network := req.cfg.Name
	if err := a.persistentIPsAllowed(ctx, req, pod, claimName); err != nil {
		return nil, err
	}
	claim, err := a.claims.Wait(ctx, pod.Namespace, claimName, a.opts.ClaimWaitTimeout)
	if err != nil {
		return nil, a.fail("claim", codeTryAgainLater, fmt.Errorf("pod %s/%s interface %s: %w", pod.Namespace, pod.Name, req.IfName, err))
	}
	if err := a.mayUseClaim(ctx, pod, claim); err != nil {
		return nil, err
	}
	if claim.Spec.Network != "" && claim.Spec.Network != network {
		return nil, a.fail("invalid", codeInvalidConfig, fmt.Errorf(
			"IPAMClaim %s/%s is for network %q (spec.network), but pod %s/%s interface %s attaches to network %q",
			claim.Namespace, claim.Name, claim.Spec.Network, pod.Namespace, pod.Name, req.IfName, network))
	}
	unlock := a.locks.lock("claim/" + string(claim.UID))
	defer unlock()

	for range maxStatusRaces {
		ips, created, err := a.claimAddresses(ctx, req, claim)
		if err != nil {
			a.reportClaimFailure(ctx, claim, err)
			return nil, err
		}
		err = a.writeClaimAllocated(ctx, claim, ips, pod)
		if err == nil {
			return ips, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, a.fail("internal", codeTryAgainLater, err)
		}
		fresh, gerr := a.claims.Get(ctx, claim.Namespace, claim.Name)
		if gerr != nil {
			return nil, a.fail("claim", codeTryAgainLater, gerr)
		}
		if fresh.UID != claim.UID {
			return nil, a.fail("claim", codeTryAgainLater, fmt.Errorf("IPAMClaim %s/%s was recreated during the ADD; retry", claim.Namespace, claim.Name))
		}
		if len(fresh.Status.IPs) > 0 && !sameAddresses(fresh.Status.IPs, ips) {
			// The other writer's addresses win; drop what this ADD made.
			if rerr := a.release(ctx, created, "claim-race"); rerr != nil {
				a.log.Error("releasing addresses that lost a claim status race", "claim", claim.Namespace+"/"+claim.Name, "error", rerr)
			}
		}
		claim = fresh
	}
	return nil, a.fail("internal", codeTryAgainLater, fmt.Errorf("IPAMClaim %s/%s: status kept changing under %d attempts; retry", claim.Namespace, claim.Name, maxStatusRaces))
}

// claimAddresses returns the claim's addresses (one per range), making
// sure each has a reservation owned by the claim; created lists the
// reservations this call made.
func (a *Agent) claimAddresses(ctx context.Context, req *request, claim *ipamclaimsv1alpha1.IPAMClaim) (ips []netip.Prefix, created []entry, err error) {
	network := req.cfg.Name
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	if len(claim.Status.IPs) > 0 {
		for i, s := range claim.Status.IPs {
			ip, perr := parseClaimIP(s)
			if perr != nil {
				return nil, nil, a.fail("internal", codeInternal, fmt.Errorf("IPAMClaim %s/%s status.ips[%d] %q: %w", claim.Namespace, claim.Name, i, s, perr))
			}
			r, ok := req.cfg.RangeFor(ip)
			if !ok {
				return nil, nil, a.fail("internal", codeInternal, fmt.Errorf(
					"IPAMClaim %s/%s holds %s (status.ips), which is outside every range of network %q; nothing was released: fix the network's ranges or delete the claim",
					claim.Namespace, claim.Name, ip, network))
			}
			if err := a.ensureClaimReservation(ctx, req, ip, owner); err != nil {
				return nil, nil, err
			}
			ips = append(ips, netip.PrefixFrom(ip, r.Subnet.Bits()))
		}
		return ips, nil, nil
	}
	held := a.idx.claim(network, claim.UID)
	for _, r := range req.cfg.Ranges {
		if e, ok := heldIn(held, r); ok {
			ips = append(ips, netip.PrefixFrom(e.ip, r.Subnet.Bits()))
			continue
		}
		e, err := a.reserveInRange(ctx, req, r, owner)
		if err != nil {
			if rerr := a.release(ctx, created, "rollback"); rerr != nil {
				a.log.Error("rolling back claim reservations", "claim", claim.Namespace+"/"+claim.Name, "error", rerr)
			}
			return nil, nil, err
		}
		created = append(created, e)
		ips = append(ips, netip.PrefixFrom(e.ip, r.Subnet.Bits()))
	}
	return ips, created, nil
}

// ensureClaimReservation makes sure ip's reservation exists and belongs to
// the claim: recreated when missing, a conflict when someone else holds it.
func (a *Agent) ensureClaimReservation(ctx context.Context, req *request, ip netip.Addr, owner ipkeeperv1alpha1.ReservationOwner) error {
	name := reservation.Name(req.cfg.Name, ip)
	if e, ok := a.idx.get(name); ok && e.owner.UID == owner.UID {
		return nil
	}
	_, err := a.create(ctx, req, ip, owner)
	if errors.Is(err, ErrTaken) {
		return a.fail("conflict", codeInternal, fmt.Errorf("IPAMClaim %s/%s: %w", owner.Namespace, owner.Name, a.describeHolder(ctx, "address", req.cfg.Name, ip)))
	}
	return err
}

// writeClaimAllocated records the addresses, the pod that most recently
// attached with the claim, and IPsAllocated=True. Nothing is written when
// all three are already so.
func (a *Agent) writeClaimAllocated(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, ips []netip.Prefix, pod *corev1.Pod) error {
	updated := claim.DeepCopy()
	updated.Status.IPs = make([]string, len(ips))
	for i, p := range ips {
		updated.Status.IPs[i] = p.String()
	}
	updated.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: pod.Name}
	changedCond := meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: conditionIPsAllocated, Status: metav1.ConditionTrue, Reason: reasonAllocated,
		Message: fmt.Sprintf("%s allocated on network %q", strings.Join(updated.Status.IPs, ", "), claim.Spec.Network), ObservedGeneration: claim.Generation,
	})
	if !changedCond && slices.Equal(updated.Status.IPs, claim.Status.IPs) &&
		claim.Status.OwnerPod != nil && claim.Status.OwnerPod.Name == pod.Name {
		return nil
	}
	if err := a.claims.UpdateStatus(ctx, updated); err != nil {
		return err
	}
	*claim = *updated
	return nil
}

// reportClaimFailure sets IPsAllocated=False with the reason OVN-Kubernetes
// uses; the addresses in status are left as they are.
func (a *Agent) reportClaimFailure(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, cause error) {
	reason := reasonInternal
	switch failureReason(cause) {
	case "exhausted":
		reason = reasonExhausted
	case "conflict":
		reason = reasonConflict
	}
	updated := claim.DeepCopy()
	if !meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: conditionIPsAllocated, Status: metav1.ConditionFalse, Reason: reason, Message: cause.Error(), ObservedGeneration: claim.Generation,
	}) {
		return
	}
	if err := a.claims.UpdateStatus(ctx, updated); err != nil {
		a.log.Error("reporting a failed allocation on the claim", "claim", claim.Namespace+"/"+claim.Name, "error", err)
	}
}

// parseClaimIP accepts "10.0.0.5/24" (what IPAMs write) or a bare address.
func parseClaimIP(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("not an IP address or CIDR: %w", err)
	}
	return ip, nil
}

func sameAddresses(status []string, ips []netip.Prefix) bool {
	if len(status) != len(ips) {
		return false
	}
	for i, s := range status {
		ip, err := parseClaimIP(s)
		if err != nil || ip != ips[i].Addr() {
			return false
		}
	}
	return true
}
