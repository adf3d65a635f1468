// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Cooldown is a pool's reuse cooldown; 0 for no pool (it was deleted: no
// pool, no cooldown) or none set.
func Cooldown(pool *ipkeeperv1alpha1.IPPool) time.Duration {
	if pool == nil || pool.Spec.ReuseCooldown == nil || pool.Spec.ReuseCooldown.Duration < 0 {
		return 0
	}
	return pool.Spec.ReuseCooldown.Duration
}

// PoolCooldown reads a pool's reuse cooldown for a controller: from its
// cache, else live (a pool created a moment ago). A pool that no longer
// exists has none; one that cannot be read is an error, as guessing "none"
// would hand a cooling address out early.
func PoolCooldown(ctx context.Context, cached, live client.Reader, pool string) (time.Duration, error) {
	var p ipkeeperv1alpha1.IPPool
	err := cached.Get(ctx, client.ObjectKey{Name: pool}, &p)
	if apierrors.IsNotFound(err) && live != nil {
		err = live.Get(ctx, client.ObjectKey{Name: pool}, &p)
	}
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the reuse cooldown of IPPool %q: %w", pool, err)
	}
	return Cooldown(&p), nil
}

// Decision is how a release lets an address go.
type Decision struct {
	// Retire keeps the reservation, setting spec.reuseAfter to ReuseAfter,
	// instead of deleting it.
	Retire     bool
	ReuseAfter time.Time
}

// Decide says how to release an address whose pool has cooldown, at now:
// delete it (no cooldown), or retire it until now+cooldown, rounded up to
// the whole second (spec.reuseAfter is stored with second precision; the
// cooldown is never cut short by the rounding).
func Decide(cooldown time.Duration, now time.Time) Decision {
	if cooldown <= 0 {
		return Decision{}
	}
	want := now.Add(cooldown)
	at := want.Truncate(time.Second)
	if at.Before(want) {
		at = at.Add(time.Second)
	}
	return Decision{Retire: true, ReuseAfter: at}
}

// Left is how long a released reservation still holds its address: 0 or
// less means its cooldown is over and it may be deleted. A reservation
// not released is never due (ok false).
func Left(spec *ipkeeperv1alpha1.IPReservationSpec, now time.Time) (left time.Duration, ok bool) {
	if !spec.Released() {
		return 0, false
	}
	return spec.ReuseAfter.Sub(now), true
}

// ReleaseAt lets the reservation with that name go, only if it is still
// that object (uid) at that version (resourceVersion), as how says:
// deleted, or retired until how.ReuseAfter, returned as written (nil
// after a delete). ErrGone (wrapped) when it no longer exists,
// ErrChanged when it changed since it was judged: re-read it and decide
// again. The one release step: every other release calls it.
func ReleaseAt(ctx context.Context, s Store, name string, uid types.UID, resourceVersion string, how Decision) (*ipkeeperv1alpha1.IPReservation, error) {
	if how.Retire {
		return s.Retire(ctx, name, uid, resourceVersion, how.ReuseAfter)
	}
	return nil, s.Delete(ctx, name, uid, resourceVersion)
}

// Discard deletes a reservation at once, whatever its pool's cooldown:
// one whose address was never handed out (a rollback), or one released
// whose cooldown is over. Preconditions and errors are ReleaseAt's
// (resourceVersion "" for any version of that object).
func Discard(ctx context.Context, s Store, name string, uid types.UID, resourceVersion string) error {
	_, err := ReleaseAt(ctx, s, name, uid, resourceVersion, Decision{})
	return err
}

// Release lets a controller give an address back: it deletes res, or,
// with a cooldown, retires it (spec.reuseAfter), at res's UID and
// resourceVersion as read, so a reservation that changed since is not
// released by mistake: the error then wraps ErrChanged (read it again).
// One already gone, or already released by another writer, is done.
func Release(ctx context.Context, s Store, res *ipkeeperv1alpha1.IPReservation, cooldown time.Duration, now time.Time) (Decision, error) {
	how := Decide(cooldown, now)
	if res.Spec.Released() {
		return how, nil
	}
	_, err := ReleaseAt(ctx, s, res.Name, res.UID, res.ResourceVersion, how)
	switch {
	case err == nil, errors.Is(err, ErrGone):
		return how, nil
	case how.Retire:
		return how, fmt.Errorf("releasing IPReservation %s (reuse after %s): %w", res.Name, how.ReuseAfter.UTC().Format(time.RFC3339), err)
	default:
		return how, fmt.Errorf("releasing IPReservation %s: %w", res.Name, err)
	}
}
