// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservationindex"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Requested addresses are reserved here, by the controller, before the
// first launcher pod runs, rather than left to the agent's first ADD: the
// IPReservation is created first (its name is the lock, as for the agent),
// then the claim's status.ips is written. Two VMs asking for one address
// thus learn which one has it when they are created, from a claim
// condition, not when the second one fails to start; and the agent, which
// honours a claim's recorded addresses, needs no change to use them. Until
// the addresses are recorded, claimstatus.RequestedAnnotation on the claim
// (set when it is created) stops the agent from allocating others.

// requestOutcome is what became of a request.
type requestOutcome struct {
	reason  string
	message string
	// ips are the claim's addresses, once reserved: the requested ones and,
	// on a dual-stack network asked for one family, one of the other.
	ips []netip.Prefix
	// retry: the outcome may change without the VM, the NAD or the claim
	// changing (an address freed, a pool created).
	retry bool
}

func refused(reason string, retry bool, format string, args ...any) *requestOutcome {
	return &requestOutcome{reason: reason, message: fmt.Sprintf(format, args...), retry: retry}
}

// errPoolNotFound: the network names an IPPool that does not exist.
var errPoolNotFound = errors.New("IPPool not found")

// takenError says who holds an address, in words fit for the claim's
// namespace (never naming another namespace's objects).
type takenError struct{ msg string }

func (e *takenError) Error() string { return e.msg }

// honourRequest reserves and records the addresses d requests for claim,
// or records on the claim (condition, and an Event on the owner) why it
// cannot. retry asks for a later look.
func (w *claimWriter) honourRequest(ctx context.Context, ownerObj client.Object, claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) (retry bool, err error) {
	if d.Request == nil {
		if len(claim.Status.IPs) == 0 && meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested) != nil {
			// The request was withdrawn before the first allocation.
			updated := claim.DeepCopy()
			meta.RemoveStatusCondition(&updated.Status.Conditions, claimstatus.ConditionRequested)
			if updated.Status.IPs == nil {
				updated.Status.IPs = []string{} // required by the CRD schema
			}
			if err := w.client.Status().Update(ctx, updated); err != nil {
				return false, fmt.Errorf("clearing condition %s of IPAMClaim %s/%s: %w", claimstatus.ConditionRequested, claim.Namespace, claim.Name, err)
			}
		}
		return false, nil
	}
	var out *requestOutcome
	if len(claim.Status.IPs) > 0 {
		out = w.judgeRecorded(ctx, claim, d)
	} else {
		out, err = w.reserveRequested(ctx, claim, d)
	}
	if err != nil || out == nil {
		return false, err
	}
	return out.retry, w.recordOutcome(ctx, ownerObj, claim, d, out)
}

// reserveRequested reserves the requested addresses of a claim that has
// none yet. nil, nil: the network is not ipkeeper's, nothing to do.
func (w *claimWriter) reserveRequested(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) (*requestOutcome, error) {
	if d.Request.err != nil {
		return refused(claimstatus.ReasonRequestedInvalid, false, "%v", d.Request.err), nil
	}
	addrs, err := parseRequested(d.Request.raw)
	if err != nil {
		return refused(claimstatus.ReasonRequestedInvalid, false, "network %q: %v", d.LogicalNetwork, err), nil
	}
	cfg, ranges, err := w.network(ctx, d)
	switch {
	case errors.Is(err, errPoolNotFound):
		return refused(claimstatus.ReasonRequestedPoolNotFound, true, "network %q uses IPPool %q, which does not exist; %s is reserved once it does",
			d.LogicalNetwork, cfg.Pool, joinAddrs(addrs)), nil
	case badConfig(err):
		return refused(claimstatus.ReasonRequestedInvalid, false, "network %q: %v", d.LogicalNetwork, err), nil
	case err != nil:
		return nil, err
	case cfg == nil:
		return nil, nil
	}
	pool := cfg.PoolName()
	places, err := placeRequested(ranges, pool, addrs)
	if err != nil {
		// Retried: a pool edit (a range added, an exclude dropped) fixes it
		// without the VM or the NAD changing.
		return refused(claimstatus.ReasonRequestedOutsidePool, true, "network %q cannot hand out the requested address: %v", d.LogicalNetwork, err), nil
	}
	var created []*ipkeeperv1alpha1.IPReservation
	rollback := func() {
		for _, r := range created {
			if err := w.client.Delete(context.WithoutCancel(ctx), r, client.Preconditions{UID: &r.UID}); client.IgnoreNotFound(err) != nil {
				log.FromContext(ctx).Error(err, "releasing a requested address after the request failed", "reservation", r.Name)
			}
		}
	}
	var ips []netip.Prefix
	for _, p := range places {
		res, isNew, err := w.reserveAddr(ctx, claim, cfg, p.ip)
		var taken *takenError
		if errors.As(err, &taken) {
			rollback()
			return refused(claimstatus.ReasonRequestedTaken, true, "%s on network %q is %s", p.ip, d.LogicalNetwork, taken.msg), nil
		}
		if err != nil {
			rollback()
			return nil, err
		}
		if isNew {
			created = append(created, res)
		}
		ips = append(ips, p.prefix())
	}
	for _, family := range missingFamilies(ranges, places) {
		p, res, err := w.reserveOther(ctx, claim, cfg, family)
		if errors.Is(err, allocator.ErrExhausted) {
			rollback()
			return refused(claimstatus.ReasonRequestedExhausted, true, "%s is free, but network %q has no free address of the other IP family (%s), which the VM did not request",
				joinAddrs(addrs), d.LogicalNetwork, rangeList(family)), nil
		}
		if err != nil {
			rollback()
			return nil, err
		}
		if res != nil {
			created = append(created, res)
		}
		ips = append(ips, p)
	}
	return &requestOutcome{reason: claimstatus.ReasonRequestedReserved, ips: ips,
		message: fmt.Sprintf("requested %s reserved for network %q; claim addresses %s", joinAddrs(addrs), d.LogicalNetwork, joinPrefixes(ips))}, nil
}

// judgeRecorded compares the request with the addresses a claim already
// holds. A requested address the claim reserved but does not record (its
// status was written by someone else in between) is released.
func (w *claimWriter) judgeRecorded(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) *requestOutcome {
	recorded := map[netip.Addr]bool{}
	for _, s := range claim.Status.IPs {
		if p, err := netip.ParsePrefix(s); err == nil {
			recorded[p.Addr()] = true
		} else if ip, err := netip.ParseAddr(s); err == nil {
			recorded[ip] = true
		}
	}
	var addrs []netip.Addr
	if d.Request.err == nil {
		addrs, _ = parseRequested(d.Request.raw)
	}
	var missing []netip.Addr
	for _, ip := range addrs {
		if !recorded[ip] {
			missing = append(missing, ip)
		}
	}
	if len(addrs) > 0 && len(missing) == 0 {
		return &requestOutcome{reason: claimstatus.ReasonRequestedReserved,
			message: fmt.Sprintf("requested %s reserved for network %q; claim addresses %s", joinAddrs(addrs), d.LogicalNetwork, strings.Join(claim.Status.IPs, ", "))}
	}
	if cfg, _, err := w.network(ctx, d); err == nil && cfg != nil {
		w.releaseUnrecorded(ctx, claim, cfg.LockKey(), missing)
	}
	return refused(claimstatus.ReasonRequestedAlreadyAllocated, false,
		"the claim already holds %s; a requested address applies only before a claim's first allocation (deleting the claim while the VM is stopped gives the VM the requested address, or a new one)",
		strings.Join(claim.Status.IPs, ", "))
}

// releaseUnrecorded deletes the claim's reservations of requested addresses
// its status does not record and no agent has used (spec.node unset: made
// here), at once as the agent discards what no workload got. Failures are
// logged; the claim's deletion releases them anyway.
func (w *claimWriter) releaseUnrecorded(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, lockKey string, ips []netip.Addr) {
	for _, ip := range ips {
		var res ipkeeperv1alpha1.IPReservation
		if err := w.live.Get(ctx, types.NamespacedName{Name: naming.Reservation(lockKey, ip)}, &res); err != nil {
			continue
		}
		if res.Spec.Owner.UID != claim.UID || res.Spec.Node != "" {
			continue
		}
		if err := w.client.Delete(ctx, &res, client.Preconditions{UID: &res.UID, ResourceVersion: &res.ResourceVersion}); client.IgnoreNotFound(err) != nil {
			log.FromContext(ctx).Error(err, "releasing a requested address the claim does not record", "reservation", res.Name)
		}
	}
}

// network returns the ipkeeper configuration of d's network and the ranges
// it hands out: its IPPool's, or, for an inline network whose pool the
// agent has not created yet (it does on the first ADD), the NAD's. cfg is
// nil, without error, when the network's IPAM is not ipkeeper.
func (w *claimWriter) network(ctx context.Context, d Desired) (*ipamconfig.Config, []iprange.Range, error) {
	var nad nadv1.NetworkAttachmentDefinition
	if err := w.client.Get(ctx, d.NAD, &nad); err != nil {
		return nil, nil, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", d.NAD, err)
	}
	conf, found, err := multus.PluginConfig(&nad, ipamconfig.PluginType)
	if err != nil || !found {
		return nil, nil, err
	}
	cfg, err := ipamconfig.Parse(conf)
	if err != nil {
		return nil, nil, fmt.Errorf("NetworkAttachmentDefinition %s: %w", d.NAD, err)
	}
	var pool ipkeeperv1alpha1.IPPool
	err = w.pools.Get(ctx, types.NamespacedName{Name: cfg.PoolName()}, &pool)
	switch {
	case apierrors.IsNotFound(err) && cfg.Pool != "":
		return cfg, nil, errPoolNotFound
	case apierrors.IsNotFound(err):
		return cfg, cfg.Ranges, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading IPPool %s: %w", cfg.PoolName(), err)
	}
	ranges, err := ipamconfig.PoolRanges(&pool.Spec)
	if err != nil {
		return nil, nil, fmt.Errorf("IPPool %s: %w", pool.Name, err)
	}
	return cfg, ranges, nil
}

// badConfig tells a network configuration that cannot be used (the NAD's,
// whose edit re-queues the VM, or the IPPool's) from a failed read
// (returned, so retried).
func badConfig(err error) bool {
	var fe *ipamconfig.FieldError
	var ne *multus.NADError
	return errors.As(err, &fe) || errors.As(err, &ne)
}

// reserveAddr makes ip the claim's by creating its IPReservation, as the
// agent would. An existing one is adopted when it is the claim's (an
// earlier attempt); anyone else's is a *takenError.
func (w *claimWriter) reserveAddr(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, cfg *ipamconfig.Config, ip netip.Addr) (_ *ipkeeperv1alpha1.IPReservation, isNew bool, _ error) {
	pool := cfg.PoolName()
	if err := ipkeeperv1alpha1.ValidateIP(ip); err != nil {
		return nil, false, fmt.Errorf("address %s of pool %s: %w", ip, pool, err)
	}
	res := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Reservation(cfg.LockKey(), ip),
			Labels: naming.ReservationLabels(cfg.Name, string(ipkeeperv1alpha1.OwnerIPAMClaim)),
		},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Network: cfg.Name, Pool: pool, IP: ip.String(), InterfaceName: claim.Spec.Interface,
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	err := w.client.Create(ctx, res)
	if err == nil {
		return res, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("creating IPReservation %s: %w", res.Name, err)
	}
	cur := &ipkeeperv1alpha1.IPReservation{}
	if err := w.live.Get(ctx, client.ObjectKeyFromObject(res), cur); err != nil {
		// Gone meanwhile: the next attempt may get it.
		return nil, false, fmt.Errorf("reading IPReservation %s: %w", res.Name, err)
	}
	o := cur.Spec.Owner
	switch {
	case o.Kind == ipkeeperv1alpha1.OwnerIPAMClaim && o.UID == claim.UID && !cur.Spec.Released():
		return cur, false, nil
	case cur.Spec.Released():
		return nil, false, &takenError{fmt.Sprintf("released by its previous holder and held until %s (the pool's reuse cooldown)", cur.Spec.ReuseAfter.UTC().Format("2006-01-02T15:04:05Z"))}
	case o.Namespace != claim.Namespace:
		return nil, false, &takenError{"reserved by a workload in another namespace"}
	default:
		return nil, false, &takenError{fmt.Sprintf("reserved by %s %s in this namespace", o.Kind, o.Name)}
	}
}

// maxCollisions bounds the creates reserveOther may lose to holders the
// cache did not show yet.
const maxCollisions = 64

// reserveOther reserves an address of the family of ranges the VM did not
// request: the one the claim already reserved (an earlier attempt), else
// a free one, as the agent would choose it. res is the reservation when
// made now, nil when it was the claim's already.
func (w *claimWriter) reserveOther(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, cfg *ipamconfig.Config, ranges []iprange.Range) (netip.Prefix, *ipkeeperv1alpha1.IPReservation, error) {
	pool := cfg.PoolName()
	held, err := reservationindex.ByOwner(ctx, w.pools, claim.UID)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	for _, r := range held {
		ip, err := netip.ParseAddr(r.Spec.IP)
		if err != nil || naming.PoolOf(r.Spec.Pool, r.Spec.Network) != pool || r.Spec.Released() {
			continue
		}
		for _, rng := range ranges {
			if rng.Usable(ip) == nil {
				return netip.PrefixFrom(ip, rng.Subnet().Bits()), nil, nil
			}
		}
	}
	taken, err := reservationindex.Taken(ctx, w.pools, pool)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	isTaken := func(a netip.Addr) bool { return taken[a] }
	collisions := 0
	for _, rng := range ranges {
		for {
			ip, err := allocator.Candidate(rng, isTaken, string(claim.UID))
			if errors.Is(err, allocator.ErrExhausted) {
				break
			}
			if err != nil {
				return netip.Prefix{}, nil, fmt.Errorf("choosing an address in range %s: %w", rng, err)
			}
			res, isNew, err := w.reserveAddr(ctx, claim, cfg, ip)
			var te *takenError
			if errors.As(err, &te) {
				taken[ip] = true
				if collisions++; collisions > maxCollisions {
					return netip.Prefix{}, nil, fmt.Errorf("%d addresses of pool %s the cache showed free were held: the cache is behind; retrying", collisions, pool)
				}
				continue
			}
			if err != nil {
				return netip.Prefix{}, nil, err
			}
			if !isNew {
				res = nil
			}
			return netip.PrefixFrom(ip, rng.Subnet().Bits()), res, nil
		}
	}
	return netip.Prefix{}, nil, allocator.ErrExhausted
}

// recordOutcome writes the condition (and, once reserved, status.ips) on
// the claim and, when the condition changed, an Event on the owner.
func (w *claimWriter) recordOutcome(ctx context.Context, ownerObj client.Object, claim *ipamclaimsv1alpha1.IPAMClaim, d Desired, out *requestOutcome) error {
	updated := claim.DeepCopy()
	cond := metav1.Condition{Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: out.reason, Message: out.message, ObservedGeneration: claim.Generation}
	if out.reason == claimstatus.ReasonRequestedReserved {
		cond.Status = metav1.ConditionTrue
	}
	changed := meta.SetStatusCondition(&updated.Status.Conditions, cond)
	if len(out.ips) > 0 {
		updated.Status.IPs = make([]string, len(out.ips))
		for i, p := range out.ips {
			updated.Status.IPs[i] = p.String()
		}
		changed = true
	}
	if !changed {
		return nil
	}
	if updated.Status.IPs == nil {
		updated.Status.IPs = []string{} // required by the CRD schema
	}
	// Optimistic: a status the agent wrote meanwhile is never overwritten.
	if err := w.client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("recording the requested addresses on IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if cond.Status == metav1.ConditionTrue {
		log.FromContext(ctx).Info("reserved requested addresses", "claim", claim.Name, "network", d.LogicalNetwork, "ips", updated.Status.IPs)
		w.recorder.Eventf(ownerObj, corev1.EventTypeNormal, string(ReasonRequestedReserved), "IPAMClaim %s: %s", claim.Name, out.message)
	} else {
		w.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonRequestedNotHonoured), "IPAMClaim %s (%s): %s", claim.Name, out.reason, out.message)
	}
	return nil
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
