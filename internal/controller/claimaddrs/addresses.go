// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// outcome is what one look at a claim's addresses found, for its status.
type outcome struct {
	// ips are the addresses to record, for a claim that has none yet.
	ips []netip.Prefix
	// failure, when set, is why the claim lacks (some of) its addresses:
	// IPsAllocated=False; nil: True.
	failure *failure
	// requested is the RequestedAddresses condition of a claim that asks
	// for given addresses; nil when it asks for none.
	requested *metav1.Condition
	// retry: the outcome may change without the claim changing.
	retry bool
	// held are addresses the claim holds but no longer records (status.ips
	// edited), kept while heldFor, a pod that uses the claim, runs;
	// settled: keep decided about them (nothing held when held is empty).
	held    []netip.Addr
	heldFor string
	settled bool
}

// held is a reservation the claim holds in its pool.
type held struct {
	res *ipkeeperv1alpha1.IPReservation
	ip  netip.Addr
}

// addresses reserves what the claim needs and says what to record.
func (r *Reconciler) addresses(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network) (outcome, error) {
	_, requested := claim.Annotations[claimstatus.RequestedAnnotation]
	pool, err := r.poolOf(ctx, claim, net)
	if ce := asConfigError(err); ce != nil && ce.poolMissing && requested && !claimstatus.Filled(claim) {
		out := requestRefused(claimstatus.ReasonRequestedPoolNotFound, true, "%s", ce.failure.message)
		out.failure.waiting = ce.failure.waiting
		return out, nil
	}
	if err != nil {
		return outcome{}, err
	}
	mine, err := r.heldBy(ctx, claim, pool)
	if err != nil {
		return outcome{}, err
	}
	lent, err := r.lentTo(ctx, claim, pool)
	if err != nil {
		return outcome{}, err
	}
	if claimstatus.Filled(claim) {
		if claim.Annotations[claimstatus.HandedOverAnnotation] != "" {
			// Its addresses went with a decentralized live migration (or
			// came back to the source): released once no launcher uses it.
			return outcome{}, nil
		}
		return r.keep(ctx, claim, net, pool, append(mine, lent...))
	}
	// A decentralized live migration's receiver records the source's
	// addresses, lent to it (package handover), and waits for them.
	if len(lent) > 0 {
		return outcome{ips: recordLent(pool, lent)}, nil
	}
	if claim.Annotations[claimstatus.ReceiverAnnotation] == claimstatus.ReceiverWaiting {
		return outcome{failure: &failure{reason: claimstatus.ReasonWaitingForSource,
			message: "the claim of a VM waiting to receive a decentralized live migration gets the source VM's addresses once KubeVirt synchronised the migration"}}, nil
	}
	if requested {
		return r.fillRequested(ctx, claim, net, pool, mine)
	}
	return r.fill(ctx, claim, net, pool, mine)
}

// heldBy returns the claim's reservations in the pool (not released), the
// oldest first: after a status write that failed half-way a claim can
// hold more than one of a family.
func (r *Reconciler) heldBy(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pool *ipam.Pool) ([]held, error) {
	all, err := reservationindex.ByOwner(ctx, r.Client, claim.UID)
	if err != nil {
		return nil, err
	}
	out := usable(all, claim, pool)
	slices.SortFunc(out, func(a, b held) int {
		if c := a.res.CreationTimestamp.Compare(b.res.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.res.Name, b.res.Name)
	})
	return out, nil
}

// lentTo returns the reservations of the pool lent to the claim (a
// decentralized live migration's receiver), not released.
func (r *Reconciler) lentTo(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pool *ipam.Pool) ([]held, error) {
	all, err := reservationindex.LentTo(ctx, r.Client, claim.UID)
	if err != nil {
		return nil, err
	}
	return usable(all, claim, pool), nil
}

// usable keeps the reservations of the pool the claim may use
// (reservation.ClaimMayUse: its own or lent to it, not released).
func usable(all []ipkeeperv1alpha1.IPReservation, claim *ipamclaimsv1alpha1.IPAMClaim, pool *ipam.Pool) []held {
	var out []held
	for i := range all {
		res := &all[i]
		ip, err := netip.ParseAddr(res.Spec.IP)
		if err != nil || !reservation.ClaimMayUse(res, claim.UID) || res.Spec.Pool != pool.Name {
			continue
		}
		out = append(out, held{res: res, ip: ip})
	}
	return out
}

// recordLent returns what a receiver records of the addresses lent to
// it: one per IP family, in the pool's order, as its source records them.
func recordLent(pool *ipam.Pool, lent []held) []netip.Prefix {
	var ips []netip.Prefix
	for _, family := range pool.Families() {
		for _, h := range lent {
			if h.ip.Is4() == family[0].Is4() {
				ips = append(ips, prefixOf(pool, h.ip, family))
				break
			}
		}
	}
	return ips
}

func (r *Reconciler) holderOf(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network) claimalloc.Holder {
	return claimalloc.Holder{
		Owner:     ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		Network:   net.cfg.Name,
		Interface: claim.Spec.Interface,
		Aliases:   aliasesOf(claim, net),
		ClaimGone: func(o ipkeeperv1alpha1.ReservationOwner) bool { return r.claimGone(ctx, o) },
	}
}

// claimGone reports whether the IPAMClaim o names is gone, read from the
// API server (the cache may not show a claim made an instant ago): not
// found, or its name is another claim's now. A claim being deleted is
// not gone: a launcher may still use it. Unreadable counts as there:
// taking a live claim's address is what must never happen, and the
// address is only kept a little longer.
func (r *Reconciler) claimGone(ctx context.Context, o ipkeeperv1alpha1.ReservationOwner) bool {
	var c ipamclaimsv1alpha1.IPAMClaim
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, &c)
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		log.FromContext(ctx).Error(err, "reading the claim that holds an address kept for this one's VM network; taken as still there", "holder", o.Namespace+"/"+o.Name)
		return false
	}
	return c.UID != o.UID
}

// aliasesOf returns the other names of the claim's VM network on its CNI
// network (naming.ClaimNames), for a claim of a VM or VMI: after a live
// NAD swap the network's claim had the swapped name, and made anew it has
// the plain one (or the other way round). A claim of no VM has none.
func aliasesOf(claim *ipamclaimsv1alpha1.IPAMClaim, net *network) []string {
	owner, ok := claimowner.Of(claim)
	logical := claim.Annotations[claimstatus.LogicalNetworkAnnotation]
	if !ok || logical == "" {
		return nil
	}
	var out []string
	for _, n := range naming.ClaimNames(owner.Name, logical, net.cfg.Name) {
		if n != claim.Name {
			out = append(out, n)
		}
	}
	return out
}

// fill chooses the first addresses of a claim that asks for none in
// particular: one per IP family of the pool, reusing what the claim holds
// already (a reconcile that reserved and then failed to write its status).
func (r *Reconciler) fill(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, pool *ipam.Pool, mine []held) (outcome, error) {
	back, err := r.retiredForClaim(ctx, claim, net, pool)
	if err != nil {
		return outcome{}, err
	}
	var ips []netip.Prefix
	for _, family := range pool.Families() {
		h, ok, err := r.stillHeld(ctx, claim, mine, func(h held) bool { return h.ip.Is4() == family[0].Is4() })
		if err != nil {
			return outcome{}, err
		}
		if ok {
			ips = append(ips, prefixOf(pool, h.ip, family))
			continue
		}
		ip, ok, err := r.takeBack(ctx, claim, net, pool, back, family[0].Is4())
		if err != nil {
			return outcome{}, err
		}
		if ok {
			ips = append(ips, prefixOf(pool, ip, family))
			continue
		}
		res, err := r.Alloc.Assign(ctx, pool, r.holderOf(ctx, claim, net), family, string(claim.UID))
		if errors.Is(err, ipam.ErrExhausted) {
			// What was reserved of the other family stays the claim's: the
			// retry uses it.
			return outcome{failure: &failure{reason: claimstatus.ReasonExhausted, message: fmt.Sprintf("network %q (IPPool %q) is exhausted: %v", net.cfg.Name, pool.Name, err)}, retry: true}, nil
		}
		if f := quotaFailure(err); f != nil {
			return outcome{failure: f, retry: true}, nil // as for exhaustion
		}
		if err != nil {
			return outcome{}, fmt.Errorf("IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		assigned, _ := netip.ParseAddr(res.Spec.IP)
		ips = append(ips, prefixOf(pool, assigned, family))
	}
	return outcome{ips: ips}, nil
}

// retiredForClaim returns the reservations of the pool that an earlier
// claim of this claim's namespace and name (or one of its aliases) held and that are kept back
// for it (reservation.KeptFor), the most recently released last: what the
// same VM's network had before its claim was made anew.
func (r *Reconciler) retiredForClaim(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, pool *ipam.Pool) ([]*ipkeeperv1alpha1.IPReservation, error) {
	c := r.holderOf(ctx, claim, net).Claimant()
	var out []*ipkeeperv1alpha1.IPReservation
	for _, name := range append([]string{claim.Name}, c.Aliases...) {
		all, err := reservationindex.ByClaimName(ctx, r.Client, claim.Namespace, name)
		if err != nil {
			return nil, err
		}
		for i := range all {
			if res := &all[i]; res.Spec.Pool == pool.Name && reservation.KeptFor(res, c, pool.Retains()) {
				out = append(out, res)
			}
		}
	}
	// Not released yet (nil reuseAfter) first, then the latest released.
	slices.SortFunc(out, func(a, b *ipkeeperv1alpha1.IPReservation) int {
		switch {
		case a.Spec.ReuseAfter == nil || b.Spec.ReuseAfter == nil:
			return compareBool(a.Spec.ReuseAfter != nil, b.Spec.ReuseAfter != nil)
		}
		return b.Spec.ReuseAfter.Compare(a.Spec.ReuseAfter.Time)
	})
	return out, nil
}

// takeBack reserves for the claim an address of the family among back
// (retiredForClaim) that its pool still hands out. An address another
// writer took meanwhile, or that the API server refuses, leaves the claim
// to the ordinary search: holding one address twice never happens. A
// passing failure (the API server unavailable, an answer lost) fails the
// reconcile, which retries it: filling with another address would give
// up the kept one for good.
func (r *Reconciler) takeBack(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, pool *ipam.Pool, back []*ipkeeperv1alpha1.IPReservation, is4 bool) (netip.Addr, bool, error) {
	for _, res := range back {
		ip, err := netip.ParseAddr(res.Spec.IP)
		if err != nil || ip.Is4() != is4 {
			continue
		}
		if _, err := pool.RangeFor(ip); err != nil {
			continue
		}
		if _, err := r.Alloc.Reserve(ctx, pool, r.holderOf(ctx, claim, net), ip); err != nil {
			if passing(err) {
				return netip.Addr{}, false, fmt.Errorf("IPAMClaim %s/%s: taking back %s, which its name held: %w", claim.Namespace, claim.Name, ip, err)
			}
			log.FromContext(ctx).V(1).Info("could not take back the address the claim's name held before", "ip", ip, "error", err.Error())
			continue
		}
		return ip, true, nil
	}
	return netip.Addr{}, false, nil
}

// quotaFailure is the failure of a claim whose namespace holds its pool's
// per-namespace quota (poolquota), nil for any other error. It is retried
// as exhaustion is: the namespace may free addresses, the quota grow.
func quotaFailure(err error) *failure {
	if !errors.Is(err, poolquota.ErrExceeded) {
		return nil
	}
	return &failure{reason: claimstatus.ReasonQuotaExceeded, message: err.Error()}
}

// passing reports whether a write failed for a reason that may be gone on
// a retry: not the address taken by another, nor a refusal of the
// request itself.
func passing(err error) bool {
	var taken *reservation.TakenError
	switch {
	case errors.As(err, &taken), errors.Is(err, reservation.ErrTaken), errors.Is(err, reservation.ErrChanged), errors.Is(err, poolquota.ErrExceeded),
		apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		return false
	}
	return true
}

// keep makes sure a claim holds what it records (mine: what it holds or
// is lent): each recorded address is reserved for it (an address written by an administrator, or a
// reservation deleted by hand, is reserved again if free), and what it
// holds but no longer records is released, once no pod that uses the
// claim runs: the guest of a running VM whose status.ips was edited still
// uses its address, so that address stays the claim's until the VM stops.
func (r *Reconciler) keep(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, pool *ipam.Pool, mine []held) (outcome, error) {
	var out outcome
	entries, err := claimstatus.Entries(claim)
	if err != nil {
		return outcome{failure: &failure{reason: claimstatus.ReasonInvalid, message: err.Error()}}, nil
	}
	recorded := map[netip.Addr]bool{}
	for _, rec := range entries {
		ip, i := rec.IP, rec.Index
		recorded[ip] = true
		if slices.ContainsFunc(mine, func(h held) bool { return h.ip == ip }) {
			continue
		}
		if _, err := pool.RangeFor(ip); err != nil {
			out.failure = &failure{reason: claimstatus.ReasonOutsidePool, message: fmt.Sprintf(
				"the claim records %s (status.ips[%d]), which network %q (IPPool %q) does not hand out: %v; nothing was released: fix the pool or the claim",
				ip, i, net.cfg.Name, pool.Name, err)}
			continue
		}
		_, err := r.Alloc.Reserve(ctx, pool, r.holderOf(ctx, claim, net), ip)
		var taken *reservation.TakenError
		switch {
		case errors.As(err, &taken):
			out.failure = &failure{reason: claimstatus.ReasonConflict, message: fmt.Sprintf("the claim records %s (status.ips[%d]), which on network %q %s",
				ip, i, net.cfg.Name, reservation.DescribeHolder(taken.Name, taken.Holder, claim.Namespace))}
			out.retry = true
		case quotaFailure(err) != nil:
			out.failure, out.retry = quotaFailure(err), true
		case err != nil:
			return outcome{}, fmt.Errorf("IPAMClaim %s/%s: reserving recorded %s: %w", claim.Namespace, claim.Name, ip, err)
		}
	}
	// What the claim holds but no longer records goes only once it holds
	// all it records: a recorded address it cannot have (a typo, someone
	// else's) must not cost it the address it had.
	var superseded []held
	for _, h := range mine {
		// One lent to it is its source's, never its to release.
		if !recorded[h.ip] && h.res.Spec.Owner.UID == claim.UID {
			superseded = append(superseded, h)
		}
	}
	if out.failure == nil {
		pod := ""
		if len(superseded) > 0 {
			if pod, err = r.runningPod(ctx, claim); err != nil {
				return outcome{}, err
			}
		}
		if pod != "" {
			for _, h := range superseded {
				out.held = append(out.held, h.ip)
			}
			slices.SortFunc(out.held, netip.Addr.Compare)
			out.heldFor = pod
		} else if err := r.releaseSuperseded(ctx, claim, pool, superseded); err != nil {
			return outcome{}, err
		}
		out.settled = true
	}
	if _, ok := claim.Annotations[claimstatus.RequestedAnnotation]; ok {
		out.requested = judgeRecorded(claim)
	}
	return out, nil
}

// runningPod names a pod that uses the claim and may still run: one whose
// networks annotation references it (of a claim a VM or VMI owns, one of
// its owner's launchers), being deleted or not. The cache is read first;
// when it shows none, a live list of the namespace's pods confirms it: an
// address a guest may use is released only once no such pod is left.
func (r *Reconciler) runningPod(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (string, error) {
	owner, owned := claimowner.Of(claim)
	uses := func(p *metav1.PartialObjectMetadata) bool { return !owned || owner.RunsPod(p) }
	pods, err := podrefs.Referencing(ctx, r.Client, claim.Namespace, claim.Name)
	if err != nil {
		return "", err
	}
	for i := range pods {
		if uses(&pods[i]) {
			return pods[i].Name, nil
		}
	}
	live := podrefs.MetadataList()
	if err := r.APIReader.List(ctx, live, client.InNamespace(claim.Namespace)); err != nil {
		return "", fmt.Errorf("listing the pods of namespace %s that may use IPAMClaim %s: %w", claim.Namespace, claim.Name, err)
	}
	for i := range live.Items {
		if p := &live.Items[i]; slices.Contains(podrefs.Claims(p), claim.Name) && uses(p) {
			return p.Name, nil
		}
	}
	return "", nil
}

// releaseSuperseded releases reservations the claim holds but does not
// record (status.ips was edited, or a first allocation wrote twice): each
// went to the claim's pods, perhaps, so it cools down like any release.
// The claim is read live first, so that a status the cache does not show
// yet never loses its addresses.
func (r *Reconciler) releaseSuperseded(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, pool *ipam.Pool, superseded []held) error {
	if len(superseded) == 0 {
		return nil
	}
	var fresh ipamclaimsv1alpha1.IPAMClaim
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), &fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // gone: the garbage collector releases everything
		}
		return fmt.Errorf("reading IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if fresh.UID != claim.UID || !slices.Equal(fresh.Status.IPs, claim.Status.IPs) {
		return fmt.Errorf("IPAMClaim %s/%s changed since the cache showed it; looking again", claim.Namespace, claim.Name)
	}
	cooldown, err := reservation.PoolCooldown(ctx, r.Client, r.APIReader, pool.Name)
	if err != nil {
		return err
	}
	for _, h := range superseded {
		if _, err := reservation.Release(ctx, reservation.KubeStore{Client: r.Client}, h.res, cooldown, time.Now()); err != nil {
			return fmt.Errorf("IPAMClaim %s/%s: releasing %s, which it no longer records: %w", claim.Namespace, claim.Name, h.ip, err)
		}
		log.FromContext(ctx).Info("released an address the claim no longer records", "claim", claim.Namespace+"/"+claim.Name, "ip", h.ip, "reservation", h.res.Name)
	}
	return nil
}

// stillHeld returns the oldest reservation of mine that match accepts and
// that the claim still holds, read live: mine comes from the cache, which
// may still show a reservation an earlier attempt rolled back or someone
// deleted, and recording an address whose reservation is gone would hand
// the VM an address nobody holds for it. Only reused reservations (the
// rare path: an attempt that failed after reserving) cost a read.
func (r *Reconciler) stillHeld(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, mine []held, match func(held) bool) (held, bool, error) {
	for _, h := range mine { // oldest first
		if !match(h) {
			continue
		}
		var cur ipkeeperv1alpha1.IPReservation
		err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(h.res), &cur)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return held{}, false, fmt.Errorf("IPAMClaim %s/%s: reading IPReservation %s: %w", claim.Namespace, claim.Name, h.res.Name, err)
		case cur.UID != h.res.UID || cur.Spec.Owner.UID != claim.UID || cur.Spec.Released():
			continue
		}
		return held{res: &cur, ip: h.ip}, true, nil
	}
	return held{}, false, nil
}

// prefixOf returns ip with the prefix length of the pool's range that
// hands it out, else (a range removed or narrowed since it was reserved)
// of the first range whose subnet contains it, else of the family's first
// range.
func prefixOf(pool *ipam.Pool, ip netip.Addr, family []iprange.Range) netip.Prefix {
	if r, err := pool.RangeFor(ip); err == nil {
		return netip.PrefixFrom(ip, r.Subnet().Bits())
	}
	for _, r := range pool.Ranges {
		if r.Contains(ip) {
			return netip.PrefixFrom(ip, r.Subnet().Bits())
		}
	}
	return netip.PrefixFrom(ip, family[0].Subnet().Bits())
}
