// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// DefaultCountInterval is the least time between two counts of one pool:
// a storm's reservation events cost one count per pool per second, and
// the ipkeeper_controller_pool_addresses metric and a change of the pool's
// conditions, size or networks are at most that late.
const DefaultCountInterval = time.Second

// DefaultUsageInterval is the least time between two status writes of one
// pool that change its counts only. Every node's agent watches every pool
// (it reads the pool's spec on each ADD), so each status write is sent to
// every node: a pool written every second costs the API server a watch
// event per node per second for as long as its usage changes. Counts
// change with every allocation and can be a few seconds late; what else
// the status says (conditions, size, networks, the generation observed)
// is written within DefaultCountInterval.
const DefaultUsageInterval = 10 * time.Second

// conflictRetry is how soon a pool is looked at again after its status
// write lost to a newer version (whose own event queues it too).
const conflictRetry = 100 * time.Millisecond

// Reconciler keeps IPPool status, Events and metrics.
type Reconciler struct {
	// Client reads pools from the manager's cache and writes their status
	// and their finalizer (protection.go).
	Client client.Client
	// APIReader reads from the API server: a deleted pool's last
	// reservation is confirmed gone live before its finalizer goes.
	APIReader client.Reader
	// Recorder records the threshold crossing Events on pools.
	Recorder record.EventRecorder
	// Index holds the reservation counts; SetupWithManager feeds it. A
	// new one is made when nil.
	Index *reservationindex.Addresses
	// CountInterval is the least time between two counts of one pool;
	// DefaultCountInterval when 0.
	CountInterval time.Duration
	// UsageInterval is the least time between two status writes of one
	// pool that change its counts only; DefaultUsageInterval when 0.
	UsageInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu   sync.Mutex
	last map[string]*times
}

// times is when a pool was last counted and last written.
type times struct {
	counted, written time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile recounts one pool and writes its status when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if wait := r.untilCountable(req.Name); wait > 0 {
		// Coalesce: whatever changes meanwhile is counted in one go.
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	var pool v1alpha1.IPPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading IPPool %s: %w", req.Name, err)
	}
	ranges, specErr := ipamconfig.PoolRanges(&pool.Spec)
	count := r.Index.Count(pool.Name, ranges, poolquota.ReportFrom(poolquota.Limit(&pool)))
	r.counted(pool.Name)
	done, recheck, err := r.protect(ctx, &pool, count)
	switch {
	case apierrors.IsConflict(err):
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	case err != nil:
		return reconcile.Result{}, err
	case done:
		return reconcile.Result{}, nil
	}
	st := desiredStatus(&pool, ranges, specErr, count)
	setMetrics(pool.Name, &st)
	if equality.Semantic.DeepEqual(pool.Status, st) {
		return reconcile.Result{RequeueAfter: recheck}, nil
	}
	// A deleted pool's status is written at once: what it waits for is
	// what its administrator watches.
	if countsOnly(&pool.Status, &st) && pool.DeletionTimestamp == nil {
		if wait := r.untilUsageWritable(pool.Name); wait > 0 {
			// Written with the next count after the wait, with whatever
			// changed meanwhile.
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	updated := pool.DeepCopy()
	updated.Status = st
	// An update, not a patch: it succeeds only on the version we read,
	// so the conditions compared below are the ones it replaced, and
	// each crossing is recorded once.
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			r.forget(pool.Name)
			return reconcile.Result{}, nil
		case apierrors.IsConflict(err):
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("updating the status of IPPool %s: %w", pool.Name, err)
	}
	r.wrote(pool.Name)
	for _, c := range crossings(pool.Status.Conditions, st.Conditions) {
		typ := corev1.EventTypeNormal
		if c.warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Event(updated, typ, c.reason, c.message)
	}
	log.FromContext(ctx).V(1).Info("updated IPPool status", "pool", pool.Name, "size", st.Size, "used", st.Used, "outOfRange", st.OutOfRange)
	return reconcile.Result{RequeueAfter: recheck}, nil
}

// untilCountable returns how long pool's next count must wait.
func (r *Reconciler) untilCountable(pool string) time.Duration {
	return r.until(pool, orDefault(r.CountInterval, DefaultCountInterval), func(t *times) time.Time { return t.counted })
}

// untilUsageWritable returns how long a status write of pool that changes
// its counts only must wait.
func (r *Reconciler) untilUsageWritable(pool string) time.Duration {
	return r.until(pool, orDefault(r.UsageInterval, DefaultUsageInterval), func(t *times) time.Time { return t.written })
}

// until returns what is left of interval since the time of pool that
// last reads; 0 or less when none.
func (r *Reconciler) until(pool string, interval time.Duration, last func(*times) time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.last[pool]
	if !ok || last(t).IsZero() {
		return 0
	}
	return interval - r.now().Sub(last(t))
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (r *Reconciler) counted(pool string) { r.mark(pool, func(t *times) { t.counted = r.now() }) }

func (r *Reconciler) wrote(pool string) { r.mark(pool, func(t *times) { t.written = r.now() }) }

func (r *Reconciler) mark(pool string, f func(*times)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]*times{}
	}
	t, ok := r.last[pool]
	if !ok {
		t = &times{}
		r.last[pool] = t
	}
	f(t)
}

// forget drops what is kept about a deleted pool.
func (r *Reconciler) forget(pool string) {
	r.mu.Lock()
	delete(r.last, pool)
	r.mu.Unlock()
	deleteMetrics(pool)
}

// SetupWithManager registers the controller (leader only, like every
// controller): a pool is recounted when its spec changes and when the
// count of its reservations does.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Index == nil {
		r.Index = reservationindex.NewAddresses()
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pool-status").
		WithOptions(retry.Options()).
		// Our own status writes change no generation: they need no recount.
		For(&v1alpha1.IPPool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(reservationindex.NewSource(mgr.GetCache(), r.Index)).
		Complete(r)
}
