// SPDX-License-Identifier: Apache-2.0

package reservationgc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ipkeeper/ipkeeper/internal/controller/backlog"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Reconciler releases reservations whose owner no longer exists (in a
// pool with a reuse cooldown by retiring them, see package reservation), and
// deletes released reservations once their cooldown is over.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, for confirmation.
	APIReader client.Reader
	// GracePeriod is how long a pod must stay gone before its reservation
	// is released (a CNI DEL normally releases it first).
	GracePeriod time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	// ownersGone carries owners deleted in other managers' watches (kinds
	// of optional APIs, which this manager cannot watch); see OwnerGone.
	ownersGone chan event.GenericEvent

	mu sync.Mutex
	// missingSince records, per reservation, when its pod was first
	// confirmed missing.
	missingSince map[string]time.Time
	// due records, per reservation due for release, since when
	// (ipkeeper_controller_gc_reservations_overdue); forget clears it.
	due backlog.Since[string]
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile checks one reservation's owner.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var res ipkeeperv1alpha1.IPReservation
	if err := r.Client.Get(ctx, req.NamespacedName, &res); err != nil {
		if apierrors.IsNotFound(err) {
			// Released by a CNI DEL (or by us): its memory goes with it.
			r.forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading IPReservation %s: %w", req.Name, err)
	}
	if left, released := reservation.Left(&res.Spec, r.now()); released {
		// Nobody's any more, whoever released it (a CNI DEL, this
		// collector, before a restart or not): only its cooldown is left.
		return r.expire(ctx, &res, left)
	}
	owner := res.Spec.Owner
	switch owner.Kind {
	case ipkeeperv1alpha1.OwnerPod:
		return r.reconcilePodOwned(ctx, &res)
	case ipkeeperv1alpha1.OwnerIPAMClaim:
		return r.reconcileClaimOwned(ctx, &res)
	case ipkeeperv1alpha1.OwnerIPAddressClaim:
		return r.reconcileAddressClaimOwned(ctx, &res)
	default:
		log.FromContext(ctx).Info("IPReservation has an owner kind this version does not know; leaving it", "reservation", res.Name, "kind", owner.Kind)
		return reconcile.Result{}, nil
	}
}

func (r *Reconciler) reconcilePodOwned(ctx context.Context, res *ipkeeperv1alpha1.IPReservation) (reconcile.Result, error) {
	owner := res.Spec.Owner
	key := types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}
	exists, err := podExists(ctx, r.Client, key, owner.UID)
	if err != nil || exists {
		r.forget(res.Name)
		return reconcile.Result{}, err
	}
	// Gone in the cache: ask the API server.
	liveChecks.Inc()
	if exists, err = podExists(ctx, r.APIReader, key, owner.UID); err != nil || exists {
		r.forget(res.Name)
		return cacheBehind(exists), err
	}
	now := r.now()
	since := r.markMissing(res.Name, now)
	if wait := r.GracePeriod - now.Sub(since); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if wait := r.GracePeriod - now.Sub(res.CreationTimestamp.Time); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	r.due.Set(res.Name, since.Add(r.GracePeriod))
	return r.release(ctx, res, fmt.Sprintf("pod %s (uid %s) gone for %s", key, owner.UID, now.Sub(since).Round(time.Second)))
}

// reconcileClaimOwned checks a claim's reservation: its owner gone, the
// address is released, unless it is lent to a claim that still exists
// (a decentralized live migration's receiver, whose launcher may run with
// it): then it passes to that claim; a borrower gone leaves lentTo.
func (r *Reconciler) reconcileClaimOwned(ctx context.Context, res *ipkeeperv1alpha1.IPReservation) (reconcile.Result, error) {
	borrowerLives := false
	if l := res.Spec.LentTo; l != nil {
		lives, result, err := r.claimLives(ctx, *l)
		if err != nil || result.RequeueAfter > 0 {
			return result, err
		}
		if !lives {
			if err := reservation.Unlend(ctx, reservation.KubeStore{Client: r.Client}, res); err != nil {
				return reconcile.Result{}, err
			}
			log.FromContext(ctx).Info("the claim an address was lent to is gone; the owner keeps it", "reservation", res.Name, "ip", res.Spec.IP, "borrower", l.Namespace+"/"+l.Name)
		}
		borrowerLives = lives
	}
	owner := res.Spec.Owner
	lives, result, err := r.claimLives(ctx, owner)
	if err != nil || lives || result.RequeueAfter > 0 {
		return result, err
	}
	key := types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}
	if borrowerLives {
		if err := reservation.PassToBorrower(ctx, reservation.KubeStore{Client: r.Client}, res); err != nil {
			return reconcile.Result{}, err
		}
		log.FromContext(ctx).Info("the owner of a lent address is gone; it passed to the claim it was lent to", "reservation", res.Name, "ip", res.Spec.IP,
			"owner", key.String(), "claim", res.Spec.Owner.Namespace+"/"+res.Spec.Owner.Name)
		return reconcile.Result{}, nil
	}
	r.markDue(res.Name)
	return r.release(ctx, res, fmt.Sprintf("IPAMClaim %s (uid %s) gone", key, owner.UID))
}

// claimLives reports whether the claim exists, from the cache and, where
// the cache says it does not, live (a requeue when the cache is behind).
func (r *Reconciler) claimLives(ctx context.Context, o ipkeeperv1alpha1.ReservationOwner) (bool, reconcile.Result, error) {
	key := types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
	exists, err := claimExists(ctx, r.Client, key, o.UID)
	if err != nil || exists {
		return exists, reconcile.Result{}, err
	}
	liveChecks.Inc()
	if exists, err = claimExists(ctx, r.APIReader, key, o.UID); err != nil || exists {
		return exists, cacheBehind(exists), err
	}
	return false, reconcile.Result{}, nil
}

// notServedRecheck is how often a reservation of a Cluster API
// IPAddressClaim is looked at while the API server does not serve that
// kind (Cluster API's CRDs removed, or not yet back).
const notServedRecheck = 5 * time.Minute

// reconcileAddressClaimOwned checks a Cluster API IPAddressClaim. Its CRDs
// may come and go, so this manager has no cache of them: the owner is read
// live (metadata only), on the reservation's first sight and when the
// Cluster API support reports a claim deleted (OwnerGone). While the kind
// is not served the owner's fate is unknown and the reservation is kept.
func (r *Reconciler) reconcileAddressClaimOwned(ctx context.Context, res *ipkeeperv1alpha1.IPReservation) (reconcile.Result, error) {
	owner := res.Spec.Owner
	key := types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}
	liveChecks.Inc()
	claim := &metav1.PartialObjectMetadata{}
	claim.SetGroupVersionKind(IPAddressClaimGVK)
	err := r.APIReader.Get(ctx, key, claim)
	switch {
	case meta.IsNoMatchError(err):
		log.FromContext(ctx).V(1).Info("IPAddressClaims are not served; keeping the reservation of one for now", "reservation", res.Name, "claim", key)
		return reconcile.Result{RequeueAfter: notServedRecheck}, nil
	case apierrors.IsNotFound(err):
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading IPAddressClaim %s: %w", key, err)
	case claim.UID == owner.UID:
		return reconcile.Result{}, nil
	}
	r.markDue(res.Name)
	return r.release(ctx, res, fmt.Sprintf("IPAddressClaim %s (uid %s) gone", key, owner.UID))
}

// IPAddressClaimGVK is the Cluster API kind the collector reads: the
// version the pinned cluster-api module stores.
var IPAddressClaimGVK = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1beta2", Kind: "IPAddressClaim"}

// OwnerGone makes the collector look at the reservations of owner, just
// deleted, again. Watches of optional APIs (running in managers of their
// own) call it from their delete handlers; it gives up when ctx ends.
func (r *Reconciler) OwnerGone(ctx context.Context, owner client.Object) {
	select {
	case r.ownersGone <- event.GenericEvent{Object: owner}:
	case <-ctx.Done():
	}
}

// cacheBehindRecheck is how soon a reservation is looked at again when its
// owner exists in the API server but not yet in the cache.
const cacheBehindRecheck = 10 * time.Second

// cacheBehind is the result for an owner found live but not in the cache:
// look again soon. An owner created and deleted while the watch on its
// kind was down never enters the cache, so its deletion sends no event;
// only a later look finds it gone.
func cacheBehind(liveOnly bool) reconcile.Result {
	if liveOnly {
		return reconcile.Result{RequeueAfter: cacheBehindRecheck}
	}
	return reconcile.Result{}
}

// release lets a reservation go: deleted, or, in a pool with a reuse
// cooldown, retired until the cooldown is over (and looked at again
// then). Both writes carry the reservation's UID and resourceVersion.
func (r *Reconciler) release(ctx context.Context, res *ipkeeperv1alpha1.IPReservation, why string) (reconcile.Result, error) {
	cooldown, err := reservation.PoolCooldown(ctx, r.Client, r.APIReader, res.Spec.Pool)
	if err != nil {
		return reconcile.Result{}, err
	}
	how, err := reservation.Release(ctx, reservation.KubeStore{Client: r.Client}, res, cooldown, r.now())
	if errors.Is(err, reservation.ErrChanged) {
		// Changed since we looked (a new sandbox took it over): look again.
		return reconcile.Result{}, fmt.Errorf("IPReservation %s changed while releasing it; rechecking: %w", res.Name, err)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	r.forget(res.Name)
	released.WithLabelValues(string(res.Spec.Owner.Kind)).Inc()
	if !how.Retire {
		log.FromContext(ctx).Info("released IPReservation", "reservation", res.Name, "network", res.Spec.Network, "ip", res.Spec.IP, "reason", why)
		return reconcile.Result{}, nil
	}
	log.FromContext(ctx).Info("released IPReservation; its address cools down", "reservation", res.Name, "network", res.Spec.Network,
		"ip", res.Spec.IP, "reason", why, "reuseAfter", how.ReuseAfter)
	return reconcile.Result{RequeueAfter: how.ReuseAfter.Sub(r.now())}, nil
}

// expire deletes a released reservation once its cooldown is over (left
// <= 0), else looks at it again then.
func (r *Reconciler) expire(ctx context.Context, res *ipkeeperv1alpha1.IPReservation, left time.Duration) (reconcile.Result, error) {
	r.forget(res.Name)
	if left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	r.due.Set(res.Name, r.now().Add(left)) // when its cooldown ended
	if err := r.delete(ctx, res); err != nil {
		return reconcile.Result{}, err
	}
	r.forget(res.Name)
	expired.Inc()
	log.FromContext(ctx).Info("deleted released IPReservation: its cooldown is over", "reservation", res.Name, "network", res.Spec.Network,
		"ip", res.Spec.IP, "reuseAfter", res.Spec.ReuseAfter)
	return reconcile.Result{}, nil
}

// delete deletes the reservation if it is still that object at that
// version; one already gone is done.
func (r *Reconciler) delete(ctx context.Context, res *ipkeeperv1alpha1.IPReservation) error {
	err := reservation.Discard(ctx, reservation.KubeStore{Client: r.Client}, res.Name, res.UID, res.ResourceVersion)
	switch {
	case err == nil, errors.Is(err, reservation.ErrGone):
		return nil
	case errors.Is(err, reservation.ErrChanged):
		// Changed since we looked (a new sandbox took it over): look again.
		return fmt.Errorf("IPReservation %s changed while releasing it; rechecking: %w", res.Name, err)
	default:
		return fmt.Errorf("releasing IPReservation %s: %w", res.Name, err)
	}
}

func (r *Reconciler) markMissing(name string, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.missingSince == nil {
		r.missingSince = map[string]time.Time{}
	}
	since, ok := r.missingSince[name]
	if !ok {
		since = now
		r.missingSince[name] = now
	}
	pending.Set(float64(len(r.missingSince)))
	return since
}

// markDue records that a reservation is due for release from its first
// sight as due on: a claim's owner has no grace period, and a failed
// release keeps it due until one succeeds.
func (r *Reconciler) markDue(name string) { r.due.SetIfAbsent(name, r.now()) }

func (r *Reconciler) forget(name string) {
	r.due.Delete(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.missingSince[name]; ok {
		delete(r.missingSince, name)
		pending.Set(float64(len(r.missingSince)))
	}
}

func podExists(ctx context.Context, reader client.Reader, key types.NamespacedName, uid types.UID) (bool, error) {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := reader.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading pod %s: %w", key, err)
	}
	return pod.UID == uid, nil
}

func claimExists(ctx context.Context, reader client.Reader, key types.NamespacedName, uid types.UID) (bool, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := reader.Get(ctx, key, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading IPAMClaim %s: %w", key, err)
	}
	return claim.UID == uid, nil
}

// SetupWithManager registers the collector: every reservation is checked
// when it appears (so a restart sweeps them all), and again when its pod or
// claim is deleted. The reservation indexes (package reservationindex) must
// be registered on mgr.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.ownersGone = make(chan event.GenericEvent, 256)
	remove := overdue.Add(r.due.Stats)
	go func() {
		<-ctx.Done()
		remove()
	}()
	byOwnerUID := func(ctx context.Context, o client.Object) []reconcile.Request {
		held, err := reservationindex.ByOwner(ctx, r.Client, o.GetUID())
		if err != nil {
			log.FromContext(ctx).Error(err, "listing reservations by owner", "uid", o.GetUID())
			return nil
		}
		// And those lent to it (a claim: a decentralized live migration's
		// receiver), whose lentTo goes with it.
		lent, err := reservationindex.LentTo(ctx, r.Client, o.GetUID())
		if err != nil {
			log.FromContext(ctx).Error(err, "listing reservations by borrower", "uid", o.GetUID())
			return nil
		}
		held = append(held, lent...)
		reqs := make([]reconcile.Request, 0, len(held))
		for i := range held {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: held[i].Name}})
		}
		return reqs
	}
	// An owner deleted and re-created under its name while a watch was
	// down comes back from the relist as an update to another UID, not as
	// a delete: both mean the old owner is gone.
	onDelete := handler.Funcs{
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, req := range byOwnerUID(ctx, e.Object) {
				q.Add(req)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetUID() == e.ObjectNew.GetUID() {
				return
			}
			for _, req := range byOwnerUID(ctx, e.ObjectOld) {
				q.Add(req)
			}
		},
	}
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return ctrl.NewControllerManagedBy(mgr).
		Named("reservation-gc").
		WithOptions(retry.Options()).
		For(&ipkeeperv1alpha1.IPReservation{}).
		WatchesMetadata(pod, onDelete).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, onDelete).
		WatchesRawSource(source.Channel(r.ownersGone, handler.EnqueueRequestsFromMapFunc(byOwnerUID))).
		Complete(r)
}
