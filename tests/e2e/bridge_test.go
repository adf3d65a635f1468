// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// bridgeNetwork is a conflist with the real bridge plugin delegating IPAM to
// ipkeeper, on a new host bridge that is deleted when t ends.
func bridgeNetwork(t *testing.T, n *Node, name string, ipam map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	bridge := "ipkb" + UniqueSuffix(8)
	DeleteHostLinkOnCleanup(t, bridge) // registered before any attachment: runs after their DELs
	return Conflist(t, name, map[string]any{
		"type":      "bridge",
		"bridge":    bridge,
		"isGateway": true,
		"ipam":      n.IPAM(ipam),
	})
}

// TestBridgeTwoNamespacesPing attaches two pod sandboxes to one bridge
// network through the real bridge plugin and ipkeeper, checks addresses,
// reservations and connectivity, then releases one address and attaches a
// third pod.
func TestBridgeTwoNamespacesPing(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const network = "e2e-blue"
	subnet := netip.MustParsePrefix("10.77.0.0/24")
	gateway := netip.MustParseAddr("10.77.0.1")
	list := bridgeNetwork(t, n, network, map[string]any{"range": subnet.String(), "gateway": gateway.String()})

	ns := c.NewNamespace(t, "e2e-bridge")
	c.Define(t, ns, list)
	sfx := UniqueSuffix(6)
	a1 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-1"), "eth0", c.CreatePod(t, ns, "pod-1", n.Name, ""))
	a2 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-2"), "eth0", c.CreatePod(t, ns, "pod-2", n.Name, ""))
	a1.MustAdd(t)
	a2.MustAdd(t)

	ip1, ip2 := a1.IP(t), a2.IP(t)
	CheckUsableIP(t, a1.String(), ip1, subnet, gateway)
	CheckUsableIP(t, a2.String(), ip2, subnet, gateway)
	if ip1.Addr() == ip2.Addr() {
		t.Fatalf("both pods got %s", ip1)
	}
	for _, a := range []*Attachment{a1, a2} {
		expectAddr(ctx, t, a.NetNS, "eth0", a.IP(t))
	}
	if err := a1.NetNS.Ping(ctx, ip2.Addr()); err != nil {
		t.Error(err)
	}
	if err := a2.NetNS.Ping(ctx, ip1.Addr()); err != nil {
		t.Error(err)
	}
	c.ExpectReservations(t, network, a1, a2)
	if t.Failed() {
		t.FailNow()
	}

	// DEL releases pod-1's address; bridge removes its interface.
	if err := a1.Del(ctx); err != nil {
		t.Fatal(err)
	}
	c.WaitReservationGone(t, network, ip1.Addr())
	if present, err := a1.NetNS.HasLink(ctx, "eth0"); err != nil || present {
		t.Errorf("eth0 still in %s after DEL (err %v)", a1.NetNS.Name, err)
	}
	c.ExpectReservations(t, network, a2)

	// A new pod attaches; the count goes back to two and pod-1 holds nothing.
	a3 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-3"), "eth0", c.CreatePod(t, ns, "pod-3", n.Name, ""))
	a3.MustAdd(t)
	ip3 := a3.IP(t)
	CheckUsableIP(t, a3.String(), ip3, subnet, gateway)
	if ip3.Addr() == ip2.Addr() {
		t.Fatalf("pod-3 got pod-2's address %s", ip3)
	}
	if ip3.Addr() == ip1.Addr() {
		t.Logf("pod-3 got pod-1's released address %s", ip3)
	}
	c.ExpectReservations(t, network, a2, a3) // none of them for pod-1
	expectAddr(ctx, t, a3.NetNS, "eth0", ip3)
	if err := a3.NetNS.Ping(ctx, ip2.Addr()); err != nil {
		t.Error(err)
	}
}

// expectAddr checks that ifname in netns carries exactly want.
func expectAddr(ctx context.Context, t *testing.T, netns *NetNS, ifname string, want netip.Prefix) {
	t.Helper()
	got, err := netns.Addrs(ctx, ifname)
	if err != nil {
		t.Error(err)
		return
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("%s in %s has addresses %v, want [%s]", ifname, netns.Name, got, want)
	}
}
