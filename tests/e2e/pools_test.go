// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestPoolGrowsAndShrinksEndToEnd runs pods through Multus -> bridge ->
// ipkeeper on a NAD that names an IPPool, and changes the pool under them:
// a range added is handed out without restarting anything; a range removed
// hands out nothing more, while the pods that hold addresses there keep
// them (in their network namespaces and as reservations) and the pool
// reports them out of range. `kubectl get ippools` shows the explicit pool
// and an inline network's pool with their usage.
func TestPoolGrowsAndShrinksEndToEnd(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "e2e-pool")
	c.DumpOnFailure(t, ns)
	const pool = "e2e-grow"
	p := &ipkv1alpha1.IPPool{}
	p.Name = pool
	p.Spec.Ranges = []ipkv1alpha1.PoolRange{{Range: "10.85.0.0/30"}} // 2 usable
	if err := c.CP.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CP.Client.Delete(context.Background(), p) })
	c.BridgeNAD(t, ns, "grow", "e2e-grow-net", false, map[string]any{"pool": pool})
	c.BridgeNAD(t, ns, "inline", "e2e-inline-net", false, map[string]any{"range": "10.86.0.0/29"})

	first := []*Sandbox{
		c.MustRun(t, c.PlainPod(t, ns, "a", "node-a", "grow")),
		c.MustRun(t, c.PlainPod(t, ns, "b", "node-b", "grow")),
	}
	held := []netip.Prefix{first[0].MustAddr(t, "net1"), first[1].MustAddr(t, "net1")}
	c.MustRun(t, c.PlainPod(t, ns, "inline-a", "node-c", "inline"))
	late := c.PlainPod(t, ns, "late", "node-c", "grow")
	if _, err := c.RunPod(ctx, late); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("third pod on a 2-address pool: %v, want exhausted", err)
	}
	c.WaitPoolUsage(t, pool, "2", 2)
	c.WaitPoolUsage(t, "e2e-inline-net", "6", 1)
	table, err := c.CP.Kubectl(ctx, nil, "get", "ippools")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get ippools:\n%s", table)
	for _, want := range []string{"NAME", "SIZE", "USED", "FREE", pool, "e2e-inline-net"} {
		if !strings.Contains(string(table), want) {
			t.Errorf("kubectl get ippools does not show %q:\n%s", want, table)
		}
	}

	// Grow: the kubelet's retry of the late pod succeeds in the new range.
	setRanges(t, c, pool, ipkv1alpha1.PoolRange{Range: "10.85.0.0/30"}, ipkv1alpha1.PoolRange{Range: "10.85.1.0/29", Gateway: "10.85.1.1"})
	var lateBox *Sandbox
	if err := framework.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		lateBox, err = c.RunPod(ctx, c.podOf(t, late))
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the pod never got an address after the pool grew: %v", err)
	}
	if got := lateBox.MustAddr(t, "net1"); !netip.MustParsePrefix("10.85.1.0/29").Contains(got.Addr()) || got.Bits() != 29 {
		t.Fatalf("after growth the pod got %s, want an address of 10.85.1.0/29", got)
	}
	c.WaitPoolUsage(t, pool, "7", 3)

	// Shrink: remove the first range while two pods hold addresses there.
	setRanges(t, c, pool, ipkv1alpha1.PoolRange{Range: "10.85.1.0/29", Gateway: "10.85.1.1"})
	if err := framework.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.CP.Client.Get(ctx, client.ObjectKey{Name: pool}, p); err != nil {
			return false, err
		}
		return p.Status.OutOfRange == 2 && p.Status.Used == 1 && p.Status.Size == "5", nil
	}); err != nil {
		t.Fatalf("pool status after the shrink: size %s used %d out of range %d, want 5, 1, 2: %v", p.Status.Size, p.Status.Used, p.Status.OutOfRange, err)
	}
	for i, s := range first {
		if got := s.MustAddr(t, "net1"); got != held[i] {
			t.Errorf("pod %s has %s after the shrink, want its %s", s.Pod.Name, got, held[i])
		}
	}
	for i := range 4 {
		box := c.MustRun(t, c.PlainPod(t, ns, "after-"+string(rune('a'+i)), "node-a", "grow"))
		got := box.MustAddr(t, "net1")
		if !netip.MustParsePrefix("10.85.1.0/29").Contains(got.Addr()) {
			t.Fatalf("after the shrink a new pod got %s, outside the remaining range", got)
		}
	}
	c.WaitPoolUsage(t, pool, "5", 5)
	// The removed range's addresses are still held, by their pods only.
	c.WaitReservations(t, "e2e-grow-net", 7)
}

func setRanges(t testing.TB, c *Cluster, pool string, ranges ...ipkv1alpha1.PoolRange) {
	t.Helper()
	// Again on a conflict: the controller writes the pool's status too.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &ipkv1alpha1.IPPool{}
		if err := c.CP.Client.Get(context.Background(), client.ObjectKey{Name: pool}, p); err != nil {
			return err
		}
		p.Spec.Ranges = ranges
		return c.CP.Client.Update(context.Background(), p)
	}); err != nil {
		t.Fatal(err)
	}
}
