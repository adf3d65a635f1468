// SPDX-License-Identifier: Apache-2.0

package reservationgc

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// In a pool with a reuse cooldown the collector releases an ownerless
// reservation by retiring it (spec.reuseAfter), not deleting it, and
// deletes it only once reuseAfter has passed, however often (or by however
// many restarted collectors) it is looked at before.
func TestCollectorHonoursReuseCooldown(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ipamclaimsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "cool"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}}, ReuseCooldown: &ipkeeperv1alpha1.Duration{Duration: 30 * time.Second}}}
	for _, tt := range []struct {
		name   string
		kind   ipkeeperv1alpha1.OwnerKind
		pool   string
		retire bool
	}{
		{"pod owner gone, cooldown pool", ipkeeperv1alpha1.OwnerPod, "cool", true},
		{"claim gone, cooldown pool", ipkeeperv1alpha1.OwnerIPAMClaim, "cool", true},
		{"pool gone: no cooldown", ipkeeperv1alpha1.OwnerPod, "deleted-pool", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			res := &ipkeeperv1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: "r.10-0-0-1", UID: "res-uid", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
				Spec: ipkeeperv1alpha1.IPReservationSpec{
					Pool: tt.pool, Network: "net", IP: "10.0.0.1", InterfaceName: "net1",
					Owner: ipkeeperv1alpha1.ReservationOwner{Kind: tt.kind, Namespace: "ns", Name: "gone", UID: "u1"},
				},
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(res, cool).Build()
			r := &Reconciler{Client: c, APIReader: c, Now: func() time.Time { return now }}
			ctx := context.Background()
			req := reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}}
			out, err := r.Reconcile(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var got ipkeeperv1alpha1.IPReservation
			err = c.Get(ctx, client.ObjectKeyFromObject(res), &got)
			if !tt.retire {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("reservation in a pool that no longer exists: %v, %+v; want it deleted", err, got.Spec.ReuseAfter)
				}
				return
			}
			if err != nil {
				t.Fatalf("released in a pool with reuseCooldown 30s: %v; want it kept with spec.reuseAfter", err)
			}
			if got.Spec.ReuseAfter == nil || !got.Spec.ReuseAfter.Time.Equal(now.Add(30*time.Second)) {
				t.Fatalf("reuseAfter = %v, want %s", got.Spec.ReuseAfter, now.Add(30*time.Second))
			}
			if out.RequeueAfter != 30*time.Second {
				t.Errorf("after retiring: requeue in %s, want 30s (at reuseAfter)", out.RequeueAfter)
			}
			// A collector (this one or a restarted one) looks again early.
			now = now.Add(29 * time.Second)
			fresh := &Reconciler{Client: c, APIReader: c, Now: func() time.Time { return now }}
			if out, err = fresh.Reconcile(ctx, req); err != nil || out.RequeueAfter != time.Second {
				t.Fatalf("1s before reuseAfter: %+v, %v; want a requeue in 1s", out, err)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(res), &got); err != nil {
				t.Fatalf("deleted before reuseAfter: %v", err)
			}
			now = now.Add(time.Second)
			if out, err = fresh.Reconcile(ctx, req); err != nil || out.RequeueAfter != 0 {
				t.Fatalf("at reuseAfter: %+v, %v", out, err)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(res), &got); !apierrors.IsNotFound(err) {
				t.Fatalf("reservation still there once its cooldown is over (%v)", err)
			}
		})
	}
}
