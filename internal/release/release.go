// SPDX-License-Identifier: Apache-2.0

// Package release is the one way an owner gives an address back: its
// IPReservation is deleted, or, in a pool with a reuse cooldown, kept with
// spec.reuseAfter set so that nobody gets the address before then (the
// record survives every restart; whoever finds it past reuseAfter deletes
// it).
package release

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Cooldown returns the reuse cooldown of the pool res is in: zero without
// one, or when the pool no longer exists.
func Cooldown(ctx context.Context, r client.Reader, res *v1alpha1.IPReservation) (time.Duration, error) {
	name := naming.PoolOf(res.Spec.Pool, res.Spec.Network)
	var pool v1alpha1.IPPool
	if err := r.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("reading IPPool %s for its reuse cooldown: %w", name, err)
	}
	if pool.Spec.ReuseCooldown == nil || pool.Spec.ReuseCooldown.Duration <= 0 {
		return 0, nil
	}
	return pool.Spec.ReuseCooldown.Duration, nil
}

// Reservation releases res as it was read: with cooldown > 0 it sets
// spec.reuseAfter = now + cooldown, else it deletes res. Both are
// conditional on res's UID and resourceVersion, so a reservation that
// changed since it was read is not released by mistake (the error then
// wraps a Conflict: read it again). Already released (gone, or reuseAfter
// set) is success.
func Reservation(ctx context.Context, c client.Writer, res *v1alpha1.IPReservation, cooldown time.Duration, now time.Time) error {
	if res.Spec.Released() {
		return nil
	}
	if cooldown > 0 {
		held := res.DeepCopy()
		held.Spec.ReuseAfter = &metav1.Time{Time: now.Add(cooldown)}
		// Update sends the resourceVersion read: the API server refuses it
		// if the reservation changed, or was deleted and made again.
		if err := c.Update(ctx, held); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("releasing IPReservation %s (reuse after %s): %w", res.Name, held.Spec.ReuseAfter.UTC().Format(time.RFC3339), err)
		}
		*res = *held
		return nil
	}
	uid, rv := res.UID, res.ResourceVersion
	if err := c.Delete(ctx, res, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing IPReservation %s: %w", res.Name, err)
	}
	return nil
}
