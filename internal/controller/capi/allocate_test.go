// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// syncedInformers stand in for the manager's informers where
// reservationindex.Source reads: its registration is synced at once, so
// the Addresses report Synced as after a real start.
type syncedInformers struct{ cache.Informers }

type syncedInformer struct{ cache.Informer }

func (syncedInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return syncedInformer{}, nil
}

func (syncedInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	return nil
}

func (syncedInformer) HasSynced() bool { return true }

func (syncedInformers) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return syncedInformer{}, nil
}

func (syncedInformers) GetInformerForKind(context.Context, schema.GroupVersionKind, ...cache.InformerGetOption) (cache.Informer, error) {
	return nil, errors.New("not faked")
}

// allocatorOn is the controller's allocator over c; synced says whether
// its cache of reservations has seen them all.
func allocatorOn(t *testing.T, c client.Client, synced bool) *claimalloc.Allocator {
	t.Helper()
	addrs := reservationindex.NewAddresses()
	if synced {
		src := reservationindex.NewSource(syncedInformers{}, addrs)
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		t.Cleanup(q.ShutDown)
		if err := src.Start(t.Context(), q); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return claimalloc.New(c, c, addrs, blocks.NewSet(string(v1alpha1.HolderIPAMClaims)), func() bool { return true }, logr.Discard())
}

// A claim gets its address through the controller's allocator: one of the
// family of the pool's first range, in a block of claims, and the
// IPAddress that names it; nothing happens before the allocator's caches
// are synced.
func TestAllocateThroughTheAllocator(t *testing.T) {
	s := testScheme(t)
	pool := &v1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "machines", UID: "pool-uid"},
		Spec: v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{
			{Range: "fd00::/120"}, {Range: "10.0.0.0/24", Gateway: "10.0.0.1"},
		}},
	}
	for _, tt := range []struct {
		name   string
		synced bool
	}{{name: "caches synced", synced: true}, {name: "caches filling"}} {
		t.Run(tt.name, func(t *testing.T) {
			claim := testClaim()
			b := fake.NewClientBuilder().WithScheme(s).WithObjects(claim, pool.DeepCopy()).WithStatusSubresource(&ipamv1.IPAddressClaim{})
			if err := reservationindex.Setup(context.Background(), builderIndexer{b}); err != nil {
				t.Fatal(err)
			}
			c := b.Build()
			r := &AddressClaimReconciler{Client: c, Reservations: c, APIReader: c, Alloc: allocatorOn(t, c, tt.synced)}
			res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(claim)})
			if err != nil {
				t.Fatal(err)
			}
			held, err := reservationindex.ByOwner(context.Background(), c, claim.UID)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.synced {
				if res.RequeueAfter <= 0 || len(held) != 0 {
					t.Errorf("before the caches synced: RequeueAfter %s, reservations %v; want a retry and none", res.RequeueAfter, held)
				}
				return
			}
			if len(held) != 1 {
				t.Fatalf("the claim holds %d reservations, want 1", len(held))
			}
			got := held[0]
			if got.Spec.Owner.Kind != v1alpha1.OwnerIPAddressClaim || got.Spec.Pool != "machines" || got.Spec.Network != "machines" {
				t.Errorf("reservation spec = %+v, want the claim's in pool machines", got.Spec)
			}
			if got.Labels[naming.ClaimsBlockLabel] != "true" {
				t.Errorf("reservation labels %v: not in a block of claims", got.Labels)
			}
			var addr ipamv1.IPAddress
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), &addr); err != nil {
				t.Fatalf("no IPAddress: %v", err)
			}
			if addr.Spec.Address != got.Spec.IP || addr.Spec.Prefix == nil || *addr.Spec.Prefix != 120 {
				t.Errorf("IPAddress spec = %+v, want %s/120 (the family of the pool's first range)", addr.Spec, got.Spec.IP)
			}
			var cur ipamv1.IPAddressClaim
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), &cur); err != nil {
				t.Fatal(err)
			}
			if cur.Status.AddressRef.Name != claim.Name || !meta.IsStatusConditionTrue(cur.Status.Conditions, ipamv1.IPAddressClaimReadyCondition) {
				t.Errorf("claim status = %+v, want the IPAddress named and Ready", cur.Status)
			}
		})
	}
}
