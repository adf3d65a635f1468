// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// maxReleaseRaces bounds the re-reads of a reservation that keeps changing
// while it is being released.
const maxReleaseRaces = 3

// release lets reservations go, each only at the version the caller
// decided on, continuing past failures; each failure is logged, and they
// are returned together (callers that cannot act on them ignore them: the
// next ADD, DEL or the controller's GC tries again). In a pool with a
// reuse cooldown a reservation is retired (spec.reuseAfter set, see
// package reservation) instead of deleted; a pool that cannot be read fails the
// release (retried later) rather than guess. When a reservation changed
// since, it is re-read and released only if still reports the new version
// should still go (nil: never; the caller's decision was about a version
// that no longer exists).
func (a *Agent) release(ctx context.Context, entries []entry, verb string, still func(*ipkeeperv1alpha1.IPReservation) bool) error {
	return a.releaseAll(ctx, entries, verb, still, true)
}

// discard deletes, at once and whatever the pool's cooldown, reservations
// this very ADD created and that no workload ever got (its rollback, or a
// lost claim race): their addresses were never handed out, so there is
// nothing to cool down.
func (a *Agent) discard(ctx context.Context, entries []entry, verb string) error {
	return a.releaseAll(ctx, entries, verb, nil, false)
}

func (a *Agent) releaseAll(ctx context.Context, entries []entry, verb string, still func(*ipkeeperv1alpha1.IPReservation) bool, cool bool) error {
	var errs []error
	for _, e := range entries {
		if err := a.releaseOne(ctx, e, verb, still, cool); err != nil {
			a.log.Error(err, "releasing a reservation", "verb", verb, "reservation", e.Name)
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return nil
}

func (a *Agent) releaseOne(ctx context.Context, e entry, verb string, still func(*ipkeeperv1alpha1.IPReservation) bool, cool bool) error {
	var how reservation.Decision // delete
	if cool {
		cooldown, err := a.cooldown(ctx, e.Pool)
		if err != nil {
			return err
		}
		how = reservation.Decide(cooldown, time.Now())
	}
	for range maxReleaseRaces {
		if e.Released() {
			return nil // released already (by another writer): it waits out its cooldown
		}
		cur, err := reservation.ReleaseAt(ctx, a.store, e.Name, e.UID, e.ResourceVersion, how)
		switch {
		case err == nil && how.Retire:
			a.recordLive(cur)
			a.metrics.releases.WithLabelValues(verb).Inc()
			a.log.V(1).Info("released; the address cools down", "verb", verb, "reservation", e.Name, "ip", e.IP,
				"owner", e.Owner.Namespace+"/"+e.Owner.Name, "reuseAfter", how.ReuseAfter)
			return nil
		case err == nil:
			a.reservations.Deleted(e.Name, e.UID, time.Now())
			a.metrics.releases.WithLabelValues(verb).Inc()
			a.log.V(1).Info("released", "verb", verb, "reservation", e.Name, "ip", e.IP, "owner", e.Owner.Namespace+"/"+e.Owner.Name)
			return nil
		}
		switch {
		case errors.Is(err, ErrGone):
			a.reservations.Deleted(e.Name, e.UID, time.Now())
			return nil
		case !errors.Is(err, ErrChanged):
			return err
		}
		cur, err = a.store.Get(ctx, e.Name)
		if errors.Is(err, ErrGone) {
			a.reservations.Deleted(e.Name, e.UID, time.Now())
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != e.UID {
			// Ours went and someone else reserved the address since.
			a.reservations.Deleted(e.Name, e.UID, time.Now())
			a.recordLive(cur)
			return nil
		}
		a.recordLive(cur)
		if still == nil || !still(cur) {
			return nil
		}
		e, _ = index.EntryOf(cur)
	}
	return fmt.Errorf("reservation %s kept changing while being released; retry", e.Name)
}

// cooldown reads a pool's reuse cooldown (from the cache). A pool that no
// longer exists has none: its reservations are deleted as before pools
// had cooldowns. One that cannot be read is an error: guessing "none"
// would hand a cooling address out early, and the caller's retry (the
// runtime repeats a failed DEL) decides once it can be read.
func (a *Agent) cooldown(ctx context.Context, pool string) (time.Duration, error) {
	p, err := a.poolStore.Get(ctx, pool)
	switch {
	case errors.Is(err, ErrPoolMissing):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the reuse cooldown of IPPool %q: %w", pool, err)
	}
	return reservation.Cooldown(p), nil
}

// reclaimExpired deletes one of this node's released reservations of the
// pool in range r whose cooldown is over, each at the version the index
// holds, and returns its address, free now: the agent's own expiry, for
// allocations that find the pool exhausted, so addresses do not stay held
// where the controller's garbage collector does not run. Other nodes'
// are left to them and to the garbage collector: the node-bound admission
// policy lets an agent delete only its own node's reservations.
func (a *Agent) reclaimExpired(ctx context.Context, pool string, usable func(ip netip.Addr) bool) (netip.Addr, bool) {
	for _, e := range a.reservations.Expired(a.opts.NodeName, pool, time.Now()) {
		if !usable(e.IP) {
			continue
		}
		err := reservation.Discard(ctx, a.store, e.Name, e.UID, e.ResourceVersion)
		switch {
		case err == nil:
			a.reservations.Deleted(e.Name, e.UID, time.Now())
			a.metrics.releases.WithLabelValues("expired").Inc()
			a.log.V(1).Info("deleted a released reservation whose cooldown is over", "reservation", e.Name, "ip", e.IP, "reuseAfter", e.ReuseAfter)
			return e.IP, true
		case errors.Is(err, ErrGone):
			a.reservations.Deleted(e.Name, e.UID, time.Now())
			return e.IP, true
		default:
			// Changed (or refused): the index catches up; try another.
			a.log.V(1).Info("could not delete an expired released reservation", "reservation", e.Name, "error", err.Error())
		}
	}
	return netip.Addr{}, false
}

// recordLive puts a reservation just read live into the cache.
func (a *Agent) recordLive(r *ipkeeperv1alpha1.IPReservation) {
	if e, ok := index.EntryOf(r); ok {
		a.reservations.Wrote(e)
	}
}
