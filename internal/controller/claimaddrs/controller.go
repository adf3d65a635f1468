// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"slices"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/backlog"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimlife"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// DefaultWorkers is how many claims are filled at once: a VM boot storm is
// bounded by the API server's writes, not by one worker's round trips.
const DefaultWorkers = 16

// Reconciler keeps IPAMClaims' addresses. It runs on the leader only.
type Reconciler struct {
	// Client reads from the main manager's cache (claims, NADs, pools,
	// reservations, pod metadata) and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, where the cache may be behind.
	APIReader client.Reader
	// Alloc reserves the addresses (once Ready: its caches synced).
	Alloc *claimalloc.Allocator
	// Recorder records Events on claims and on their VMs.
	Recorder record.EventRecorder
	// Workers is MaxConcurrentReconciles; DefaultWorkers when 0.
	Workers int
	// Fills is marked at the start of each fill, for the MAC label lane
	// to yield to (MACLabeler.Fills); nil marks nothing.
	Fills *Fills

	// backoff spaces out the retries of a claim that cannot get its
	// addresses yet (exhausted, taken, pool missing): events on pools,
	// reservations and NADs bring it back sooner.
	backoff workqueue.TypedRateLimiter[reconcile.Request]
	// unfilled holds the claims of served networks still without
	// addresses, since their creation (ipkeeper_controller_claims_unfilled).
	unfilled backlog.Since[types.NamespacedName]
	// writes are the status writes whose echo has not come back yet.
	writes ownWrites
}

// Reconcile brings one claim's addresses and status up to date, through
// the one lifecycle of claims (package claimlife).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return claimlife.Reconcile(ctx, r.Client, ipamClaims{r}, req)
}

// ipamClaims are the IPAMClaim kind's steps of the lifecycle.
type ipamClaims struct{ r *Reconciler }

func (ipamClaims) New() *ipamclaimsv1alpha1.IPAMClaim { return &ipamclaimsv1alpha1.IPAMClaim{} }

func (k ipamClaims) Gone(key types.NamespacedName) {
	k.r.backoff.Forget(reconcile.Request{NamespacedName: key})
	k.r.unfilled.Delete(key)
	k.r.writes.forget(key)
}

// Leave leaves no IPAMClaim alone before it is read further: whether
// ipkeeper serves its network is Ensure's first step, once the caches
// are synced.
func (ipamClaims) Leave(context.Context, *ipamclaimsv1alpha1.IPAMClaim) (string, error) {
	return "", nil
}

// Release has nothing to write: the claim's reservations go once it is
// gone (the garbage collector), retired first for its retention
// (claims.Retainer).
func (k ipamClaims) Release(_ context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	k.r.unfilled.Delete(client.ObjectKeyFromObject(claim))
	return nil
}

func (k ipamClaims) Ready() bool { return k.r.Alloc.Ready() }

// Ensure finds the claim's network, reserves what it needs and records it.
func (k ipamClaims) Ensure(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (reconcile.Result, error) {
	r, key := k.r, client.ObjectKeyFromObject(claim)
	// The cache may not show the last write yet: a reconcile from it would
	// fill the claim again and fail on the write's conflict.
	claim = r.writes.fresher(claim)
	net, err := r.networkOf(ctx, claim)
	if net == nil && err == nil {
		r.unfilled.Delete(key)
		return reconcile.Result{}, nil // not a network ipkeeper serves
	}
	// Ours (or not known yet, on an error): it waits from its creation
	// until its addresses are recorded, whatever holds it up.
	if !claimstatus.Filled(claim) {
		r.unfilled.Set(key, claim.CreationTimestamp.Time)
		r.Fills.started()
	} else {
		r.unfilled.Delete(key)
	}
	var out outcome
	if err == nil {
		out, err = r.addresses(ctx, claim, net)
	}
	if ce := asConfigError(err); ce != nil {
		out, err = outcome{failure: &ce.failure, retry: ce.retry}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.record(ctx, claim, net, out); err != nil {
		return reconcile.Result{}, err
	}
	if len(out.ips) > 0 {
		r.unfilled.Delete(key) // recorded now (or already)
	}
	req := reconcile.Request{NamespacedName: key}
	if out.retry {
		return reconcile.Result{RequeueAfter: r.backoff.When(req)}, nil
	}
	r.backoff.Forget(req)
	return reconcile.Result{}, nil
}

// SetupWithManager registers the controller and the indexes it reads.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 2*time.Minute)
	remove := unfilledMetrics.Add(r.unfilled.Stats)
	go func() {
		<-ctx.Done()
		remove()
	}()
	if err := setupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	opts := retry.Options()
	opts.MaxConcurrentReconciles = r.Workers
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultWorkers
	}
	c := mgr.GetClient()
	return ctrl.NewControllerManagedBy(mgr).
		Named("claim-addresses").
		WithOptions(opts).
		For(&ipamclaimsv1alpha1.IPAMClaim{}, builder.WithPredicates(claimUpdates(&r.writes))).
		// A reservation of a claim changed or went: check the claim holds
		// what it records. A reservation of an address other claims
		// record or request changed or went: they may get it now.
		Watches(&ipkeeperv1alpha1.IPReservation{}, handler.EnqueueRequestsFromMapFunc(claimsOfReservation(c, r.Alloc.IsOwnCreate))).
		// A NAD appeared or changed: the claims of its network may be
		// served now, or from another pool.
		Watches(&nadv1.NetworkAttachmentDefinition{}, handler.EnqueueRequestsFromMapFunc(claimsOfNAD(c))).
		// A pool appeared or changed (a range added): claims still without
		// addresses may get them now. Not its status (counts the pool
		// status controller writes as claims fill), which the fill never
		// reads: in a boot storm each write would look at every claim not
		// filled yet, or not filled yet in the cache, once more.
		Watches(&ipkeeperv1alpha1.IPPool{}, handler.EnqueueRequestsFromMapFunc(unfilledClaims(c)), builder.WithPredicates(poolChanges())).
		// A pod referencing a claim came or went: its ownerPod.
		WatchesMetadata(podrefs.Metadata(), handler.EnqueueRequestsFromMapFunc(podrefs.ClaimRequests), builder.WithPredicates(podrefs.MetadataChanged())).
		Complete(r)
}

// claimsOfReservation maps a reservation's event to the claims it may
// concern. Of the controller's own create (own), the claim that made it
// is not among them: the reconcile that created it counted it.
func claimsOfReservation(c client.Client, own func(*ipkeeperv1alpha1.IPReservation) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		res, ok := o.(*ipkeeperv1alpha1.IPReservation)
		if !ok {
			return nil
		}
		var reqs []reconcile.Request
		var maker *reconcile.Request
		if res.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
			owner := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: res.Spec.Owner.Namespace, Name: res.Spec.Owner.Name}}
			if own(res) {
				maker = &owner
			} else {
				reqs = append(reqs, owner)
			}
		}
		add := func(r reconcile.Request) {
			if (maker == nil || r != *maker) && !slices.Contains(reqs, r) {
				reqs = append(reqs, r)
			}
		}
		if l := res.Spec.LentTo; l != nil {
			add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.Namespace, Name: l.Name}})
		}
		// Claims of other pools recording the same address are looked at
		// too, in vain but harmlessly: the index is by address alone.
		for _, r := range listClaims(ctx, c, client.MatchingFields{indexClaimAddress: res.Spec.IP}) {
			add(r)
		}
		return reqs
	}
}

func claimsOfNAD(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		nad, ok := o.(*nadv1.NetworkAttachmentDefinition)
		if !ok {
			return nil
		}
		cfg, found, err := inlinepool.Network(nad)
		if err != nil || !found {
			return nil
		}
		return listClaims(ctx, c, client.MatchingFields{indexClaimNetwork: cfg.Name})
	}
}

// poolChanges lets through a pool's events but the updates of its status
// alone: its spec (generation), labels and annotations (an inline pool's
// definition) are what the fill reads.
func poolChanges() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{})
}

func unfilledClaims(c client.Client) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		return listClaims(ctx, c, client.MatchingFields{indexClaimFilled: "false"})
	}
}

func listClaims(ctx context.Context, c client.Client, opts ...client.ListOption) []reconcile.Request {
	var list ipamclaimsv1alpha1.IPAMClaimList
	if err := c.List(ctx, &list, opts...); err != nil {
		log.FromContext(ctx).Error(err, "listing IPAMClaims to look at again")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
