// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/netip"
	"testing"
)

// TestAddIsIdempotent repeats the IPAM ADD of an attachment, as a runtime
// retrying after a timeout causes: the same pod and interface get the same
// address and no second reservation. The repeat goes to the ipkeeper shim
// directly, with exactly what bridge gave it, because bridge itself refuses
// to create eth0 twice. Another interface of the same pod is a different
// attachment and gets its own address.
func TestAddIsIdempotent(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const network = "e2e-idem"
	subnet := netip.MustParsePrefix("10.77.2.0/24")
	gateway := netip.MustParseAddr("10.77.2.1")
	list := bridgeNetwork(t, n, network, map[string]any{"range": subnet.String(), "gateway": gateway.String()})

	ns := c.NewNamespace(t, "e2e-idem")
	c.Define(t, ns, list)
	a := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+UniqueSuffix(6)), "eth0", c.CreatePod(t, ns, "pod-1", n.Name, ""))
	a.MustAdd(t)
	first := a.IP(t)
	CheckUsableIP(t, a.String(), first, subnet, gateway)

	for i := range 2 {
		res, err := a.IPAMAdd(ctx, "")
		if err != nil {
			t.Fatalf("repeated ADD #%d: %v", i+1, err)
		}
		if got := singleIP(t, "repeated ADD", res); got != first {
			t.Fatalf("repeated ADD #%d for the same pod and interface returned %s, first ADD %s", i+1, got, first)
		}
	}
	c.ExpectReservations(t, network, a)

	// Same pod, another interface: a new address, owned by that interface.
	res, err := a.IPAMAdd(ctx, "net1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.IPAMDel(context.Background(), "net1") })
	second := singleIP(t, "ADD as net1", res)
	CheckUsableIP(t, "ADD as net1", second, subnet, gateway)
	if second == first {
		t.Fatalf("net1 of the pod got eth0's address %s", first)
	}
	rs := c.Reservations(t, network)
	if len(rs) != 2 {
		t.Fatalf("want 2 reservations (eth0, net1), got %s", describe(rs))
	}
	for _, r := range rs {
		if r.Spec.IP == second.Addr().String() {
			if want := a.wantSpec(network, second.Addr(), "net1"); !sameSpec(r.Spec, want) {
				t.Errorf("net1 reservation:\n got spec %+v\nwant spec %+v", r.Spec, want)
			}
		}
	}

	// Releasing net1 leaves eth0's reservation alone.
	if err := a.IPAMDel(ctx, "net1"); err != nil {
		t.Fatal(err)
	}
	c.WaitReservationGone(t, network, second.Addr())
	c.ExpectReservations(t, network, a)
}

// TestNewSandboxOfPodKeepsAddress recreates a pod's sandbox (new container
// ID and netns), as the kubelet does when a sandbox dies: the pod keeps its
// address, the reservation follows the new sandbox, and a late DEL of the
// old sandbox does not release it; DEL of the new one does.
func TestNewSandboxOfPodKeepsAddress(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const network = "e2e-sandbox"
	list := bridgeNetwork(t, n, network, map[string]any{"range": "10.77.4.0/24", "gateway": "10.77.4.1"})

	ns := c.NewNamespace(t, "e2e-sandbox")
	c.Define(t, ns, list)
	pod := c.CreatePod(t, ns, "pod-1", n.Name, "")
	sfx := UniqueSuffix(6)
	old := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-old"), "eth0", pod)
	old.MustAdd(t)
	cur := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-new"), "eth0", pod)
	cur.MustAdd(t)
	if got, want := cur.IP(t), old.IP(t); got != want {
		t.Fatalf("new sandbox of the pod got %s, the old one had %s", got, want)
	}
	c.ExpectReservations(t, network, cur) // now names the new sandbox

	if err := old.Del(ctx); err != nil {
		t.Fatal(err)
	}
	c.ExpectReservations(t, network, cur) // DEL is synchronous: a wrong release would show here
	expectAddr(ctx, t, cur.NetNS, "eth0", cur.IP(t))

	if err := cur.Del(ctx); err != nil {
		t.Fatal(err)
	}
	c.WaitReservationGone(t, network, cur.IP(t).Addr())
}
