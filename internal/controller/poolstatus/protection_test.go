// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A deleted pool keeps its finalizer while its reservations are left: by
// the count, and, when the count says none, by a live list (the cache may
// be behind), which it then waits on; once the API server lists none
// either, the finalizer goes and the pool with it.
func TestDeletedPoolWaitsForItsLastReservation(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pool := poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/29"})
	left := res("p", "n", "10.0.0.1")
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pool, left).WithStatusSubresource(pool).
		WithIndex(&v1alpha1.IPReservation{}, "spec.pool", func(o client.Object) []string { return []string{o.(*v1alpha1.IPReservation).Spec.Pool} }).
		Build()
	x := reservationindex.NewAddresses()
	now := time.Unix(1000, 0)
	r := &Reconciler{Client: c, APIReader: c, Recorder: record.NewFakeRecorder(100), Index: x, Now: func() time.Time { return now }}
	ctx := context.Background()
	step := func(what string) reconcile.Result {
		t.Helper()
		now = now.Add(time.Minute)
		got, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return got
	}
	get := func() (*v1alpha1.IPPool, error) {
		var p v1alpha1.IPPool
		return &p, c.Get(ctx, client.ObjectKey{Name: "p"}, &p)
	}

	x.Set(left)
	step("first count")
	if p, _ := get(); !controllerutil.ContainsFinalizer(p, v1alpha1.PoolInUseFinalizer) {
		t.Fatalf("finalizers %v after the first count, want %s", p.Finalizers, v1alpha1.PoolInUseFinalizer)
	}
	p, _ := get()
	if err := c.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	step("deleted, one reservation counted")
	if p, err := get(); err != nil || !conditionTrue(p.Status, v1alpha1.PoolDeleting) {
		t.Fatalf("deleted pool with a reservation: %v, Deleting %v; want it kept, Deleting=True", err, err == nil && conditionTrue(p.Status, v1alpha1.PoolDeleting))
	}

	// The cache saw the reservation go; the API server still lists it.
	x.Delete(left.Name)
	if got := step("the cache behind"); got.RequeueAfter != liveRecheck {
		t.Errorf("the cache counting none while the API server lists one: requeued after %s, want %s", got.RequeueAfter, liveRecheck)
	}
	if _, err := get(); err != nil {
		t.Fatalf("the pool went while the API server still listed a reservation: %v", err)
	}

	if err := c.Delete(ctx, left); err != nil {
		t.Fatal(err)
	}
	step("none left")
	if _, err := get(); !apierrors.IsNotFound(err) {
		t.Fatalf("the pool with no reservation left: %v, want it gone", err)
	}
}
