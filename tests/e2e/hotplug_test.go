// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// NIC hotplug and unplug as the real virt-controller writes them: a network
// added to a running VM's spec is added by virt-controller to the live
// launcher pod's networks annotation (ipkeeper's webhook adds the claim
// reference to that update), attached in the running sandbox (Multus'
// dynamic networks controller, simulated) and gets the claim's address,
// which a peer reaches; set absent, virt-controller drops it from the
// annotation, the sandbox detaches it (CNI DEL) and ipkeeper releases the
// claim and its address, while the VM keeps its other network's address.
func TestSystemVMHotplugAndUnplug(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.NewNamespace(t, "sys-hotplug")
	t.Log(c.KV.Simulated())
	c.BridgeNAD(t, ns, "blue", "sys-hp-blue", true, map[string]any{"range": "10.87.0.0/24"})
	c.BridgeNAD(t, ns, "red", "sys-hp-red", true, map[string]any{"range": "10.88.0.0/24"})
	blueIf, redIf := kubevirt.PodInterfaceName("blue"), kubevirt.PodInterfaceName("red")

	vm := c.CreateVM(t, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	_, launcher := c.StartVM(t, vm, "node-a")
	blueAddr := launcher.MustAddr(t, blueIf)
	peer := c.MustRun(t, c.PlainPod(t, ns, "peer", "node-b", "red"))
	peerAddr := peer.MustAddr(t, "net1")

	pod, err := c.KV.Hotplug(ctx, vm, framework.VMNetwork{Name: "red", NAD: "red"})
	if err != nil {
		t.Fatal(err)
	}
	if pod == nil || pod.UID != launcher.Pod.UID {
		t.Fatalf("hotplug went to pod %v, want the running launcher %s", pod, launcher.Pod.Name)
	}
	redAddr := launcher.MustAddr(t, redIf)
	claim := c.WaitClaimIPs(t, ns, "vm1.red")
	if !slices.Equal(claim.Status.IPs, []string{redAddr.String()}) {
		t.Fatalf("claim vm1.red status.ips = %v, the launcher's %s has %s", claim.Status.IPs, redIf, redAddr)
	}
	if want, _, _ := macaddr.OfClaim(claim); launcher.MustMAC(t, redIf) != want.String() {
		t.Fatalf("the hot-plugged %s has MAC %s, want its claim's %s", redIf, launcher.MustMAC(t, redIf), want)
	}
	if redAddr.Addr() == peerAddr.Addr() {
		t.Fatalf("the hot-plugged interface got the peer's address %s", redAddr)
	}
	mustPing(t, peer, redAddr.Addr())
	mustPing(t, launcher, peerAddr.Addr())
	if res := c.Reservations(t, "sys-hp-red"); len(res) != 2 {
		t.Fatalf("red has %d reservations after the hotplug, want 2 (the claim's and the peer's): %s", len(res), describe(res))
	}

	if err := c.KV.Unplug(ctx, vm, "red"); err != nil {
		t.Fatal(err)
	}
	if has, err := launcher.NetNS.HasLink(ctx, redIf); err != nil || has {
		t.Fatalf("after the unplug the launcher still has %s (err %v)", redIf, err)
	}
	c.WaitGone(t, claim)
	c.WaitReservations(t, "sys-hp-red", 1) // the peer's
	if got := launcher.MustAddr(t, blueIf); got != blueAddr {
		t.Fatalf("after the unplug of red the VM's blue address is %s, want %s", got, blueAddr)
	}
	if res := c.Reservations(t, "sys-hp-blue"); len(res) != 1 {
		t.Fatalf("blue has %d reservations, want the VM's one: %s", len(res), describe(res))
	}
}
