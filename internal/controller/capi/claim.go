// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimlife"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// DefaultRetryAfter is how soon a claim that got no address (pool
// missing, invalid or exhausted) tries again without an event.
const DefaultRetryAfter = 30 * time.Second

// AddressClaimReconciler serves the IPAddressClaims whose poolRef names an
// ipkeeper IPPool.
type AddressClaimReconciler struct {
	// Client reads claims, addresses, pools and Clusters from the
	// provider's cache and writes to the API server.
	Client client.Client
	// Reservations reads IPReservations from the cache that has the
	// reservationindex indexes (the main manager's).
	Reservations client.Reader
	// Alloc reserves addresses: the controller's one allocator of claims'
	// addresses.
	Alloc *claimalloc.Allocator
	// APIReader reads from the API server, where the cache may be behind.
	APIReader client.Reader
	// WatchClusters: Cluster API's Cluster kind is served; without it a
	// claim's Cluster counts as not found.
	WatchClusters bool
	// RetryAfter is how soon a claim that got no address tries again
	// without an event; DefaultRetryAfter when zero.
	RetryAfter time.Duration
	// Now is the clock (release cooldowns); time.Now when nil.
	Now func() time.Time
}

// Reconcile serves one claim, through the one lifecycle of claims
// (package claimlife).
func (r *AddressClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return claimlife.Reconcile(ctx, r.Client, addressClaims{r}, req)
}

// addressClaims are the IPAddressClaim kind's steps of the lifecycle.
type addressClaims struct{ r *AddressClaimReconciler }

func (addressClaims) New() *ipamv1.IPAddressClaim { return &ipamv1.IPAddressClaim{} }

func (addressClaims) Gone(types.NamespacedName) {}

// Leave leaves alone a claim of another provider's pool, and one whose
// Cluster is paused: the contract says abort, no status change either
// (the Cluster watch brings the claim back when that changes).
func (k addressClaims) Leave(ctx context.Context, claim *ipamv1.IPAddressClaim) (string, error) {
	if !Ours(claim.Spec.PoolRef) {
		return "not an ipkeeper IPPool's claim", nil
	}
	return k.r.hold(ctx, claim)
}

func (k addressClaims) Release(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	return k.r.release(ctx, claim)
}

func (k addressClaims) Ready() bool { return k.r.Alloc.Ready() }

// Ensure holds the claim with the finalizer, then gives it its address.
func (k addressClaims) Ensure(ctx context.Context, claim *ipamv1.IPAddressClaim) (reconcile.Result, error) {
	if controllerutil.AddFinalizer(claim, ReleaseFinalizer) {
		if err := k.r.Client.Update(ctx, claim); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer %s to IPAddressClaim %s/%s: %w", ReleaseFinalizer, claim.Namespace, claim.Name, err)
		}
	}
	return k.r.allocate(ctx, claim)
}

// allocate gives claim its address and IPAddress, or says on its Ready
// condition why not.
func (r *AddressClaimReconciler) allocate(ctx context.Context, claim *ipamv1.IPAddressClaim) (reconcile.Result, error) {
	poolName := claim.Spec.PoolRef.Name
	pool := &v1alpha1.IPPool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: poolName}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading IPPool %s: %w", poolName, err)
		}
		return r.notReady(ctx, claim, ipamv1.IPAddressClaimReadyPoolNotReadyReason, fmt.Sprintf("IPPool %s not found", poolName))
	}
	parsed, err := ipam.PoolOf(pool)
	if err != nil {
		return r.notReady(ctx, claim, ipamv1.IPAddressClaimReadyPoolNotReadyReason, fmt.Sprintf("IPPool %s is invalid: %v", poolName, err))
	}
	ranges := parsed.Ranges
	res, err := r.held(ctx, claim, parsed)
	if err != nil {
		return reconcile.Result{}, err
	}
	if res == nil && pool.Spec.NamespaceSelector != nil {
		// A new address only for a namespace the pool admits; one held
		// before the selector changed stays held.
		var ns corev1.Namespace
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: claim.Namespace}, &ns); err != nil {
			return reconcile.Result{}, fmt.Errorf("reading namespace %s for IPPool %s's spec.namespaceSelector: %w", claim.Namespace, poolName, err)
		}
		if err := ipamconfig.PoolAdmits(pool, claim.Namespace, ns.Labels); err != nil {
			return r.notReady(ctx, claim, ipamv1.IPAddressClaimReadyPoolNotReadyReason, err.Error())
		}
	}
	if res == nil {
		res, err = r.Alloc.Assign(ctx, parsed, holder(claim, poolName), claimRanges(ranges), string(claim.UID))
		if errors.Is(err, ipam.ErrExhausted) {
			return r.notReady(ctx, claim, ipamv1.IPAddressClaimReadyPoolExhaustedReason, fmt.Sprintf("IPPool %s has no free %s address", poolName, family(ranges[0].Is4())))
		}
		if errors.Is(err, poolquota.ErrExceeded) {
			// Cluster API's contract has no reason of its own for it: the
			// pool is exhausted for this namespace, the message says why.
			return r.notReady(ctx, claim, ipamv1.IPAddressClaimReadyPoolExhaustedReason, err.Error())
		}
		if err != nil {
			return r.failed(ctx, claim, err)
		}
		log.FromContext(ctx).Info("reserved an address for the IPAddressClaim", "pool", poolName, "ip", res.Spec.IP, "reservation", res.Name)
	}
	ip, err := netip.ParseAddr(res.Spec.IP)
	if err != nil {
		return r.failed(ctx, claim, fmt.Errorf("IPReservation %s has spec.ip %q: %w", res.Name, res.Spec.IP, err))
	}
	rng, ok := rangeOf(ranges, ip)
	if !ok {
		// Held, but its range left the pool: the address is kept (never
		// taken from a running machine), but no prefix can be told.
		if addr, err := r.claimAddress(ctx, claim); err != nil || addr != nil {
			if err != nil {
				return reconcile.Result{}, err
			}
			return r.ready(ctx, claim, addr.Name)
		}
		return r.failed(ctx, claim, fmt.Errorf("the claim holds %s, which no range of IPPool %s contains any more", ip, poolName))
	}
	if err := r.ensureAddress(ctx, claim, pool, ip, rng); err != nil {
		return r.failed(ctx, claim, err)
	}
	return r.ready(ctx, claim, claim.Name)
}

// held returns the claim's reservation in pool, or nil, and releases every
// other reservation of the claim. A claim can hold several (a create whose
// answer was lost, then another): the one kept is the one its IPAddress
// names, as that is the address the machine uses (also when the cache does
// not show that reservation yet); without an IPAddress, the oldest (then
// the first by name), which allocate then writes into the IPAddress. The
// one kept is read live first (stillHeld): the claim's address is never
// one the cache alone still shows.
func (r *AddressClaimReconciler) held(ctx context.Context, claim *ipamv1.IPAddressClaim, pool *ipam.Pool) (*v1alpha1.IPReservation, error) {
	all, err := reservationindex.ByOwner(ctx, r.Reservations, claim.UID)
	if err != nil {
		return nil, err
	}
	var inPool []*v1alpha1.IPReservation
	for i := range all {
		if owns(claim, &all[i]) && all[i].Spec.Pool == pool.Name {
			inPool = append(inPool, &all[i])
		}
	}
	keep, err := r.named(ctx, claim, pool, inPool)
	if err != nil {
		return nil, err
	}
	if keep != nil {
		if keep, err = r.stillHeld(ctx, claim, keep); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(inPool, func(a, b *v1alpha1.IPReservation) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, res := range inPool {
		if keep != nil {
			break
		}
		if keep, err = r.stillHeld(ctx, claim, res); err != nil {
			return nil, err
		}
	}
	for i := range all {
		res := &all[i]
		if !owns(claim, res) || (keep != nil && res.Name == keep.Name) {
			continue
		}
		if err := r.releaseOne(ctx, res); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

// stillHeld reads res live: the cache may still show a reservation the
// API server no longer has (an earlier reconcile's create, deleted again
// when the pool's quota could not be confirmed) or has released. It
// returns the live copy when it is still the claim's, else nil.
func (r *AddressClaimReconciler) stillHeld(ctx context.Context, claim *ipamv1.IPAddressClaim, res *v1alpha1.IPReservation) (*v1alpha1.IPReservation, error) {
	cur := &v1alpha1.IPReservation{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(res), cur)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading IPReservation %s of IPAddressClaim %s/%s: %w", res.Name, claim.Namespace, claim.Name, err)
	case cur.UID != res.UID || !owns(claim, cur):
		return nil, nil
	}
	return cur, nil
}

// named is the claim's reservation in pool that its IPAddress names: from
// cached (the claim's reservations the cache shows), else read live; nil
// when there is no IPAddress or it names no reservation of the claim's.
func (r *AddressClaimReconciler) named(ctx context.Context, claim *ipamv1.IPAddressClaim, pool *ipam.Pool, cached []*v1alpha1.IPReservation) (*v1alpha1.IPReservation, error) {
	addr, err := r.cachedClaimAddress(ctx, claim)
	if err != nil || addr == nil {
		return nil, err
	}
	ip, err := netip.ParseAddr(addr.Spec.Address)
	if err != nil {
		return nil, nil //nolint:nilerr // not an address we wrote: ensureAddress reports the conflict
	}
	name := naming.Reservation(pool.Key, ip)
	if i := slices.IndexFunc(cached, func(res *v1alpha1.IPReservation) bool { return res.Name == name }); i >= 0 {
		return cached[i], nil
	}
	res := &v1alpha1.IPReservation{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, res); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the IPReservation of IPAddress %s: %w", addr.Name, err)
	}
	if owns(claim, res) {
		return res, nil
	}
	return nil, nil
}

// release gives the claim's address back and lets the claim go: its
// reservations released (the pool's cooldown honoured), its IPAddress
// deleted, then the finalizer removed.
func (r *AddressClaimReconciler) release(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	if !controllerutil.ContainsFinalizer(claim, ReleaseFinalizer) {
		return nil
	}
	held, err := reservationindex.ByOwner(ctx, r.Reservations, claim.UID)
	if err != nil {
		return err
	}
	addr, err := r.claimAddress(ctx, claim)
	if err != nil {
		return err
	}
	if addr != nil {
		// The reservation its IPAddress names, even if the cache does not
		// show it yet.
		if ip, perr := netip.ParseAddr(addr.Spec.Address); perr == nil {
			res := &v1alpha1.IPReservation{}
			err := r.APIReader.Get(ctx, client.ObjectKey{Name: naming.Reservation(r.lockKey(ctx, addr.Spec.PoolRef.Name), ip)}, res)
			switch {
			case err == nil:
				// The live copy replaces a cached one, which may be older.
				held = slices.DeleteFunc(held, func(h v1alpha1.IPReservation) bool { return h.Name == res.Name })
				held = append(held, *res)
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading the IPReservation of IPAddress %s: %w", addr.Name, err)
			}
		}
	}
	for i := range held {
		if owns(claim, &held[i]) {
			if err := r.releaseOne(ctx, &held[i]); err != nil {
				return err
			}
		}
	}
	if addr != nil {
		if err := r.deleteAddress(ctx, addr); err != nil {
			return err
		}
	}
	controllerutil.RemoveFinalizer(claim, ReleaseFinalizer)
	if err := r.Client.Update(ctx, claim); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from IPAddressClaim %s/%s: %w", ReleaseFinalizer, claim.Namespace, claim.Name, err)
	}
	log.FromContext(ctx).Info("released the IPAddressClaim's address", "addresses", len(held))
	return nil
}

// lockKey is what the reservations of a pool are named from
// (IPPool.LockKey); a pool that is gone names them after itself, as it did
// unless it was an inline network's.
func (r *AddressClaimReconciler) lockKey(ctx context.Context, pool string) string {
	var p v1alpha1.IPPool
	if err := r.Client.Get(ctx, client.ObjectKey{Name: pool}, &p); err == nil {
		return p.LockKey()
	}
	return pool
}

func (r *AddressClaimReconciler) releaseOne(ctx context.Context, res *v1alpha1.IPReservation) error {
	// Live when the cache does not show the pool: a pool missing from the
	// cache would otherwise mean no cooldown, and a delete.
	cooldown, err := reservation.PoolCooldown(ctx, r.Client, r.APIReader, res.Spec.Pool)
	if err != nil {
		return err
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	_, err = reservation.Release(ctx, reservation.KubeStore{Client: r.Client}, res, cooldown, now())
	return err
}

// ready records the claim's IPAddress and Ready=True.
func (r *AddressClaimReconciler) ready(ctx context.Context, claim *ipamv1.IPAddressClaim, address string) (reconcile.Result, error) {
	return reconcile.Result{}, r.setStatus(ctx, claim, address, metav1.ConditionTrue, clusterv1.ReadyReason, "")
}

// notReady records why the claim got no address and tries again later.
func (r *AddressClaimReconciler) notReady(ctx context.Context, claim *ipamv1.IPAddressClaim, reason, msg string) (reconcile.Result, error) {
	if err := r.setStatus(ctx, claim, claim.Status.AddressRef.Name, metav1.ConditionFalse, reason, msg); err != nil {
		return reconcile.Result{}, err
	}
	after := r.RetryAfter
	if after <= 0 {
		after = DefaultRetryAfter
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// failed records an allocation failure and returns err for a retry with
// backoff; a conflicting IPAddress waits for an event instead.
func (r *AddressClaimReconciler) failed(ctx context.Context, claim *ipamv1.IPAddressClaim, err error) (reconcile.Result, error) {
	if serr := r.setStatus(ctx, claim, claim.Status.AddressRef.Name, metav1.ConditionFalse, ipamv1.IPAddressClaimReadyAllocationFailedReason, err.Error()); serr != nil {
		return reconcile.Result{}, errors.Join(err, serr)
	}
	var conflict *addressConflict
	if errors.As(err, &conflict) {
		return r.notReady(ctx, claim, ipamv1.IPAddressClaimReadyAllocationFailedReason, err.Error())
	}
	return reconcile.Result{}, err
}

func (r *AddressClaimReconciler) setStatus(ctx context.Context, claim *ipamv1.IPAddressClaim, address string, status metav1.ConditionStatus, reason, msg string) error {
	orig := claim.DeepCopy()
	claim.Status.AddressRef.Name = address
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: ipamv1.IPAddressClaimReadyCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: claim.Generation,
	})
	if claim.Status.AddressRef == orig.Status.AddressRef && sameConditions(claim.Status.Conditions, orig.Status.Conditions) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, claim, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating the status of IPAddressClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

func family(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}

// SetupWithManager registers the claim controller: claims of ours; their
// IPAddresses; pools (a pool that appears, grows or frees addresses wakes
// its waiting claims, as does a claim of the pool going away); and, with
// WatchClusters, Clusters (unpausing wakes their claims). SetupIndexes must
// have run on mgr.
func (r *AddressClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("ipaddressclaim").
		// Claims in parallel: uniqueness is the reservation's name, not a
		// single worker.
		WithOptions(withWorkers(retry.Options(), 4)).
		For(&ipamv1.IPAddressClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return Ours(o.(*ipamv1.IPAddressClaim).Spec.PoolRef)
		}))).
		Owns(&ipamv1.IPAddress{}).
		Watches(&v1alpha1.IPPool{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.waiting(ctx, o.GetName())
		})).
		Watches(&ipamv1.IPAddressClaim{}, handler.Funcs{
			DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c := e.Object.(*ipamv1.IPAddressClaim)
				if !Ours(c.Spec.PoolRef) {
					return
				}
				for _, req := range r.waiting(ctx, c.Spec.PoolRef.Name) {
					q.Add(req)
				}
			},
		})
	if r.WatchClusters {
		b = b.Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfCluster))
	}
	return b.Complete(r)
}

func withWorkers(o controller.Options, n int) controller.Options {
	o.MaxConcurrentReconciles = n
	return o
}

// waiting are the claims of pool without an address yet.
func (r *AddressClaimReconciler) waiting(ctx context.Context, pool string) []reconcile.Request {
	var list ipamv1.IPAddressClaimList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexPool: pool}); err != nil {
		log.FromContext(ctx).Error(err, "listing the IPAddressClaims of a pool", "pool", pool)
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		c := &list.Items[i]
		if !meta.IsStatusConditionTrue(c.Status.Conditions, ipamv1.IPAddressClaimReadyCondition) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
		}
	}
	return reqs
}

// claimsOfCluster are the claims of ours that belong to a Cluster.
func (r *AddressClaimReconciler) claimsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var list ipamv1.IPAddressClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexCluster: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the IPAddressClaims of a Cluster", "cluster", client.ObjectKeyFromObject(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
