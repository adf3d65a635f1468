// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// createCoolPool creates an IPPool with a reuse cooldown, deleted when the test ends.
func createCoolPool(t *testing.T, name, cidr string, cooldown time.Duration) {
	t.Helper()
	p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: cidr}}, ReuseCooldown: &ipkeeperv1alpha1.Duration{Duration: cooldown}}}
	if err := cp.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), p) })
}

// released reads a reservation live and fails unless it is released
// (spec.reuseAfter set), returning it.
func releasedReservation(t *testing.T, name string) *ipkeeperv1alpha1.IPReservation {
	t.Helper()
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := cp.Client.Get(context.Background(), keyOf(name), r); err != nil {
		t.Fatalf("the released reservation %s: %v; want it kept while its address cools down", name, err)
	}
	if !r.Spec.Released() {
		t.Fatalf("reservation %s after its release: reuseAfter unset", name)
	}
	return r
}

// Delayed reuse survives an agent restart: the release is recorded on the
// reservation (spec.reuseAfter), so a new agent, with nothing in memory,
// still refuses the cooling address and hands it out once the cooldown is
// over (with no controller running: the agent deletes its node's expired
// release itself). Each pool is a /30, two addresses, one held by a third
// pod: the released address is the only candidate.
func TestCooldownSurvivesAgentRestart(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "cooldown")
	const node = "node-cool"
	const long, short = 30 * time.Second, 3 * time.Second
	createCoolPool(t, "cool-long", "10.66.0.0/30", long)
	createCoolPool(t, "cool-short", "10.66.1.0/30", short)
	confs := map[string][]byte{
		"cool-long":  framework.NetConf("cool-long-net", map[string]any{"pool": "cool-long"}),
		"cool-short": framework.NetConf("cool-short-net", map[string]any{"pool": "cool-short"}),
	}
	released := map[string]netip.Addr{}
	reuseAfter := map[string]time.Time{}

	t.Run("first agent", func(t *testing.T) { // stopped when the subtest ends
		a := cp.StartAgent(t, node)
		for pool, conf := range confs {
			ps := cp.CreatePods(t, ns, node, "first-"+pool, 2)
			third, podA := ps[0], ps[1]
			if _, err := a.Add(ctx, third, "net1", conf); err != nil {
				t.Fatal(err)
			}
			res, err := a.Add(ctx, podA, "net1", conf)
			if err != nil {
				t.Fatal(err)
			}
			x := resultIPs(t, res)[0]
			delAt := time.Now()
			if err := a.Del(ctx, podA, framework.SandboxID(podA), "net1", conf); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			r := releasedReservation(t, naming.Reservation(pool, x))
			cooldown := long
			if pool == "cool-short" {
				cooldown = short
			}
			if at := r.Spec.ReuseAfter.Time; at.Before(delAt.Add(cooldown).Truncate(time.Second)) || at.After(time.Now().Add(cooldown+time.Second)) {
				t.Errorf("%s: reuseAfter %s, want %s after the DEL at %s", pool, at, cooldown, delAt)
			}
			if r.Spec.Owner.UID != podA.UID {
				t.Errorf("%s: the released reservation changed owner: %+v", pool, r.Spec.Owner)
			}
			released[pool], reuseAfter[pool] = x, r.Spec.ReuseAfter.Time
		}
	})
	if t.Failed() {
		return
	}

	a := cp.StartAgent(t, node)
	t.Run("still cooling after the restart", func(t *testing.T) {
		b := cp.CreatePods(t, ns, node, "b-long", 1)[0]
		_, err := a.Add(ctx, b, "net1", confs["cool-long"])
		if time.Now().After(reuseAfter["cool-long"]) {
			t.Skip("the machine is too slow to see the 30s cooldown still running")
		}
		if err == nil || !strings.Contains(err.Error(), "exhausted") {
			t.Fatalf("ADD while %s cools down (until %s): %v; want exhausted", released["cool-long"], reuseAfter["cool-long"], err)
		}
	})
	t.Run("handed out again once expired", func(t *testing.T) {
		b := cp.CreatePods(t, ns, node, "b-short", 1)[0]
		var got netip.Addr
		var last error
		if err := framework.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			res, err := a.Add(ctx, b, "net1", confs["cool-short"])
			if err != nil {
				last = err
				return false, nil
			}
			got = resultIPs(t, res)[0]
			return true, nil
		}); err != nil {
			t.Fatalf("the address never came back after its %s cooldown: %v (last: %v)", short, err, last)
		}
		if now := time.Now(); now.Before(reuseAfter["cool-short"]) {
			t.Errorf("handed out at %s, before reuseAfter %s", now, reuseAfter["cool-short"])
		}
		if got != released["cool-short"] {
			t.Fatalf("got %s, want the released %s (the only free address)", got, released["cool-short"])
		}
		r := &ipkeeperv1alpha1.IPReservation{}
		if err := cp.Client.Get(ctx, keyOf(naming.Reservation("cool-short", got)), r); err != nil || r.Spec.Released() || r.Spec.Owner.UID != b.UID {
			t.Errorf("reservation of %s: %v, released %v, owner %s; want a new one for %s", got, err, r.Spec.Released(), r.Spec.Owner.UID, b.Name)
		}
	})
}

// The controller's garbage collector releases a reservation whose pod is
// gone by retiring it in a pool with a cooldown, and a restarted collector
// deletes it only once reuseAfter has passed.
func TestCooldownSurvivesControllerRestart(t *testing.T) {
	ctx := context.Background()
	const cooldown = 8 * time.Second
	createCoolPool(t, "gc-cool", "10.66.2.0/24", cooldown)
	e := startKubeVirtEnv(t, func(o *manager.Options) { o.GCGracePeriod = time.Second })
	pod := cp.CreatePods(t, e.ns, "", "gc-cool", 1)[0]
	r := ownedByPod("gc-cool-net", "10.66.2.7", pod, pod.UID)
	r.Name, r.Spec.Pool = naming.Reservation("gc-cool", netip.MustParseAddr("10.66.2.7")), "gc-cool"
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), r) })
	if err := cp.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	var cur ipkeeperv1alpha1.IPReservation
	if err := framework.Eventually(ctx, 60*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), &cur); err != nil {
			return false, err // deleted instead of retired fails here
		}
		return cur.Spec.Released(), nil
	}); err != nil {
		t.Fatalf("the collector never retired the reservation of the deleted pod: %v", err)
	}
	if cur.UID != r.UID {
		t.Fatalf("the reservation was replaced (uid %s, was %s)", cur.UID, r.UID)
	}
	reuseAt := cur.Spec.ReuseAfter.Time

	e.ctrl.Stop()
	cp.StartController(t, e.ns, func(o *manager.Options) { o.EnableWebhook = false })
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), &cur); err != nil && time.Now().Before(reuseAt) {
		t.Fatalf("the restarted collector deleted the released reservation before reuseAfter %s: %v", reuseAt, err)
	}
	if err := framework.WaitGone(ctx, cp.Client, r, 60*time.Second); err != nil {
		t.Fatalf("the restarted collector never deleted the expired release: %v", err)
	}
	if now := time.Now(); now.Before(reuseAt) {
		t.Errorf("deleted at %s, before reuseAfter %s", now, reuseAt)
	}
}
