// SPDX-License-Identifier: Apache-2.0

package reservationgc

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// A reservation whose release fails stays overdue, counted from the end of
// its grace period (a pod's) or its first sight as due (a claim's, which
// has none), until a release succeeds; one within its grace period is not
// overdue.
func TestOverdueReservationsMetric(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ipamclaimsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []ipkeeperv1alpha1.OwnerKind{ipkeeperv1alpha1.OwnerPod, ipkeeperv1alpha1.OwnerIPAMClaim} {
		t.Run(string(kind), func(t *testing.T) {
			start := time.Now().Add(-time.Hour)
			now := start
			const grace = time.Minute
			res := &ipkeeperv1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: "net.10-0-0-1", CreationTimestamp: metav1.NewTime(start.Add(-time.Hour))},
				Spec: ipkeeperv1alpha1.IPReservationSpec{
					Network: "net", IP: "10.0.0.1", InterfaceName: "net1",
					Owner: ipkeeperv1alpha1.ReservationOwner{Kind: kind, Namespace: "ns", Name: "gone", UID: "u1"},
				},
			}
			var failDeletes atomic.Bool
			failDeletes.Store(true)
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(res).WithInterceptorFuncs(interceptor.Funcs{
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					if failDeletes.Load() {
						return errors.New("injected: the API server refuses")
					}
					return c.Delete(ctx, obj, opts...)
				},
			}).Build()
			r := &Reconciler{Client: c, APIReader: c, GracePeriod: grace, Now: func() time.Time { return now }}
			remove := overdue.Add(r.due.Stats)
			t.Cleanup(remove)
			req := reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}}
			count := func(want string) {
				t.Helper()
				exp := "# HELP ipkeeper_controller_gc_reservations_overdue IPReservations due for release (owner confirmed gone and its grace period over, or reuse cooldown over) that the garbage collector has not released yet (exported by the leader; 0 on the other replicas).\n" +
					"# TYPE ipkeeper_controller_gc_reservations_overdue gauge\nipkeeper_controller_gc_reservations_overdue " + want + "\n"
				if err := testutil.CollectAndCompare(overdue, strings.NewReader(exp), "ipkeeper_controller_gc_reservations_overdue"); err != nil {
					t.Error(err)
				}
			}

			out, _ := r.Reconcile(context.Background(), req)
			if kind == ipkeeperv1alpha1.OwnerPod {
				// Within the grace period: pending, not overdue.
				if out.RequeueAfter != grace {
					t.Fatalf("first look: %+v, want a requeue after the grace period", out)
				}
				count("0")
				now = now.Add(grace)
				if _, err := r.Reconcile(context.Background(), req); err == nil {
					t.Fatal("the release did not fail")
				}
			}
			count("1")
			// Retries keep failing: still due from the same moment on.
			now = now.Add(5 * time.Minute)
			if _, err := r.Reconcile(context.Background(), req); err == nil {
				t.Fatal("the release did not fail")
			}
			dueFrom := start
			if kind == ipkeeperv1alpha1.OwnerPod {
				dueFrom = start.Add(grace)
			}
			if n, oldest := r.due.Stats(now); n != 1 || oldest != now.Sub(dueFrom) {
				t.Errorf("overdue = %d, oldest %s; want 1, %s", n, oldest, now.Sub(dueFrom))
			}

			failDeletes.Store(false)
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(res), &ipkeeperv1alpha1.IPReservation{}); err == nil {
				t.Fatal("the reservation was not released")
			}
			count("0")
		})
	}
}
