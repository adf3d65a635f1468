// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The IPsAllocated condition and its reasons, as OVN-Kubernetes writes
// them, so tools reading claims work with either IPAM.
const (
	conditionIPsAllocated = claimstatus.ConditionIPsAllocated

	condReasonAllocated conditionReason = claimstatus.ReasonAllocated
	condReasonExhausted conditionReason = claimstatus.ReasonExhausted
	condReasonConflict  conditionReason = claimstatus.ReasonConflict
	condReasonInternal  conditionReason = claimstatus.ReasonInternal
)

// conditionReason is the reason of the claim's IPsAllocated condition.
type conditionReason string

// maxStatusRaces bounds the re-reads when another pod (the other side of a
// live migration) writes the claim's status at the same time.
const maxStatusRaces = 5

// allocateForClaim returns the addresses of the IPAMClaim the attachment
// references: those in its status, or new ones owned by the claim, written
// into its status. Reservations are created before the status is written
// and are found by owner UID on a retry, so a crash in between neither
// leaks nor changes the addresses.
func (a *Agent) allocateForClaim(ctx context.Context, req *request, pod *corev1.Pod, claimName string) ([]netip.Prefix, error) {
	network, pool := req.cfg.Name, req.pool.name
	if err := a.persistentIPsAllowed(ctx, req, pod, claimName); err != nil {
		return nil, err
	}
	claim, err := a.claims.Wait(ctx, pod.Namespace, claimName, a.opts.ClaimWaitTimeout)
	if err != nil {
		return nil, fail(reasonClaim, codeTryAgainLater, fmt.Errorf("pod %s/%s interface %s: %w", pod.Namespace, pod.Name, req.IfName, err))
	}
	if err := a.mayUseClaim(ctx, pod, claim); err != nil {
		return nil, err
	}
	if claim.Spec.Network != "" && claim.Spec.Network != network {
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
			"IPAMClaim %s/%s is for network %q (spec.network), but pod %s/%s interface %s attaches to network %q",
			claim.Namespace, claim.Name, claim.Spec.Network, pod.Namespace, pod.Name, req.IfName, network))
	}
	h := holder{
		owner:  ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		ifName: req.IfName,
	}
	defer a.locks.lock(h.key(pool))()

	for range maxStatusRaces {
		var ips []netip.Prefix
		var created []entry
		recorded := len(claim.Status.IPs) > 0
		if !recorded {
			if err := requestPending(claim); err != nil {
				return nil, err
			}
		}
		if recorded {
			ips, err = a.recordedAddresses(ctx, req, claim, h)
		} else {
			ips, created, err = a.reserve(ctx, req, h, nil)
		}
		if err != nil {
			a.reportClaimFailure(ctx, claim, err)
			return nil, err
		}
		err = a.writeClaimAllocated(ctx, claim, ips, pod)
		if err == nil {
			// Recorded now: the claim's other reservations on the network
			// (an edited status, or what a failed earlier attempt of the
			// first allocation left) hold addresses no pod will ever get.
			written := make([]string, len(ips))
			for i, p := range ips {
				written[i] = p.String()
			}
			if recorded || len(notRecorded(a.held(pool, h), written)) > 0 {
				a.releaseSuperseded(ctx, req, claim, h)
			}
			return ips, nil
		}
		if !apierrors.IsConflict(err) {
			// The write may have been applied (a lost response), so what
			// this call created may be recorded now: only a fresh read can
			// tell which of it to drop.
			a.dropUnrecorded(ctx, h.owner, created)
			return nil, fail(reasonInternal, codeTryAgainLater, err)
		}
		fresh, gerr := a.claims.Get(ctx, claim.Namespace, claim.Name)
		if gerr != nil {
			// The winner may have recorded what this call created (it
			// adopts a reservation of the claim it finds): keep it; the
			// retry or the next ADD of the claim sorts it out.
			return nil, fail(reasonClaim, codeTryAgainLater, gerr)
		}
		if fresh.UID != claim.UID {
			// Owned by the old claim, which no new claim can adopt.
			_ = a.discard(context.WithoutCancel(ctx), created, "rollback")
			return nil, fail(reasonClaim, codeTryAgainLater, fmt.Errorf("IPAMClaim %s/%s was recreated during the ADD; retry", claim.Namespace, claim.Name))
		}
		if len(fresh.Status.IPs) > 0 && !sameAddresses(fresh.Status.IPs, ips) {
			// The other writer's addresses win. Drop only what this call
			// created, and never an address the winner recorded.
			_ = a.discard(context.WithoutCancel(ctx), notRecorded(created, fresh.Status.IPs), "claim-race")
		}
		claim = fresh
	}
	return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("IPAMClaim %s/%s: status kept changing under %d attempts; retry", claim.Namespace, claim.Name, maxStatusRaces))
}

// requestPending fails the first allocation of a claim whose VM requested
// addresses (claimstatus.RequestedAnnotation): ipkeeper-controller reserves
// and records them, and the ADD uses them once recorded; another address
// now would be the VM's for good. The controller's condition says why
// they are not recorded yet, if it knows.
func requestPending(claim *ipamclaimsv1alpha1.IPAMClaim) error {
	requested, ok := claim.Annotations[claimstatus.RequestedAnnotation]
	if !ok {
		return nil
	}
	why := "ipkeeper-controller has not reserved them yet"
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested); c != nil && c.Status == metav1.ConditionFalse {
		why = c.Reason + ": " + c.Message
	}
	return fail(reasonClaim, codeTryAgainLater, fmt.Errorf("IPAMClaim %s/%s: the VM requested addresses %s, which are not the claim's: %s",
		claim.Namespace, claim.Name, requested, why))
}

// recordedAddresses returns the addresses in the claim's status, making
// sure each has a reservation owned by the claim. An address the pool
// hands out is reserved if need be. One it no longer hands out (a range
// removed, an exclude added) is kept while the claim's reservation holds
// it: the VM keeps its address, and the claim gets a condition saying it
// left the pool. Without such a reservation it is a configuration problem
// (of the pool or of the claim), not a passing one.
func (a *Agent) recordedAddresses(ctx context.Context, req *request, claim *ipamclaimsv1alpha1.IPAMClaim, h holder) ([]netip.Prefix, error) {
	network, pool := req.cfg.Name, req.pool.name
	var ips []netip.Prefix
	var outside []string
	for i, s := range claim.Status.IPs {
		ip, err := parseClaimIP(s)
		if err != nil {
			return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("IPAMClaim %s/%s status.ips[%d] %q: %w", claim.Namespace, claim.Name, i, s, err))
		}
		e, held := a.idx.get(naming.Reservation(req.pool.key, ip))
		held = held && e.owner.UID == claim.UID && !e.released()
		if err := req.pool.usable(ip); err != nil {
			if !held {
				return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
					"IPAMClaim %s/%s holds %s (status.ips[%d]), which network %q (IPPool %q) does not hand out: %w; nothing was released: fix the pool or delete the claim",
					claim.Namespace, claim.Name, ip, i, network, pool, err))
			}
			outside = append(outside, claimstatus.Outside(ip, err))
		} else if !held {
			if _, _, err := a.createOrAdopt(ctx, req, ip, h, false); errors.Is(err, ErrTaken) {
				why := a.describeHolder(ctx, "address", req, ip, claim.Namespace)
				var f *failure
				if errors.As(why, &f) {
					return nil, fail(f.reason, f.cni.Code, fmt.Errorf("IPAMClaim %s/%s: %s", claim.Namespace, claim.Name, f.cni.Msg))
				}
				return nil, why
			} else if err != nil {
				return nil, err
			}
		}
		ips = append(ips, recordedPrefix(s, ip, req.pool))
	}
	a.reportOutOfPool(ctx, claim, pool, outside)
	return ips, nil
}

// recordedPrefix returns a recorded address with the prefix length of the
// pool's range containing it (the network as it is now), else, for one
// whose range was removed, the length it was recorded with.
func recordedPrefix(s string, ip netip.Addr, pool *poolView) netip.Prefix {
	if r, ok := pool.rangeFor(ip); ok {
		return netip.PrefixFrom(ip, r.Subnet().Bits())
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return netip.PrefixFrom(ip, p.Bits())
	}
	return netip.PrefixFrom(ip, ip.BitLen())
}

// releaseSuperseded releases the claim's reservations on the network of
// addresses its status no longer records (status.ips was edited), judged
// against the claim as it is now, not as read at the start of the ADD.
// One made on another node is first taken over (spec.node set to this
// node), as the node-bound admission policy lets an agent delete only its
// own node's reservations. Failures are logged: the next ADD tries again.
func (a *Agent) releaseSuperseded(ctx context.Context, req *request, claim *ipamclaimsv1alpha1.IPAMClaim, h holder) {
	pool := req.pool.name
	if len(notRecorded(a.held(pool, h), claim.Status.IPs)) == 0 {
		return
	}
	fresh, err := a.claims.Get(ctx, claim.Namespace, claim.Name)
	if err != nil || fresh.UID != claim.UID || len(fresh.Status.IPs) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var stale []entry
	for _, e := range notRecorded(a.held(pool, h), fresh.Status.IPs) {
		if e.node != a.opts.NodeName {
			if e, err = a.takeOver(ctx, e, req, false); err != nil {
				a.log.Error(err, "taking over a superseded claim reservation", "reservation", e.name)
				continue
			}
		}
		stale = append(stale, e)
	}
	_ = a.release(ctx, stale, "claim-status-edited", nil) // logged by release
}

// dropUnrecorded releases, after a failed ADD of the claim (a status write
// whose outcome is unknown, or a reserve that failed half-way), what this
// call created that the claim, read afresh, does not record, once it
// records addresses at all (another writer's, or none of ours). With no
// addresses recorded, or the claim unreadable, everything is kept: the
// retry reuses it, and the DEL of this sandbox drops what the claim ends
// up not recording.
func (a *Agent) dropUnrecorded(ctx context.Context, claim ipkeeperv1alpha1.ReservationOwner, created []entry) {
	if len(created) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	fresh, err := a.claims.Get(ctx, claim.Namespace, claim.Name)
	if err != nil || fresh.UID != claim.UID || len(fresh.Status.IPs) == 0 {
		return
	}
	_ = a.discard(ctx, notRecorded(created, fresh.Status.IPs), "claim-race") // logged by discard
}

// releaseUnrecordedOfSandbox is the DEL of a claim-backed attachment: the
// claim's reservations this sandbox made that the claim does not record
// (it lost the first-allocation race after a create whose response was
// lost, so its ADD could not drop them) are released; everything the claim
// records is kept, as the VM keeps its addresses. With nothing recorded
// yet they are kept too (the next ADD of the claim adopts them, and the
// first status write releases what it does not record); the claim gone,
// the garbage collector releases them. One another node has taken over
// is that node's to release (and the only one it may delete).
func (a *Agent) releaseUnrecordedOfSandbox(ctx context.Context, entries []entry) error {
	byClaim := map[types.UID][]entry{}
	for _, e := range entries {
		if e.node != a.opts.NodeName {
			continue
		}
		byClaim[e.owner.UID] = append(byClaim[e.owner.UID], e)
	}
	var errs []error
	for _, es := range byClaim {
		owner := es[0].owner
		h := holder{owner: owner, ifName: es[0].ifName}
		func() {
			defer a.locks.lock(h.key(es[0].pool))()
			fresh, err := a.claims.Get(ctx, owner.Namespace, owner.Name)
			switch {
			case errors.Is(err, errClaimMissing):
				return
			case err != nil:
				errs = append(errs, fmt.Errorf("reading IPAMClaim %s/%s to release what this sandbox made that it does not record: %w", owner.Namespace, owner.Name, err))
				return
			case fresh.UID != owner.UID || len(fresh.Status.IPs) == 0:
				return
			}
			var stale []entry
			for _, e := range notRecorded(es, fresh.Status.IPs) {
				if cur, ok := a.idx.get(e.name); ok && cur.uid == e.uid && cur.rv == e.rv && cur.node == a.opts.NodeName {
					stale = append(stale, cur)
				}
			}
			errs = append(errs, a.release(ctx, stale, "DEL-unrecorded", nil))
		}()
	}
	return errors.Join(errs...)
}

// notRecorded returns the entries whose address is not in a claim's status.
func notRecorded(entries []entry, status []string) []entry {
	var out []entry
	for _, e := range entries {
		if !slices.ContainsFunc(status, func(s string) bool { ip, err := parseClaimIP(s); return err == nil && ip == e.ip }) {
			out = append(out, e)
		}
	}
	return out
}

// writeClaimAllocated records the addresses, the pod that most recently
// attached with the claim, and IPsAllocated=True. Nothing is written when
// all three are already so.
func (a *Agent) writeClaimAllocated(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, ips []netip.Prefix, pod *corev1.Pod) error {
	updated := claim.DeepCopy()
	if !sameAddresses(claim.Status.IPs, ips) {
		// Recorded as written otherwise ("10.0.0.5/24" stays so after the
		// subnet grew): an agent never rewrites a claim's addresses.
		updated.Status.IPs = make([]string, len(ips))
		for i, p := range ips {
			updated.Status.IPs[i] = p.String()
		}
	}
	updated.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: pod.Name}
	changedCond := meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: conditionIPsAllocated, Status: metav1.ConditionTrue, Reason: string(condReasonAllocated),
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

// reportOutOfPool sets AddressesInPool on the claim: False naming the
// addresses the pool no longer hands out, True once none is left. A claim
// that never had an address outside is not written.
func (a *Agent) reportOutOfPool(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pool string, outside []string) {
	cond := claimstatus.InPool([]string{pool}, outside, claim.Generation)
	if len(outside) == 0 && meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionInPool) == nil {
		return
	}
	updated := claim.DeepCopy()
	if !meta.SetStatusCondition(&updated.Status.Conditions, cond) {
		return
	}
	if err := a.claims.UpdateStatus(ctx, updated); err != nil {
		// The status write that follows retries with a fresh claim; this
		// condition is informational and the next ADD sets it again.
		a.log.Error(err, "reporting addresses outside the pool on the claim", "claim", claim.Namespace+"/"+claim.Name)
		return
	}
	*claim = *updated
}

// reportClaimFailure sets IPsAllocated=False with the reason OVN-Kubernetes
// uses; the addresses in status are left as they are.
func (a *Agent) reportClaimFailure(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, cause error) {
	reason := condReasonInternal
	switch reasonOf(cause) {
	case reasonExhausted:
		reason = condReasonExhausted
	case reasonConflict:
		reason = condReasonConflict
	}
	updated := claim.DeepCopy()
	if !meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type: conditionIPsAllocated, Status: metav1.ConditionFalse, Reason: string(reason), Message: cause.Error(), ObservedGeneration: claim.Generation,
	}) {
		return
	}
	if err := a.claims.UpdateStatus(ctx, updated); err != nil {
		a.log.Error(err, "reporting a failed allocation on the claim", "claim", claim.Namespace+"/"+claim.Name)
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
