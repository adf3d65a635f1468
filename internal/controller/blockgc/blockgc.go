// SPDX-License-Identifier: Apache-2.0

package blockgc

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Reason says why a block was given back.
type Reason string

// The reasons, the values of the metric's reason label.
const (
	ReasonPoolGone     Reason = "PoolGone"
	ReasonNoLongerFits Reason = "NoLongerFits"
	ReasonEmpty        Reason = "Empty"
)

// DefaultGrace is how long a block stays empty before it is given back.
const DefaultGrace = 15 * time.Minute

var givenBack = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ipkeeper_controller_gc_blocks_given_back_total",
	Help: "IPBlocks ipkeeper-controller deleted, by reason: PoolGone (their pool was deleted), NoLongerFits (their pool's ranges no longer cut them), Empty (no reservation in them for the grace period).",
}, []string{"reason"})

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{givenBack}
}

// HeldAddresses is what the reconciler reads of the held addresses.
type HeldAddresses interface {
	// Synced reports whether every reservation has been seen.
	Synced() bool
	// HeldIn reports whether an address of block p of pool is held.
	HeldIn(pool string, p netip.Prefix) bool
}

var _ HeldAddresses = (*reservationindex.Addresses)(nil)

// Reconciler gives back one pool's unneeded blocks per request (the
// request's name is the pool's).
type Reconciler struct {
	Client client.Client
	// Addrs are the held addresses (the controller's one cache of them,
	// reservationindex.Addresses): a block is empty when none lies in it.
	Addrs HeldAddresses
	// Grace is how long a block must stay empty; DefaultGrace when 0.
	Grace time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu sync.Mutex
	// emptySince says since when each block (by UID) was seen empty; a
	// restart starts the clocks again, which only delays.
	emptySince map[types.UID]time.Time
}

// Reconcile looks at every block of the pool.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !r.Addrs.Synced() {
		return reconcile.Result{RequeueAfter: time.Second}, nil // emptiness is not known yet
	}
	var list ipkeeperv1alpha1.IPBlockList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{naming.PoolLabel: naming.PoolLabelValue(req.Name)}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the IPBlocks of pool %s: %w", req.Name, err)
	}
	var pool ipkeeperv1alpha1.IPPool
	err := r.Client.Get(ctx, client.ObjectKey{Name: req.Name}, &pool)
	switch {
	case apierrors.IsNotFound(err):
		for i := range list.Items {
			if err := r.giveBack(ctx, &list.Items[i], ReasonPoolGone); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading IPPool %s: %w", req.Name, err)
	}
	ranges, err := ipamconfig.PoolRanges(&pool.Spec)
	if err != nil {
		return reconcile.Result{}, nil // the pool's Ready condition says why; its blocks wait
	}
	grace := r.grace()
	now := r.now()
	var next time.Duration
	for i := range list.Items {
		b := &list.Items[i]
		if b.Spec.Pool != pool.Name {
			continue // another pool's whose name hashes to the same label
		}
		p, err := netip.ParsePrefix(b.Spec.CIDR)
		if err != nil {
			continue // the CRD refuses it; nothing to judge
		}
		if !fits(ranges, p) {
			if err := r.giveBack(ctx, b, ReasonNoLongerFits); err != nil {
				return reconcile.Result{}, err
			}
			continue
		}
		if r.Addrs.HeldIn(pool.Name, p) {
			r.forget(b.UID)
			continue
		}
		since := r.seenEmpty(b.UID, now)
		if wait := grace - now.Sub(since); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if err := r.giveBack(ctx, b, ReasonEmpty); err != nil {
			return reconcile.Result{}, err
		}
	}
	if len(list.Items) > 0 && (next == 0 || next > grace/2) {
		// A block that empties is noticed within half the grace period.
		next = max(grace/2, time.Second)
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// fits reports whether some range of the pool cuts block p exactly: p is
// the block of its first address in a range whose subnet holds it.
func fits(ranges []iprange.Range, p netip.Prefix) bool {
	for _, r := range ranges {
		if r.Subnet().Contains(p.Addr()) && r.BlockOf(p.Addr()) == p {
			return true
		}
	}
	return false
}

func (r *Reconciler) giveBack(ctx context.Context, b *ipkeeperv1alpha1.IPBlock, why Reason) error {
	if err := blocks.GiveBack(ctx, r.Client, b); err != nil {
		return err
	}
	r.forget(b.UID)
	givenBack.WithLabelValues(string(why)).Inc()
	log.FromContext(ctx).Info("gave back an address block", "block", b.Name, "cidr", b.Spec.CIDR, "holder", b.Spec.HolderName(), "reason", why)
	return nil
}

func (r *Reconciler) seenEmpty(uid types.UID, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.emptySince == nil {
		r.emptySince = map[types.UID]time.Time{}
	}
	since, ok := r.emptySince[uid]
	if !ok {
		r.emptySince[uid], since = now, now
	}
	return since
}

func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.emptySince, uid)
}

func (r *Reconciler) grace() time.Duration {
	if r.Grace > 0 {
		return r.Grace
	}
	return DefaultGrace
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler: a pool is looked at when it
// or one of its blocks changes, and again within half the grace period.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	poolOfBlock := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		b, ok := o.(*ipkeeperv1alpha1.IPBlock)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: b.Spec.Pool}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("block-gc").
		For(&ipkeeperv1alpha1.IPPool{}).
		Watches(&ipkeeperv1alpha1.IPBlock{}, poolOfBlock).
		Complete(r)
}
