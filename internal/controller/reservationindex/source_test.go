// SPDX-License-Identifier: Apache-2.0

package reservationindex

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fakeInformer delivers the events the test gives it; its registrations
// are synced when synced is set.
type fakeInformer struct {
	cache.Informer // not called
	mu             sync.Mutex
	handlers       []toolscache.ResourceEventHandler
	synced         atomic.Bool
	removed        chan struct{} // closed by RemoveEventHandler
	removeOnce     sync.Once
}

func (f *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
	return f, nil
}

func (f *fakeInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	f.removeOnce.Do(func() { close(f.removed) })
	return nil
}

func (f *fakeInformer) HasSynced() bool { return f.synced.Load() }

func (f *fakeInformer) each(fn func(toolscache.ResourceEventHandler)) {
	f.mu.Lock()
	hs := slices.Clone(f.handlers)
	f.mu.Unlock()
	for _, h := range hs {
		fn(h)
	}
}

type fakeInformers struct {
	cache.Informers // not called
	inf             *fakeInformer
}

func (f fakeInformers) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return f.inf, nil
}

func (f fakeInformers) GetInformerForKind(context.Context, schema.GroupVersionKind, ...cache.InformerGetOption) (cache.Informer, error) {
	return nil, errors.New("not faked")
}

// queued takes every pool name the queue holds, sorted.
func queued(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var out []string
	for q.Len() > 0 {
		r, _ := q.Get()
		out = append(out, r.Name)
		q.Done(r)
	}
	slices.Sort(out)
	return out
}

// The Source feeds the Addresses from the informer's events and queues
// the pools whose counts changed (both, when a reservation moves); the
// Addresses report Synced once the handler has seen every reservation.
func TestSourceFeedsAddressesAndQueuesPools(t *testing.T) {
	inf := &fakeInformer{removed: make(chan struct{})}
	x := NewAddresses()
	src := NewSource(fakeInformers{inf: inf}, x)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}

	// Not synced: WaitForSync gives up with its context, and the
	// Addresses do not claim to be complete.
	waitCtx, stop := context.WithCancel(context.Background())
	stop()
	if err := src.WaitForSync(waitCtx); err == nil {
		t.Error("WaitForSync returned without the registration synced")
	}
	if x.Synced() {
		t.Error("Addresses synced before the Source")
	}

	r := res("blue", "blue", "10.0.0.5")
	inf.each(func(h toolscache.ResourceEventHandler) { h.OnAdd(r, true) })
	if !x.Held("blue", netip.MustParseAddr("10.0.0.5")) {
		t.Error("an added reservation is not held")
	}
	if got := queued(q); !slices.Equal(got, []string{"blue"}) {
		t.Errorf("queued %v after an add, want [blue]", got)
	}
	// An update that changes nothing counted queues nothing.
	same := r.DeepCopy()
	same.Spec.ContainerID = "abc"
	inf.each(func(h toolscache.ResourceEventHandler) { h.OnUpdate(r, same) })
	if got := queued(q); len(got) != 0 {
		t.Errorf("queued %v after an update of nothing counted", got)
	}
	moved := r.DeepCopy()
	moved.Spec.Pool = "shared"
	inf.each(func(h toolscache.ResourceEventHandler) { h.OnUpdate(r, moved) })
	if got := queued(q); !slices.Equal(got, []string{"blue", "shared"}) {
		t.Errorf("queued %v after a move, want [blue shared]", got)
	}
	// A delete seen only as a tombstone: cluster-scoped, its key is the name.
	inf.each(func(h toolscache.ResourceEventHandler) {
		h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: moved.Name, Obj: moved})
	})
	if x.Held("shared", netip.MustParseAddr("10.0.0.5")) {
		t.Error("a reservation deleted as a tombstone is still held")
	}
	if got := queued(q); !slices.Equal(got, []string{"shared"}) {
		t.Errorf("queued %v after a delete, want [shared]", got)
	}

	inf.synced.Store(true)
	if err := src.WaitForSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !x.Synced() {
		t.Error("Addresses not synced after the Source synced")
	}
	// Stopping removes the handler from the shared informer, in the
	// Source's goroutine: wait for it, bounded.
	cancel()
	select {
	case <-inf.removed:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not removed 10s after the Source stopped")
	}
}
