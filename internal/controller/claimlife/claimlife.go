// SPDX-License-Identifier: Apache-2.0

// Package claimlife is the one lifecycle of a claim of addresses, whatever
// its kind: an IPAMClaim (package claimaddrs) or a Cluster API
// IPAddressClaim (package capi). Each kind is a Kind, its steps; Reconcile
// runs them in the one order every claim goes through, as the Cluster API
// in-cluster provider's ClaimReconciler runs its ClaimHandler's: read the
// claim, leave it alone when it is not ours to touch now, let it go when
// it is being deleted, wait for the caches, then give it its addresses
// and record them.
package claimlife

import (
	"context"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NotSyncedRetry is how soon a claim is looked at again while the
// controller's caches of reservations and blocks are still filling: no
// address is chosen from a partial view.
const NotSyncedRetry = 200 * time.Millisecond

// Kind is one kind of claim's steps.
type Kind[C client.Object] interface {
	// New returns an empty claim of the kind, to read into.
	New() C
	// Gone forgets what the kind keeps about a claim that no longer exists.
	Gone(key types.NamespacedName)
	// Leave says why the claim is not this controller's to touch now, ""
	// when it is (a paused Cluster's claim, say: not even released).
	Leave(ctx context.Context, claim C) (string, error)
	// Release lets a claim being deleted go.
	Release(ctx context.Context, claim C) error
	// Ready reports whether the caches addresses are chosen from are
	// synced.
	Ready() bool
	// Ensure gives the claim its addresses, or says on its status why
	// not, and says when to look again.
	Ensure(ctx context.Context, claim C) (reconcile.Result, error)
}

// Reconcile runs one claim through its lifecycle; c reads the claim.
func Reconcile[C client.Object](ctx context.Context, c client.Reader, kind Kind[C], req reconcile.Request) (reconcile.Result, error) {
	claim := kind.New()
	if err := c.Get(ctx, req.NamespacedName, claim); err != nil {
		if apierrors.IsNotFound(err) {
			kind.Gone(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading %s %s: %w", reflect.TypeOf(claim).Elem().Name(), req, err)
	}
	why, err := kind.Leave(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if why != "" {
		log.FromContext(ctx).V(1).Info("leaving the claim alone", "reason", why)
		return reconcile.Result{}, nil
	}
	if claim.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, kind.Release(ctx, claim)
	}
	if !kind.Ready() {
		return reconcile.Result{RequeueAfter: NotSyncedRetry}, nil
	}
	return kind.Ensure(ctx, claim)
}
