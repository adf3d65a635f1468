// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestPoolStatus follows one pool through its life: its status and metric
// follow reservations as they come and go, a range removed while held
// leaves its address counted out of range, crossing the warning threshold
// (both ways) records one Event each time, and an invalid spec makes it
// not Ready with the field named.
func TestPoolStatus(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "pools")
	cp.StartController(t, ns, func(o *manager.Options) { o.EnableWebhook = false })
	// Live owners, so the garbage collector keeps the reservations.
	pods := cp.CreatePods(t, ns, "", "holder", 6)

	pool := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: ipkeeperv1alpha1.IPPoolSpec{
			Ranges: []ipkeeperv1alpha1.PoolRange{
				{Range: "10.77.0.0/29"},                       // .1-.6
				{Range: "10.77.1.0/30", Gateway: "10.77.1.1"}, // .2 only
			},
			WarningThresholdPercent: ptr.To[int32](60),
		},
	}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })

	waitPool(t, pool, "Ready with its size", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return condIs(st, ipkeeperv1alpha1.PoolReady, metav1.ConditionTrue) && st.Size == "7" && st.Used == 0 && st.Free == "7" &&
			st.ObservedGeneration == pool.Generation && condIs(st, ipkeeperv1alpha1.PoolNearlyExhausted, metav1.ConditionFalse)
	})
	waitPoolMetric(t, pool.Name, "total", 7)

	hold := func(ip, network string, owner *corev1.Pod) *ipkeeperv1alpha1.IPReservation {
		t.Helper()
		r := ownedByPod(network, ip, owner, owner.UID)
		r.Spec.Pool = pool.Name
		r.Name = naming.Reservation(pool.Name, netip.MustParseAddr(ip))
		if err := cp.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), r) })
		return r
	}
	held := []*ipkeeperv1alpha1.IPReservation{
		hold("10.77.0.1", "net-a", pods[0]),
		hold("10.77.0.2", "net-a", pods[1]),
		hold("10.77.1.2", "net-b", pods[2]),
	}
	waitPool(t, pool, "counting 3 reservations", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return st.Used == 3 && st.Free == "4" && len(st.Ranges) == 2 &&
			st.Ranges[0].Used == 2 && st.Ranges[0].Free == "4" && st.Ranges[1].Used == 1 && st.Ranges[1].Free == "0" &&
			slices.Equal(st.Networks, []string{"net-a", "net-b"}) &&
			condIs(st, ipkeeperv1alpha1.PoolNearlyExhausted, metav1.ConditionFalse)
	})
	waitPoolMetric(t, pool.Name, "used", 3)
	waitPoolMetric(t, pool.Name, "free", 4)

	// 5 of 7 is 71%: above the 60% threshold (4 of 7 would be below).
	held = append(held, hold("10.77.0.3", "net-a", pods[3]), hold("10.77.0.4", "net-a", pods[4]))
	waitPool(t, pool, "NearlyExhausted at 5 of 7", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return st.Used == 5 && condIs(st, ipkeeperv1alpha1.PoolNearlyExhausted, metav1.ConditionTrue)
	})
	waitPoolEvents(t, pool, corev1.EventTypeWarning, ipkeeperv1alpha1.PoolNearlyExhausted, "5 of 7", 1)

	// The second range goes while 10.77.1.2 is held there: kept, counted
	// out of range. Still above the threshold (4 of 6, 67%): no second Event.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the status controller writes the pool too
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		pool.Spec.Ranges = pool.Spec.Ranges[:1]
		return cp.Client.Update(ctx, pool)
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, pool, "the removed range's address out of range", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return st.ObservedGeneration == pool.Generation && st.Size == "6" && st.Used == 4 && st.Free == "2" &&
			st.OutOfRange == 1 && len(st.Ranges) == 1 && condIs(st, ipkeeperv1alpha1.PoolNearlyExhausted, metav1.ConditionTrue)
	})
	waitPoolMetric(t, pool.Name, "out_of_range", 1)

	// Back below: 2 of 6.
	for _, r := range held[:2] {
		if err := cp.Client.Delete(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waitPool(t, pool, "below the threshold at 2 of 6", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return st.Used == 2 && st.Free == "4" && condIs(st, ipkeeperv1alpha1.PoolNearlyExhausted, metav1.ConditionFalse)
	})
	waitPoolEvents(t, pool, corev1.EventTypeNormal, ipkeeperv1alpha1.PoolReasonBelowWarning, "60%", 1)
	// One Warning for the one crossing, however many status writes.
	waitPoolEvents(t, pool, corev1.EventTypeWarning, ipkeeperv1alpha1.PoolNearlyExhausted, "", 1)

	// An invalid spec the schema cannot judge (a field it can is refused
	// at admission: TestCRDsAcceptValidAndRejectInvalid): not Ready, the
	// field and value named.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		pool.Spec.Ranges = append(pool.Spec.Ranges, pool.Spec.Ranges[0])
		return cp.Client.Update(ctx, pool)
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, pool, "Ready=False naming spec.ranges[1].range", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, ipkeeperv1alpha1.PoolReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ipkeeperv1alpha1.PoolReasonInvalidSpec &&
			strings.Contains(c.Message, "spec.ranges[1].range") && strings.Contains(c.Message, "overlaps") &&
			c.ObservedGeneration == pool.Generation
	})

	// A deleted pool's series go once the pool does: it waits for its
	// reservations (TestPoolInUseIsKeptUntilItsReservationsAreGone).
	for _, r := range held {
		if err := cp.Client.Delete(ctx, r); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	if err := cp.Client.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		_, ok := poolMetric(pool.Name, "total")
		return !ok, nil
	}); err != nil {
		t.Fatalf("ipkeeper_controller_pool_addresses series of deleted pool %s remain: %v", pool.Name, err)
	}
}

// TestPoolPrinterColumns: `kubectl get ippools` reads NAME SIZE USED FREE
// READY AGE (NAME is always first; the rest are the priority-0 columns).
func TestPoolPrinterColumns(t *testing.T) {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: "ippools.ipkeeper.io"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("ippools CRD has %d versions, want 1", len(versions))
	}
	cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
	var defaults []string
	for _, c := range cols {
		col := c.(map[string]any)
		if p, _, _ := unstructured.NestedInt64(col, "priority"); p == 0 {
			defaults = append(defaults, strings.ToUpper(col["name"].(string)))
		}
	}
	if want := []string{"SIZE", "USED", "FREE", "READY", "AGE"}; !slices.Equal(defaults, want) {
		t.Errorf("default printer columns after NAME = %q, want %q", defaults, want)
	}
}

// poolMetric reads ipkeeper_controller_pool_addresses{pool,state} from the in-process controller.
func poolMetric(pool, state string) (float64, bool) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != "ipkeeper_controller_pool_addresses" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pool"] == pool && labels["state"] == state {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func waitPoolMetric(t *testing.T, pool, state string, want float64) {
	t.Helper()
	var got float64
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		got, _ = poolMetric(pool, state)
		return got == want, nil
	}); err != nil {
		t.Fatalf("ipkeeper_controller_pool_addresses{pool=%q,state=%q} = %v, want %v: %v", pool, state, got, want, err)
	}
}

// waitPoolEvents waits until the pool's Events of type and reason whose
// message contains msg number exactly n (counting repeats the recorder
// folded into one Event).
func waitPoolEvents(t *testing.T, pool *ipkeeperv1alpha1.IPPool, typ, reason, msg string, n int32) {
	t.Helper()
	var seen []string
	var count int32
	if err := framework.Eventually(context.Background(), 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := cp.Client.List(ctx, &events); err != nil {
			return false, err
		}
		seen, count = seen[:0], 0
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID != pool.UID {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s (x%d): %s", ev.Type, ev.Reason, ev.Count, ev.Message))
			if ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Message, msg) {
				count += max(ev.Count, 1)
			}
		}
		return count == n, nil
	}); err != nil {
		t.Fatalf("pool %s has %d %s %s events containing %q, want %d; events: %q", pool.Name, count, typ, reason, msg, n, seen)
	}
}
