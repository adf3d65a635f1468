// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/netip"
	"testing"
)

// TestReleasedAddressIsHandedOutAgain fills a two-address range, checks that
// a third pod is refused without leaving a reservation behind, and that it
// gets the address a DEL released.
func TestReleasedAddressIsHandedOutAgain(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const network = "e2e-reuse"
	list := bridgeNetwork(t, n, network, map[string]any{
		"range":       "10.77.1.0/24",
		"range_start": "10.77.1.10",
		"range_end":   "10.77.1.11",
		"gateway":     "10.77.1.1",
	})
	pool := map[netip.Addr]bool{netip.MustParseAddr("10.77.1.10"): true, netip.MustParseAddr("10.77.1.11"): true}

	ns := c.NewNamespace(t, "e2e-reuse")
	c.Define(t, ns, list)
	sfx := UniqueSuffix(6)
	a1 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-1"), "eth0", c.CreatePod(t, ns, "pod-1", n.Name, ""))
	a2 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-2"), "eth0", c.CreatePod(t, ns, "pod-2", n.Name, ""))
	a1.MustAdd(t)
	a2.MustAdd(t)
	ip1, ip2 := a1.IP(t).Addr(), a2.IP(t).Addr()
	if !pool[ip1] || !pool[ip2] || ip1 == ip2 {
		t.Fatalf("pods got %s and %s, want 10.77.1.10 and 10.77.1.11 in some order", ip1, ip2)
	}
	c.ExpectReservations(t, network, a1, a2)

	// The range is full: ADD fails, and the runtime DELs the failed attempt.
	ns3 := NewNetNS(t, "ipke2e-"+sfx+"-3")
	pod3 := c.CreatePod(t, ns, "pod-3", n.Name, "")
	failed := n.NewAttachment(t, list, ns3, "eth0", pod3)
	if err := failed.Add(ctx); err == nil {
		t.Fatalf("ADD into a full range succeeded with %v", failed.Result)
	} else {
		t.Logf("ADD into the full range failed as it should: %v", err)
	}
	if err := failed.Del(ctx); err != nil {
		t.Fatalf("DEL after a failed ADD must succeed: %v", err)
	}
	c.ExpectReservations(t, network, a1, a2)

	// Releasing pod-1's address lets pod-3 (retried in a new sandbox) have it.
	if err := a1.Del(ctx); err != nil {
		t.Fatal(err)
	}
	c.WaitReservationGone(t, network, ip1)
	a3 := n.NewAttachment(t, list, ns3, "eth0", pod3)
	a3.MustAdd(t)
	if got := a3.IP(t).Addr(); got != ip1 {
		t.Fatalf("pod-3 got %s, want the released %s", got, ip1)
	}
	c.ExpectReservations(t, network, a2, a3)
	expectAddr(ctx, t, ns3, "eth0", a3.IP(t))
}
