// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
)

// fakeCache counts what is asked of it; methods not listed panic (nil
// embedded interface), so a call routed to the wrong cache shows.
type fakeCache struct {
	cache.Cache
	informer                        *fakeInformer
	gets, lists, informers, indexes int
	started                         chan struct{}
}

func (f *fakeCache) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	f.gets++
	return nil
}

func (f *fakeCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	f.lists++
	return nil
}

func (f *fakeCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	f.informers++
	return f.informer, nil
}

func (f *fakeCache) GetInformerForKind(context.Context, schema.GroupVersionKind, ...cache.InformerGetOption) (cache.Informer, error) {
	f.informers++
	return f.informer, nil
}

func (f *fakeCache) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	f.indexes++
	return nil
}

func (f *fakeCache) Start(ctx context.Context) error {
	close(f.started)
	<-ctx.Done()
	return nil
}

func (f *fakeCache) WaitForCacheSync(context.Context) bool { return true }

type fakeInformer struct {
	cache.Informer
	added, removed int
}

type fakeRegistration struct {
	toolscache.ResourceEventHandlerRegistration
}

func (f *fakeInformer) AddEventHandlerWithOptions(toolscache.ResourceEventHandler, toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	f.added++
	return fakeRegistration{}, nil
}

func (f *fakeInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	f.removed++
	return nil
}

// An optional manager's cache reads IPAMClaims and pods' metadata, and
// watches them, through the main manager's cache and everything else
// (whole pods included) through its own; it adds no index to the main
// informers, never removes them, and removes the handlers its controllers
// added when it stops.
func TestOptionalManagersShareTheMainCachesClaimsAndPods(t *testing.T) {
	main := &fakeCache{informer: &fakeInformer{}}
	own := &fakeCache{informer: &fakeInformer{}, started: make(chan struct{})}
	c := &sharedFromMain{Cache: own, main: main}
	ctx := context.Background()

	_ = c.Get(ctx, client.ObjectKey{Name: "vm1.blue"}, &ipamclaimsv1alpha1.IPAMClaim{})
	_ = c.List(ctx, &ipamclaimsv1alpha1.IPAMClaimList{})
	_ = c.Get(ctx, client.ObjectKey{Name: "vm1"}, &kubevirtv1.VirtualMachine{})
	_ = c.List(ctx, &kubevirtv1.VirtualMachineList{})
	if main.gets != 1 || main.lists != 1 || own.gets != 1 || own.lists != 1 {
		t.Errorf("reads: main cache %d gets, %d lists; own %d, %d; want one of each each (claims from the main cache)", main.gets, main.lists, own.gets, own.lists)
	}
	_ = c.Get(ctx, client.ObjectKey{Name: "virt-launcher-vm1"}, podrefs.Metadata())
	_ = c.List(ctx, podrefs.MetadataList())
	_ = c.Get(ctx, client.ObjectKey{Name: "virt-launcher-vm1"}, &corev1.Pod{})
	_ = c.List(ctx, &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}})
	if main.gets != 2 || main.lists != 2 || own.gets != 2 || own.lists != 2 {
		t.Errorf("reads: main cache %d gets, %d lists; own %d, %d; want 2 each (pods' metadata from the main cache, whole pods and other metadata from the own)", main.gets, main.lists, own.gets, own.lists)
	}

	inf, err := c.GetInformer(ctx, &ipamclaimsv1alpha1.IPAMClaim{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{}, toolscache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	if main.informers != 1 || own.informers != 0 || main.informer.added != 1 {
		t.Errorf("the claims' informer: main cache asked %d times, own %d, handlers added to the main one %d; want 1, 0, 1", main.informers, own.informers, main.informer.added)
	}
	if err := inf.AddIndexers(toolscache.Indexers{"x": nil}); err == nil {
		t.Error("an index added to the main claims' informer through an optional manager")
	}
	pods, err := c.GetInformer(ctx, podrefs.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{}, toolscache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	if main.informers != 2 || own.informers != 0 || main.informer.added != 2 {
		t.Errorf("the pods' metadata informer: main cache asked %d times, own %d, handlers added to the main one %d; want 2, 0, 2", main.informers, own.informers, main.informer.added)
	}
	if _, err := c.GetInformerForKind(ctx, corev1.SchemeGroupVersion.WithKind("Pod")); err != nil || own.informers != 1 {
		t.Errorf("the informer of the Pod kind (whole pods): err %v, own cache asked %d times; want it from the own cache", err, own.informers)
	}
	if err := c.IndexField(ctx, podrefs.Metadata(), "x", nil); err == nil || main.indexes != 0 {
		t.Errorf("a pods' metadata index through an optional manager: err %v, main cache indexes %d; want an error and none", err, main.indexes)
	}
	if err := c.IndexField(ctx, &ipamclaimsv1alpha1.IPAMClaim{}, "x", nil); err == nil || main.indexes != 0 {
		t.Errorf("a claims' index through an optional manager: err %v, main cache indexes %d; want an error and none", err, main.indexes)
	}
	if err := c.IndexField(ctx, &kubevirtv1.VirtualMachine{}, "x", nil); err != nil || own.indexes != 1 {
		t.Errorf("a VM index: err %v, own cache indexes %d; want it on the own cache", err, own.indexes)
	}
	if err := c.RemoveInformer(ctx, &ipamclaimsv1alpha1.IPAMClaim{}); err != nil {
		t.Errorf("RemoveInformer of claims: %v, want nothing done", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- c.Start(runCtx) }()
	<-own.started
	if main.informer.removed != 0 {
		t.Fatalf("a handler removed while the manager runs")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if main.informer.removed != 2 {
		t.Errorf("handlers removed from the main informers when the manager stopped: %d, want 2", main.informer.removed)
	}
}
