// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Reservations lists the IPReservations of network, live from the API
// server, selected by spec.network (the authority; labels only narrow).
func Reservations(ctx context.Context, c client.Reader, network string) ([]ipkv1alpha1.IPReservation, error) {
	var list ipkv1alpha1.IPReservationList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.network": network}); err != nil {
		return nil, fmt.Errorf("listing IPReservations of network %s: %w", network, err)
	}
	return list.Items, nil
}

// WaitGone polls until obj no longer exists. If it still does after
// timeout, the error says whether it is being deleted and what holds it.
func WaitGone(ctx context.Context, c client.Reader, obj client.Object, timeout time.Duration) error {
	key := client.ObjectKeyFromObject(obj)
	err := Eventually(ctx, timeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("%T %s still exists (deleting %v, finalizers %v): %w", obj, key, obj.GetDeletionTimestamp() != nil, obj.GetFinalizers(), err)
	}
	return nil
}
