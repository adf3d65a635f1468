// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"encoding/json"
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// MACLabeler labels each claim with the MAC of its interface
// (macaddr.Label): the VM's own (macaddr.OwnAnnotation), else derived from
// the addresses it records, for `kubectl get ipamclaims -L` and `-l`.
//
// Why a lane of its own, with one worker: the label is a write of its own
// (the status subresource ignores metadata), the costliest of a claim's
// first fill for the API server, and only people read it (the webhook
// reads the MAC from the claim itself). Made in the fill's reconcile, it
// was a third write on the path launchers wait for, and a failed label
// write retried the whole fill. Here the fill is two writes, and in a
// boot storm the one worker writes what it can beside the fills' sixteen,
// catching up when they are done: it yields to them (Fills), waiting for
// a pause in their starts before each label.
type MACLabeler struct {
	Client client.Client
	// Fills are the Reconciler's: while claims are being filled, each
	// label waits (at most labelWaitMax). nil: no waiting.
	Fills *Fills
}

// MACLabelWorkers is the lane's one worker.
const MACLabelWorkers = 1

// Reconcile labels one claim when its label is not its MAC.
func (l *MACLabeler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := l.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading IPAMClaim %s: %w", req, err)
	}
	value, ok := wantedMACLabel(&claim)
	if !ok {
		return reconcile.Result{}, nil
	}
	l.Fills.yield(ctx, labelQuiet, labelWaitMax)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{macaddr.Label: value}}})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("encoding the MAC label of IPAMClaim %s: %w", req, err)
	}
	if err := l.Client.Patch(ctx, &claim, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("labelling IPAMClaim %s with its MAC: %w", req, err)
	}
	return reconcile.Result{}, nil
}

// wantedMACLabel is the label value claim should carry, when it carries
// another (or none): a live claim with a MAC.
func wantedMACLabel(claim *ipamclaimsv1alpha1.IPAMClaim) (string, bool) {
	if claim.DeletionTimestamp != nil {
		return "", false
	}
	mac, _, ok := macaddr.OfClaim(claim)
	if !ok {
		return "", false
	}
	value := macaddr.LabelValue(mac)
	return value, claim.Labels[macaddr.Label] != value
}

// SetupWithManager registers the lane: only claims whose label is not
// their MAC are queued.
func (l *MACLabeler) SetupWithManager(mgr ctrl.Manager) error {
	opts := retry.Options()
	opts.MaxConcurrentReconciles = MACLabelWorkers
	needs := predicate.NewPredicateFuncs(func(o client.Object) bool {
		claim, ok := o.(*ipamclaimsv1alpha1.IPAMClaim)
		if !ok {
			return false
		}
		_, ok = wantedMACLabel(claim)
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("claim-mac-label").
		WithOptions(opts).
		For(&ipamclaimsv1alpha1.IPAMClaim{}, builder.WithPredicates(needs)).
		Complete(l)
}
