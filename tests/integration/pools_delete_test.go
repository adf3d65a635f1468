// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestPoolInUseIsKeptUntilItsReservationsAreGone: deleting an IPPool that
// reservations still hold waits for the last of them, released ones
// cooling down included, so the cooldown is honoured: ipkeeper-controller
// keeps its finalizer on every pool, says why the deletion waits (the
// Deleting condition, a Normal Event) and removes the finalizer once the
// last reservation is gone. who-has says when a reservation's pool is
// being deleted, and when it no longer exists.
func TestPoolInUseIsKeptUntilItsReservationsAreGone(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "pool-delete")
	cp.StartController(t, ns, func(o *manager.Options) { o.EnableWebhook = false })
	network := ns + "-net"
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: ipkeeperv1alpha1.IPPoolSpec{
		Ranges:        []ipkeeperv1alpha1.PoolRange{{Range: "10.93.7.0/29"}},
		ReuseCooldown: &ipkeeperv1alpha1.Duration{Duration: 4 * time.Second},
	}}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	owner := cliPod(t, ns, "web-0")
	held := cliReservation(t, pool.Name, network, "10.93.7.2", podOwner(owner))

	// Every pool is protected, in use or not.
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)
		return err == nil && slices.Contains(pool.Finalizers, ipkeeperv1alpha1.PoolInUseFinalizer), client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("IPPool %s never got finalizer %s (finalizers %v): %v", pool.Name, ipkeeperv1alpha1.PoolInUseFinalizer, pool.Finalizers, err)
	}

	if err := cp.Client.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitPool(t, pool, "Deleting=True naming its reservation", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, ipkeeperv1alpha1.PoolDeleting)
		return pool.DeletionTimestamp != nil && c != nil && c.Status == metav1.ConditionTrue &&
			c.Reason == ipkeeperv1alpha1.PoolReasonReservationsLeft && strings.Contains(c.Message, "1 reservation")
	})
	waitPoolEvents(t, pool, "Normal", ipkeeperv1alpha1.PoolReasonReservationsLeft, "waits", 1)
	runCLICases(t, []cliCase{
		{name: "who-has, pool being deleted", args: []string{"who-has", "10.93.7.2"}, code: cli.ExitOK,
			stdout: []string{"Pod " + ns + "/web-0", "held", "IPPool " + pool.Name + " is being deleted"}},
	})

	// Released as a DEL releases in a pool with a cooldown: the pool
	// stays while the address cools down.
	reuseAfter := time.Now().Add(4 * time.Second)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the garbage collector labels it
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil {
			return err
		}
		held.Spec.ReuseAfter = ptrTime(reuseAfter)
		return cp.Client.Update(ctx, held)
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, pool, "Deleting=True naming the address cooling down", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, ipkeeperv1alpha1.PoolDeleting)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "1 of them cooling down")
	})
	if err := framework.WaitGone(ctx, cp.Client, pool, 30*time.Second); err != nil {
		t.Fatalf("IPPool %s once its last reservation cooled down: %v", pool.Name, err)
	}
	if now := time.Now(); now.Before(reuseAfter.Truncate(time.Second)) {
		t.Errorf("IPPool %s went at %s, before its last address's cooldown ended at %s", pool.Name, now, reuseAfter)
	}

	// A reservation whose pool is gone (deleted before ipkeeper protected
	// pools, or its finalizer removed by hand) is told as such.
	orphan := cliPod(t, ns, "orphan-0")
	cliReservation(t, ns+"-gone", network, "10.93.7.3", podOwner(orphan))
	runCLICases(t, []cliCase{
		{name: "who-has, pool gone", args: []string{"who-has", "10.93.7.3"}, code: cli.ExitOK,
			stdout: []string{"Pod " + ns + "/orphan-0", "IPPool " + ns + "-gone no longer exists"}},
	})
}
