// SPDX-License-Identifier: Apache-2.0

package reservationindex

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Source feeds the Addresses from the reservation informer's events and
// queues (as reconcile requests named after the pool) the pools whose
// counts changed: the source of the pool status controller, which counts
// from the Addresses. Once it has fed every reservation that existed at
// start, the Addresses report Synced, for other readers.
//
// It is a source of its own, not a handler on a Kind source, for one
// reason: a Kind source is synced when the informer is, which (the informer
// being shared with the garbage collector) can be before this handler has
// been handed every existing reservation. WaitForSync here waits for the
// handler's own registration, so the workers never count a partial Addresses.
type Source struct {
	informers cache.Informers
	index     *Addresses
	reg       toolscache.ResourceEventHandlerRegistration
}

// NewSource returns the Source feeding addrs from informers' reservation
// informer.
func NewSource(informers cache.Informers, addrs *Addresses) *Source {
	return &Source{informers: informers, index: addrs}
}

func (s *Source) String() string { return "IPReservation counts" }

// Start registers the handler; it does not block.
func (s *Source) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	inf, err := s.informers.GetInformer(ctx, &v1alpha1.IPReservation{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("getting the IPReservation informer: %w", err)
	}
	enqueue := func(pool string) {
		if pool != "" {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: pool}})
		}
	}
	set := func(obj any) {
		r, ok := obj.(*v1alpha1.IPReservation)
		if !ok {
			return
		}
		if pool, old, changed := s.index.Set(r); changed {
			enqueue(pool)
			enqueue(old)
		}
	}
	s.reg, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			var name string
			switch o := obj.(type) {
			case *v1alpha1.IPReservation:
				name = o.Name
			case toolscache.DeletedFinalStateUnknown:
				name = o.Key // cluster-scoped: the key is the name
			default:
				return
			}
			if pool, changed := s.index.Delete(name); changed {
				enqueue(pool)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching IPReservations: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = inf.RemoveEventHandler(s.reg) // the cache is going away with us
	}()
	return nil
}

// WaitForSync returns once every reservation that existed at start has
// reached the Addresses.
func (s *Source) WaitForSync(ctx context.Context) error {
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		synced := s.reg.HasSynced()
		if synced {
			s.index.synced.Store(true)
		}
		return synced, nil
	}); err != nil {
		return fmt.Errorf("waiting for the IPReservation counts to sync: %w", err)
	}
	return nil
}
