// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// maxReleaseRaces bounds the re-reads of a reservation that keeps changing
// while it is being released.
const maxReleaseRaces = 3

// release deletes reservations, each only at the version the caller
// decided on, continuing past failures; each failure is logged, and they
// are returned together (callers that cannot act on them ignore them: the
// next ADD, DEL or the controller's GC tries again). When
// a reservation changed since, it is re-read and deleted only if still
// reports the new version should still go (nil: never; the caller's
// decision was about a version that no longer exists).
func (a *Agent) release(ctx context.Context, entries []entry, verb string, still func(*ipkeeperv1alpha1.IPReservation) bool) error {
	var errs []error
	for _, e := range entries {
		if err := a.releaseOne(ctx, e, verb, still); err != nil {
			a.log.Error(err, "releasing a reservation", "verb", verb, "reservation", e.name)
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return nil
}

func (a *Agent) releaseOne(ctx context.Context, e entry, verb string, still func(*ipkeeperv1alpha1.IPReservation) bool) error {
	for range maxReleaseRaces {
		err := a.store.Delete(ctx, e.name, e.uid, e.rv)
		switch {
		case err == nil:
			a.idx.released(e.name, e.uid, time.Now())
			a.metrics.releases.WithLabelValues(verb).Inc()
			a.log.V(1).Info("released", "verb", verb, "reservation", e.name, "ip", e.ip, "owner", e.owner.Namespace+"/"+e.owner.Name)
			return nil
		case errors.Is(err, ErrGone):
			a.idx.released(e.name, e.uid, time.Now())
			return nil
		case !errors.Is(err, ErrChanged):
			return err
		}
		cur, err := a.store.Get(ctx, e.name)
		if errors.Is(err, ErrGone) {
			a.idx.released(e.name, e.uid, time.Now())
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != e.uid {
			// Ours went and someone else reserved the address since.
			a.idx.released(e.name, e.uid, time.Now())
			a.observeLive(cur)
			return nil
		}
		a.observeLive(cur)
		if still == nil || !still(cur) {
			return nil
		}
		e, _ = entryOf(cur)
	}
	return fmt.Errorf("reservation %s kept changing while being released; retry", e.name)
}

// observeLive puts a reservation just read live into the index.
func (a *Agent) observeLive(r *ipkeeperv1alpha1.IPReservation) {
	if e, ok := entryOf(r); ok {
		a.idx.upsert(e)
	}
}
