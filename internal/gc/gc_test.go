// SPDX-License-Identifier: Apache-2.0

package gc

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// The per-reservation "missing since" memory must not outlive the
// reservation: a CNI DEL usually releases it during the grace period, and
// every such reservation would otherwise stay in the map forever.
func TestMissingSinceForgottenWithTheReservation(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	res := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: "net.10-0-0-1", CreationTimestamp: metav1.Now()},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Network: "net", IP: "10.0.0.1", InterfaceName: "net1",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "gone", UID: "u1"},
		},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(res).Build()
	r := &Reconciler{Client: c, APIReader: c, GracePeriod: time.Hour}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}}

	if out, err := r.Reconcile(ctx, req); err != nil || out.RequeueAfter <= 0 {
		t.Fatalf("pod missing within the grace period: %+v, %v; want a requeue", out, err)
	}
	if len(r.missingSince) != 1 {
		t.Fatalf("missingSince = %v, want the reservation recorded", r.missingSince)
	}
	if err := c.Delete(ctx, res); err != nil { // released by a CNI DEL meanwhile
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if len(r.missingSince) != 0 {
		t.Fatalf("missingSince = %v after the reservation is gone, want empty", r.missingSince)
	}
}
