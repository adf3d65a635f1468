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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Sticky by MAC (ipam.sticky_mac): an attachment presenting a MAC gets
// back the address a pod of its namespace released with that MAC, while
// the released reservation is still there (its pool's reuseCooldown),
// on whichever node it starts. The released reservation may be another
// node's, which this agent watches neither by label nor in its blocks, so
// it is found by a live list of the MAC's label; the node-bound admission
// policy lets an agent delete another node's reservation only when it is
// such a released one (labelled with a MAC), so this is a delete and a
// create of its own, as every take-back (reservation.TakeBack).

// stickyTakeBack takes back, for the holder, the family's address its MAC
// held (reservation.KeptForMAC); ok is false when there is none to take
// or someone else took it first, and the search goes on as for anybody.
func (a *Agent) stickyTakeBack(ctx context.Context, req *request, family []iprange.Range, h holder) (e entry, ok bool, err error) {
	if req.mac == nil {
		return entry{}, false, nil
	}
	kept, err := a.store.WithMAC(ctx, req.pool.Name, req.mac)
	if err != nil {
		return entry{}, false, fail(reasonInternal, codeTryAgainLater, err)
	}
	req.macSeen = latestAttached(kept, h)
	old, ip, found := latestKept(kept, h, req, family[0].Is4())
	if !found {
		return entry{}, false, nil
	}
	block := reservation.NoBlock
	if a.blocks != nil && a.blocks.Set().Owns(req.pool.Name, ip) {
		block = reservation.NodeBlock
	}
	// Until the take-back returns, this node's searches skip the address.
	cur, err := ipam.Reserve(ctx, a.engine, req.pool.Name, ip, func(ctx context.Context) (*ipkeeperv1alpha1.IPReservation, error) {
		return reservation.TakeBack(ctx, a.store, old, a.params(req, ip, h, block), func(r *ipkeeperv1alpha1.IPReservation) bool {
			return reservation.KeptForMAC(r, h.owner, req.mac)
		})
	})
	switch {
	case errors.Is(err, reservation.ErrTaken):
		a.log.Info("the address a MAC held was taken by someone else first; allocating another", "pod", h.owner.Namespace+"/"+h.owner.Name,
			"network", req.cfg.Name, "mac", req.mac.String(), "ip", ip.String())
		return entry{}, false, nil
	case err != nil:
		return entry{}, false, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("network %q: %w", req.cfg.Name, err))
	}
	e, _ = index.EntryOf(cur)
	a.reservations.Wrote(e)
	a.metrics.allocations.Inc()
	a.metrics.stickyBack.Inc()
	a.log.Info("gave a pod back the address its MAC held", "pod", h.owner.Namespace+"/"+h.owner.Name, "network", req.cfg.Name,
		"mac", req.mac.String(), "ip", ip.String(), "previousPod", old.Spec.Owner.Name, "previousNode", old.Spec.Node)
	return e, true, nil
}

// latestKept picks, among reservations listed by MAC, the one of the
// family kept for the holder that was attached last (the workload's
// latest address), whose address the pool still hands out. Not the one
// released last: an earlier pod whose DEL never came is released by the
// garbage collector, after its successor's DEL. Each attachment is
// stamped in a later second than those its agent listed (attachedAt);
// ties, of attachments no agent saw together, go to the later release,
// then the name.
func latestKept(rs []ipkeeperv1alpha1.IPReservation, h holder, req *request, is4 bool) (*ipkeeperv1alpha1.IPReservation, netip.Addr, bool) {
	rs = slices.DeleteFunc(slices.Clone(rs), func(r ipkeeperv1alpha1.IPReservation) bool {
		ip, err := netip.ParseAddr(r.Spec.IP)
		return err != nil || ip.Is4() != is4 || r.Spec.Pool != req.pool.Name || !reservation.KeptForMAC(&r, h.owner, req.mac) ||
			req.pool.Usable(ip) != nil
	})
	if len(rs) == 0 {
		return nil, netip.Addr{}, false
	}
	attached := func(r ipkeeperv1alpha1.IPReservation) time.Time {
		if r.Spec.AttachedAt == nil {
			return time.Time{}
		}
		return r.Spec.AttachedAt.Time
	}
	best := slices.MaxFunc(rs, func(x, y ipkeeperv1alpha1.IPReservation) int {
		if c := attached(x).Compare(attached(y)); c != 0 {
			return c
		}
		if c := x.Spec.ReuseAfter.Compare(y.Spec.ReuseAfter.Time); c != 0 {
			return c
		}
		return strings.Compare(y.Name, x.Name)
	})
	return &best, netip.MustParseAddr(best.Spec.IP), true
}

// latestAttached is when the latest of the MAC's attachments in the
// holder's namespace, in use or released, was made, as its node stamped
// it: the attachment being made now is stamped after it (attachedAt).
func latestAttached(rs []ipkeeperv1alpha1.IPReservation, h holder) time.Time {
	var latest time.Time
	for _, r := range rs {
		o := r.Spec.Owner
		if r.Spec.AttachedAt != nil && o.Kind == ipkeeperv1alpha1.OwnerPod && o.Namespace == h.owner.Namespace && r.Spec.AttachedAt.After(latest) {
			latest = r.Spec.AttachedAt.Time
		}
	}
	return latest
}

// attachedAt stamps an attachment made now: by this node's clock, but in
// a later whole second (as the API server keeps the time) than every
// attachment of its MAC the agent saw (req.macSeen), so latestKept
// orders a MAC's attachments as they happened, however quickly one
// followed another and whichever node's clock runs ahead.
func attachedAt(req *request) *metav1.Time {
	now := time.Now()
	if seen := req.macSeen.Truncate(time.Second); !req.macSeen.IsZero() && !now.Truncate(time.Second).After(seen) {
		now = seen.Add(time.Second)
	}
	return &metav1.Time{Time: now}
}
