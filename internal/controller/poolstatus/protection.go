// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A pool in use is never deleted under its holders. Deleting a pool
// whose reservations are left would drop what they keep: its released
// addresses' cooldown (the garbage collector releases by the pool's
// cooldown, which a missing pool has none of) and, for an inline
// network, the definition its NADs are judged by. So every pool carries
// v1alpha1.PoolInUseFinalizer, added by this controller when it first
// counts the pool, and a deleted pool keeps it, with Deleting=True saying
// why, until no reservation of it is left: a held one goes when its
// owner releases it, a released one when its cooldown is over (the
// garbage collector). The cache says when the last one went; a live list
// confirms it before the finalizer goes, as the garbage collector never
// frees on cache evidence alone.

// liveRecheck is how soon a deleted pool whose reservations the cache
// counts none of, but the API server still lists, is looked at again.
const liveRecheck = time.Second

// protect keeps pool's finalizer: it adds it to a pool without it, and
// removes it from a deleted pool once no reservation of it is left.
// done is true when the pool is gone from this controller's care (its
// finalizer removed); requeue is when to look again.
func (r *Reconciler) protect(ctx context.Context, pool *v1alpha1.IPPool, c reservationindex.Count) (done bool, requeue time.Duration, err error) {
	has := controllerutil.ContainsFinalizer(pool, v1alpha1.PoolInUseFinalizer)
	switch {
	case pool.DeletionTimestamp == nil && !has:
		return false, 0, r.patchFinalizers(ctx, pool, controllerutil.AddFinalizer)
	case pool.DeletionTimestamp == nil || !has || held(c) > 0:
		return false, 0, nil
	}
	var live v1alpha1.IPReservationList
	if err := r.APIReader.List(ctx, &live, client.MatchingFields{"spec.pool": pool.Name}, client.Limit(1)); err != nil {
		return false, 0, fmt.Errorf("listing the reservations of deleted IPPool %s: %w", pool.Name, err)
	}
	if len(live.Items) > 0 {
		return false, liveRecheck, nil // the cache is behind
	}
	if err := r.patchFinalizers(ctx, pool, controllerutil.RemoveFinalizer); err != nil {
		return false, 0, err
	}
	log.FromContext(ctx).Info("the deleted IPPool has no reservation left: its deletion proceeds", "pool", pool.Name)
	r.forget(pool.Name)
	return true, 0, nil
}

// patchFinalizers adds or removes PoolInUseFinalizer, at the version read:
// a merge patch replaces the whole list, so another writer's finalizer
// added meanwhile must not be lost.
func (r *Reconciler) patchFinalizers(ctx context.Context, pool *v1alpha1.IPPool, change func(client.Object, string) bool) error {
	before := pool.DeepCopy()
	change(pool, v1alpha1.PoolInUseFinalizer)
	if err := r.Client.Patch(ctx, pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching the finalizers of IPPool %s: %w", pool.Name, err)
	}
	return nil
}

// held is the number of addresses the pool's reservations hold.
func held(c reservationindex.Count) int64 {
	n := c.OutOfRange
	for _, u := range c.Used {
		n += u
	}
	return n
}

// deletingMessage says why a deleted pool is still there.
func deletingMessage(pool string, c reservationindex.Count) string {
	n := held(c)
	what := fmt.Sprintf("%d reservations", n)
	if n == 1 {
		what = "1 reservation"
	}
	if c.CoolingDown > 0 {
		what += fmt.Sprintf(", %d of them cooling down,", c.CoolingDown)
	}
	return fmt.Sprintf("the deletion waits for its %s to go (a held address when its owner releases it, a released one when its cooldown is over); "+
		"ipkeeper-controller then removes finalizer %s (kubectl get ipreservations --field-selector spec.pool=%s lists them)",
		what, v1alpha1.PoolInUseFinalizer, pool)
}
