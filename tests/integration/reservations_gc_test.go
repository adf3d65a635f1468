// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The garbage collector releases what lost its owner (by UID), only after
// the grace period for pods, and keeps everything else.
func TestReservationGarbageCollector(t *testing.T) {
	ctx := context.Background()
	const grace = 4 * time.Second
	e := startKubeVirtEnv(t, func(o *manager.Options) { o.GCGracePeriod = grace })
	const network = "gc-net"
	pods := cp.CreatePods(t, e.ns, "", "gc", 3)
	live, doomed, recreated := pods[0], pods[1], pods[2]
	keptClaim := createClaim(t, e.ns, "kept", network)
	goneClaim := createClaim(t, e.ns, "gone", network)

	// The counters are process-wide: start from a collector with nothing
	// left to release from earlier tests (their namespaces go in the
	// background), or their releases would be counted here.
	waitNothingToCollect(t)
	releasedPods := controllerCounter("ipkeeper_controller_gc_reservations_released_total", "owner_kind", "Pod")
	releasedClaims := controllerCounter("ipkeeper_controller_gc_reservations_released_total", "owner_kind", "IPAMClaim")

	// Kept ones first: the collector's queue is FIFO with one worker, so
	// once the later ones are released these have been looked at.
	keep := []*ipkeeperv1alpha1.IPReservation{
		ownedByPod(network, "10.88.0.1", live, live.UID),
		ownedByClaim(network, "10.88.0.2", keptClaim),
	}
	release := []*ipkeeperv1alpha1.IPReservation{
		ownedByPod(network, "10.88.0.3", doomed, doomed.UID),
		ownedByPod(network, "10.88.0.4", recreated, "uid-of-an-older-pod-of-that-name"),
		ownedByClaim(network, "10.88.0.5", goneClaim),
	}
	for _, r := range append(append([]*ipkeeperv1alpha1.IPReservation{}, keep...), release...) {
		if err := cp.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, r := range keep {
			_ = cp.Client.Delete(context.Background(), r)
		}
	})
	if err := cp.Client.Delete(ctx, doomed, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	if err := cp.Client.Delete(ctx, goneClaim); err != nil {
		t.Fatal(err)
	}

	// The pod's reservation waits out the grace period.
	if err := framework.Eventually(ctx, 30*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		return framework.Gauge(metrics.Registry, "ipkeeper_controller_gc_reservations_pending") >= 1, nil
	}); err != nil {
		t.Fatalf("the deleted pod's reservation never became pending: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(release[0]), &ipkeeperv1alpha1.IPReservation{}); err != nil {
		t.Fatalf("released before the grace period ended: %v", err)
	}
	for _, r := range release {
		waitGone(t, r)
	}
	if waited := time.Since(deletedAt); waited < grace {
		t.Errorf("the deleted pod's reservation was released after %s, before the %s grace period", waited, grace)
	}
	for _, r := range keep {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
			t.Errorf("reservation %s with a live owner was released: %v", r.Name, err)
		}
	}
	if got := controllerCounter("ipkeeper_controller_gc_reservations_released_total", "owner_kind", "Pod") - releasedPods; got != 2 {
		t.Errorf("released pod reservations metric moved by %v, want 2", got)
	}
	if got := controllerCounter("ipkeeper_controller_gc_reservations_released_total", "owner_kind", "IPAMClaim") - releasedClaims; got != 1 {
		t.Errorf("released claim reservations metric moved by %v, want 1", got)
	}
}

// waitNothingToCollect waits until every reservation not yet released has
// its owner (a pod or a claim, by UID).
func waitNothingToCollect(t *testing.T) {
	t.Helper()
	var orphan string
	if err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var list ipkeeperv1alpha1.IPReservationList
		if err := cp.Client.List(ctx, &list); err != nil {
			return false, err
		}
		for _, r := range list.Items {
			if r.Spec.Released() {
				continue // cooling down, the collector's business later
			}
			o := r.Spec.Owner
			var owner client.Object = &corev1.Pod{}
			if o.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
				owner = &ipamclaimsv1alpha1.IPAMClaim{}
			} else if o.Kind != ipkeeperv1alpha1.OwnerPod {
				continue
			}
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, owner)
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			if err != nil || owner.GetUID() != o.UID {
				orphan = r.Name
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("reservation %s of an earlier test is still to be collected: %v", orphan, err)
	}
}
