// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/netip"
	"testing"
)

// TestMacvlanTwoNamespacesPing attaches two pod sandboxes as net1 (the name
// Multus gives a first secondary interface) through the real macvlan plugin
// in bridge mode and ipkeeper, and checks they reach each other. The master
// is one end of a host veth pair: there is no NIC to spare, and the kernel
// used here has no dummy links.
func TestMacvlanTwoNamespacesPing(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const network = "e2e-red"
	subnet := netip.MustParsePrefix("10.77.3.0/24")
	sfx := UniqueSuffix(6)
	master := "ipkm" + sfx + "a"
	NewHostVethPair(t, master, "ipkm"+sfx+"b") // registered before any attachment: removed after their DELs
	list := Conflist(t, network, map[string]any{
		"type":   "macvlan",
		"master": master,
		"mode":   "bridge",
		"ipam":   n.IPAM(map[string]any{"range": subnet.String(), "exclude": []string{"10.77.3.0/28"}}),
	})

	ns := c.NewNamespace(t, "e2e-macvlan")
	c.Define(t, ns, list)
	a1 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-1"), "net1", c.CreatePod(t, ns, "pod-1", n.Name, ""))
	a2 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-2"), "net1", c.CreatePod(t, ns, "pod-2", n.Name, ""))
	a1.MustAdd(t)
	a2.MustAdd(t)
	ip1, ip2 := a1.IP(t), a2.IP(t)
	excluded := netip.MustParsePrefix("10.77.3.0/28")
	for _, a := range []*Attachment{a1, a2} {
		ip := a.IP(t)
		CheckUsableIP(t, a.String(), ip, subnet, netip.Addr{})
		if excluded.Contains(ip.Addr()) {
			t.Errorf("%s: got %s, inside the excluded %s", a, ip, excluded)
		}
		expectAddr(ctx, t, a.NetNS, "net1", ip)
	}
	if ip1.Addr() == ip2.Addr() {
		t.Fatalf("both pods got %s", ip1)
	}
	if err := a1.NetNS.Ping(ctx, ip2.Addr()); err != nil {
		t.Error(err)
	}
	c.ExpectReservations(t, network, a1, a2)

	for _, a := range []*Attachment{a1, a2} {
		if err := a.Del(ctx); err != nil {
			t.Fatal(err)
		}
		c.WaitReservationGone(t, network, a.IP(t).Addr())
	}
	c.ExpectReservations(t, network)
}
