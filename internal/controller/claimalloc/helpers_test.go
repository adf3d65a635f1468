// SPDX-License-Identifier: Apache-2.0

package claimalloc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// fakeInformer is an informer whose events the test delivers by hand and
// whose handler registrations report synced when the test says so: what
// reservationindex.Source and WatchBlocks need of one.
type fakeInformer struct {
	mu       sync.Mutex
	handlers []toolscache.ResourceEventHandler
	synced   atomic.Bool
}

var _ cache.Informer = &fakeInformer{}

// AddEventHandler returns the informer itself as the registration: it is
// synced when the informer is.
func (f *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
	return f, nil
}

func (f *fakeInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return f.AddEventHandler(h)
}

func (f *fakeInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return f.AddEventHandler(h)
}

func (f *fakeInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	return nil
}

func (f *fakeInformer) AddIndexers(toolscache.Indexers) error { return nil }
func (f *fakeInformer) HasSynced() bool                       { return f.synced.Load() }
func (f *fakeInformer) IsStopped() bool                       { return false }

func (f *fakeInformer) each(fn func(toolscache.ResourceEventHandler)) {
	f.mu.Lock()
	hs := append([]toolscache.ResourceEventHandler(nil), f.handlers...)
	f.mu.Unlock()
	for _, h := range hs {
		fn(h)
	}
}

func (f *fakeInformer) add(obj any) {
	f.each(func(h toolscache.ResourceEventHandler) { h.OnAdd(obj, false) })
}

func (f *fakeInformer) update(old, obj any) {
	f.each(func(h toolscache.ResourceEventHandler) { h.OnUpdate(old, obj) })
}

func (f *fakeInformer) remove(obj any) {
	f.each(func(h toolscache.ResourceEventHandler) { h.OnDelete(obj) })
}

// fakeInformers hands out one fakeInformer per object type.
type fakeInformers struct {
	mu  sync.Mutex
	byT map[string]*fakeInformer
}

var _ cache.Informers = &fakeInformers{}

func (f *fakeInformers) of(obj client.Object) *fakeInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byT == nil {
		f.byT = map[string]*fakeInformer{}
	}
	k := fmt.Sprintf("%T", obj)
	if f.byT[k] == nil {
		f.byT[k] = &fakeInformer{}
	}
	return f.byT[k]
}

func (f *fakeInformers) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	return f.of(obj), nil
}

func (f *fakeInformers) GetInformerForKind(context.Context, schema.GroupVersionKind, ...cache.InformerGetOption) (cache.Informer, error) {
	return nil, errors.New("not faked")
}

func (f *fakeInformers) RemoveInformer(context.Context, client.Object) error { return nil }
func (f *fakeInformers) Start(context.Context) error                         { return nil }
func (f *fakeInformers) WaitForCacheSync(context.Context) bool               { return true }
func (f *fakeInformers) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

// syncAddresses makes addrs report Synced the only way it can: through a
// reservationindex.Source whose informer has delivered everything.
func syncAddresses(t *testing.T, addrs *reservationindex.Addresses) {
	t.Helper()
	infs := &fakeInformers{}
	infs.of(&v1alpha1.IPReservation{}).synced.Store(true)
	src := reservationindex.NewSource(infs, addrs)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	if err := src.Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	if err := src.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !addrs.Synced() {
		t.Fatal("the Addresses do not report synced after their Source synced")
	}
}

// env is an allocator over a fake API server holding one IPPool.
type env struct {
	c     client.Client
	addrs *reservationindex.Addresses
	set   *blocks.Set
	alloc *claimalloc.Allocator
	pool  *ipam.Pool
	obj   *v1alpha1.IPPool
}

// ippool returns IPPool name with the given ranges.
func ippool(name string, ranges ...v1alpha1.PoolRange) *v1alpha1.IPPool {
	return &v1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.IPPoolSpec{Ranges: ranges},
	}
}

func newEnv(t *testing.T, pool *v1alpha1.IPPool, objs ...client.Object) *env {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(append([]client.Object{pool}, objs...)...).Build()
	return newEnvOn(t, c, pool)
}

// newEnvOn is another allocator on c: a controller with caches of its own.
func newEnvOn(t *testing.T, c client.Client, pool *v1alpha1.IPPool) *env {
	t.Helper()
	p, err := ipam.PoolOf(pool)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{c: c, addrs: reservationindex.NewAddresses(), set: blocks.NewSet(string(v1alpha1.HolderIPAMClaims)), pool: p, obj: pool}
	e.alloc = claimalloc.New(c, c, e.addrs, e.set, func() bool { return true }, logr.Discard())
	return e
}

func claimHolder(ns, name string) claimalloc.Holder {
	return claimalloc.Holder{
		Owner:   v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAMClaim, Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Network: "blue", Interface: "pod16367aacb67",
	}
}

func (e *env) blocks(t *testing.T) []v1alpha1.IPBlock {
	t.Helper()
	var list v1alpha1.IPBlockList
	if err := e.c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (e *env) reservations(t *testing.T) []v1alpha1.IPReservation {
	t.Helper()
	var list v1alpha1.IPReservationList
	if err := e.c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}
