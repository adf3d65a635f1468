// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A pool counted less than CountInterval ago is not even read: its
// reconcile comes back when the interval is over, so a storm of
// reservation events costs one count per pool per interval.
func TestCountsAreCoalesced(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Reconciler{CountInterval: time.Second, Now: func() time.Time { return now }, Index: reservationindex.NewAddresses()}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}
	if wait := r.untilCountable("p"); wait > 0 {
		t.Fatalf("a pool never counted waits %s", wait)
	}
	r.counted("p")
	now = now.Add(300 * time.Millisecond)
	// Client is nil: reading the pool would panic.
	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != 700*time.Millisecond {
		t.Fatalf("Reconcile 300ms after a count = %+v, %v; want RequeueAfter 700ms", res, err)
	}
	if wait := r.untilCountable("other"); wait > 0 {
		t.Errorf("another pool waits %s for p's count", wait)
	}
	now = now.Add(700 * time.Millisecond)
	if wait := r.untilCountable("p"); wait > 0 {
		t.Errorf("still waiting %s once the interval is over", wait)
	}
	r.counted("p")
	r.forget("p")
	if wait := r.untilCountable("p"); wait > 0 {
		t.Errorf("a deleted (forgotten) pool re-created waits %s", wait)
	}
}

// A status write that changes only the pool's counts waits UsageInterval
// after the last write (each write is sent to every node's agent); the
// metric is current at every count; a change of a condition, or of the
// spec, is written at the next count.
func TestUsageIsWrittenAtMostOncePerUsageInterval(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pool := poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/29"}) // 6 usable addresses
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pool).WithStatusSubresource(pool).Build()
	now := time.Unix(1000, 0)
	x := reservationindex.NewAddresses()
	r := &Reconciler{Client: c, Recorder: record.NewFakeRecorder(100), Index: x,
		CountInterval: time.Second, UsageInterval: 10 * time.Second, Now: func() time.Time { return now }}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}
	written := func() v1alpha1.IPPoolStatus {
		t.Helper()
		var p v1alpha1.IPPool
		if err := c.Get(ctx, client.ObjectKey{Name: "p"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Status
	}
	reconcileAt := func(d time.Duration) reconcile.Result {
		t.Helper()
		now = now.Add(d)
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// The first status is written at once.
	x.Set(res("p", "n", "10.0.0.1"))
	reconcileAt(0)
	if st := written(); st.Used != 1 || st.Size != "6" {
		t.Fatalf("first status: used %d size %s, want 1 of 6", st.Used, st.Size)
	}

	// One more address 2 s later: counts only, so it waits 8 s more.
	x.Set(res("p", "n", "10.0.0.2"))
	if res := reconcileAt(2 * time.Second); res.RequeueAfter != 8*time.Second {
		t.Errorf("a counts-only change 2s after a write: requeued after %s, want 8s", res.RequeueAfter)
	}
	if st := written(); st.Used != 1 {
		t.Errorf("a counts-only change was written %s after the last write: used %d", 2*time.Second, st.Used)
	}
	if got := metricValue(t, "p", "used"); got != 2 {
		t.Errorf("ipkeeper_controller_pool_addresses{state=used} = %v while the write waits, want 2 (the metric is current at each count)", got)
	}

	// The pool fills up: Exhausted changes, which is written at once.
	for _, ip := range []string{"10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"} {
		x.Set(res("p", "n", ip))
	}
	if res := reconcileAt(time.Second); res.RequeueAfter != 0 {
		t.Errorf("a condition's change: requeued after %s, want it written", res.RequeueAfter)
	}
	if st := written(); st.Used != 6 || !conditionTrue(st, v1alpha1.PoolExhausted) {
		t.Errorf("after the pool filled: used %d, Exhausted %v; want 6 and true", st.Used, conditionTrue(st, v1alpha1.PoolExhausted))
	}

	// A release from full changes Exhausted: written at once. The next
	// changes no condition's status: it waits out the interval, and is
	// written with the next count after it.
	x.Delete(res("p", "n", "10.0.0.6").Name)
	if res := reconcileAt(time.Second); res.RequeueAfter != 0 || written().Used != 5 {
		t.Errorf("a release that ends Exhausted: requeued after %s, used %d; want written (5)", res.RequeueAfter, written().Used)
	}
	x.Delete(res("p", "n", "10.0.0.5").Name)
	if res := reconcileAt(time.Second); res.RequeueAfter != 9*time.Second || written().Used != 5 {
		t.Errorf("a counts-only release 1s after a write: requeued after %s, used %d; want 9s and 5 (not written)", res.RequeueAfter, written().Used)
	}
	reconcileAt(9 * time.Second)
	if st := written(); st.Used != 4 {
		t.Errorf("once the interval is over: used %d, want 4", st.Used)
	}

	// A spec change (a new generation) is written at the next count.
	var p v1alpha1.IPPool
	if err := c.Get(ctx, client.ObjectKey{Name: "p"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Ranges = append(p.Spec.Ranges, v1alpha1.PoolRange{Range: "10.0.1.0/29"})
	p.Generation++
	if err := c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	if res := reconcileAt(time.Second); res.RequeueAfter != 0 || written().Size != "12" {
		t.Errorf("a grown pool 1s after a write: requeued after %s, size %s; want written (12)", res.RequeueAfter, written().Size)
	}
}

func metricValue(t *testing.T, pool, state string) float64 {
	t.Helper()
	return testutil.ToFloat64(poolAddresses.WithLabelValues(pool, state))
}

func conditionTrue(st v1alpha1.IPPoolStatus, typ string) bool {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}
