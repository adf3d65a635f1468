// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// InPoolReconciler sets AddressesInPool on IPAMClaims when their pool
// changes under them: a VM that runs on keeps its address and makes no
// CNI ADD, so the agent (which sets it at ADD) would not say so until the
// VM restarts. It needs the reservation indexes (package reservationindex).
type InPoolReconciler struct {
	// Client reads claims, reservations and pools from the manager's
	// cache and writes claim status.
	Client client.Client
}

// Reconcile judges one claim's reservations against their pools' ranges.
func (r *InPoolReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := r.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var list v1alpha1.IPReservationList
	if err := r.Client.List(ctx, &list, client.MatchingFields{reservationindex.OwnerUID: string(claim.UID)}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the reservations of IPAMClaim %s: %w", req, err)
	}
	var pools, outside []string
	for i := range list.Items {
		res := &list.Items[i]
		if res.Spec.Owner.Kind != v1alpha1.OwnerIPAMClaim || res.Spec.Released() {
			continue
		}
		name := res.Spec.Pool
		var pool v1alpha1.IPPool
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
			if apierrors.IsNotFound(err) {
				continue // no pool to judge by (an inline network not used since the upgrade)
			}
			return reconcile.Result{}, fmt.Errorf("reading IPPool %s: %w", name, err)
		}
		ranges, err := ipamconfig.PoolRanges(&pool.Spec)
		if err != nil {
			continue // the pool's own Ready condition says what is wrong
		}
		if !slices.Contains(pools, name) {
			pools = append(pools, name)
		}
		ip, err := netip.ParseAddr(res.Spec.IP)
		if err != nil {
			continue
		}
		if err := iprange.UsableIn(ranges, ip, name); err != nil {
			outside = append(outside, claimstatus.Outside(ip, err))
		}
	}
	if len(pools) == 0 || (len(outside) == 0 && meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionInPool) == nil) {
		return reconcile.Result{}, nil
	}
	slices.Sort(outside)
	updated := claim.DeepCopy()
	if !meta.SetStatusCondition(&updated.Status.Conditions, claimstatus.InPool(pools, outside, claim.Generation)) {
		return reconcile.Result{}, nil
	}
	if err := claimstatus.Write(ctx, r.Client, updated); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{Requeue: !apierrors.IsNotFound(err)}, nil
		}
		return reconcile.Result{}, err
	}
	log.FromContext(ctx).Info("set AddressesInPool on an IPAMClaim", "claim", req.String(), "outside", outside)
	return reconcile.Result{}, nil
}

// SetupWithManager registers the controller: a claim is judged when it or
// one of its reservations changes, and every claim holding an address in
// a pool when the pool's spec changes.
func (r *InPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	claimOf := func(_ context.Context, o client.Object) []reconcile.Request {
		res := o.(*v1alpha1.IPReservation)
		if res.Spec.Owner.Kind != v1alpha1.OwnerIPAMClaim {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: res.Spec.Owner.Namespace, Name: res.Spec.Owner.Name}}}
	}
	claimsInPool := func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.IPReservationList
		if err := r.Client.List(ctx, &list, client.MatchingFields{reservationindex.Pool: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing the claim reservations of a pool", "pool", o.GetName())
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			reqs = append(reqs, claimOf(ctx, &list.Items[i])...)
		}
		return reqs
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("claim-in-pool").
		WithOptions(retry.Options()).
		For(&ipamclaimsv1alpha1.IPAMClaim{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.IPReservation{}, handler.EnqueueRequestsFromMapFunc(claimOf)).
		Watches(&v1alpha1.IPPool{}, handler.EnqueueRequestsFromMapFunc(claimsInPool), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}
