// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
)

// sharedFromMain is an optional API manager's cache (kubevirt.go): its
// own informers, but IPAMClaims and pods' metadata (podrefs) from the main
// manager's cache, which holds both on every replica for the claim
// address controller. One informer of each means one watch and one copy
// in memory, not two: each write of a claim, and each change of a pod,
// was sent, decoded and stored twice.
//
// Their indexes are the main manager's, registered before it starts
// (claims.SetupClaimIndexes, podrefs.SetupIndex): an optional manager is
// built and rebuilt while the main one runs. Event handlers its
// controllers add to the main informers are removed when it stops, so a
// KubeVirt reinstalled leaves no handler of the manager before.
type sharedFromMain struct {
	cache.Cache
	main cache.Cache

	mu       sync.Mutex
	handlers []handlerOf // added through this cache to the main informers
}

type handlerOf struct {
	informer cache.Informer
	reg      toolscache.ResourceEventHandlerRegistration
}

// newCacheSharedWith returns a cache.NewCacheFunc building sharedFromMain
// over main.
func newCacheSharedWith(main cache.Cache) cache.NewCacheFunc {
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		own, err := cache.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return &sharedFromMain{Cache: own, main: main}, nil
	}
}

var claimGVK = ipamclaimsv1alpha1.SchemeGroupVersion.WithKind("IPAMClaim")

// fromMain reports whether obj is read from the main cache.
func fromMain(obj any) bool {
	switch obj.(type) {
	case *ipamclaimsv1alpha1.IPAMClaim, *ipamclaimsv1alpha1.IPAMClaimList:
		return true
	}
	return podrefs.IsPodMetadata(obj)
}

// errSharedIndex is the refusal of an index on a shared informer.
var errSharedIndex = errors.New("the indexes of IPAMClaims and pods' metadata are the main manager's (claims.SetupClaimIndexes, podrefs.SetupIndex)")

func (c *sharedFromMain) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if fromMain(obj) {
		return c.main.Get(ctx, key, obj, opts...)
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

func (c *sharedFromMain) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if fromMain(list) {
		return c.main.List(ctx, list, opts...)
	}
	return c.Cache.List(ctx, list, opts...)
}

func (c *sharedFromMain) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if fromMain(obj) {
		inf, err := c.main.GetInformer(ctx, obj, opts...)
		if err != nil {
			return nil, err
		}
		return &trackedInformer{Informer: inf, c: c}, nil
	}
	return c.Cache.GetInformer(ctx, obj, opts...)
}

// GetInformerForKind shares the claims' informer only: a kind's informer
// is of whole objects, and the main cache holds pods' metadata only.
func (c *sharedFromMain) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if gvk == claimGVK {
		inf, err := c.main.GetInformerForKind(ctx, gvk, opts...)
		if err != nil {
			return nil, err
		}
		return &trackedInformer{Informer: inf, c: c}, nil
	}
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

// RemoveInformer never removes the main manager's informer.
func (c *sharedFromMain) RemoveInformer(ctx context.Context, obj client.Object) error {
	if fromMain(obj) {
		return nil
	}
	return c.Cache.RemoveInformer(ctx, obj)
}

// IndexField refuses an index of a shared informer: it would be added to
// the main informer again at each start of this manager.
func (c *sharedFromMain) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	if fromMain(obj) {
		return fmt.Errorf("index %s of %T: %w", field, obj, errSharedIndex)
	}
	return c.Cache.IndexField(ctx, obj, field, extract)
}

// Start runs this manager's own informers and, when they stop, removes
// the handlers added to the main one.
func (c *sharedFromMain) Start(ctx context.Context) error {
	defer c.removeHandlers()
	return c.Cache.Start(ctx)
}

func (c *sharedFromMain) WaitForCacheSync(ctx context.Context) bool {
	return c.Cache.WaitForCacheSync(ctx) && c.main.WaitForCacheSync(ctx)
}

func (c *sharedFromMain) track(inf cache.Informer, reg toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		c.mu.Lock()
		c.handlers = append(c.handlers, handlerOf{inf, reg})
		c.mu.Unlock()
	}
	return reg, err
}

func (c *sharedFromMain) removeHandlers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.handlers {
		_ = h.informer.RemoveEventHandler(h.reg)
	}
	c.handlers = nil
}

// trackedInformer is a main manager's informer, as this manager's
// controllers see it: the handlers they add are remembered, to be removed.
type trackedInformer struct {
	cache.Informer
	c *sharedFromMain
}

func (i *trackedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandler(h)
	return i.c.track(i.Informer, reg, err)
}

func (i *trackedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandlerWithResyncPeriod(h, resync)
	return i.c.track(i.Informer, reg, err)
}

func (i *trackedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandlerWithOptions(h, opts)
	return i.c.track(i.Informer, reg, err)
}

// AddIndexers refuses, as IndexField does.
func (i *trackedInformer) AddIndexers(toolscache.Indexers) error {
	return errSharedIndex
}
