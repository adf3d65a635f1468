// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// A clone and a restore through KubeVirt's own clone, snapshot and restore
// controllers (the real virt-controller), with the real Multus and bridge
// plugin in network namespaces: a VM that requests its address runs and is
// reached; stopped, it is cloned (the clone inherits the request while
// the VM holds the address, and gets another address) and restored over
// itself from a snapshot (it keeps its address); then both run at once
// and a peer reaches each at the address docs/kubevirt.md says it has.
func TestSystemVMCloneAndRestore(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.NewNamespace(t, "sys-clone")
	t.Log(c.KV.Simulated())
	c.BridgeNAD(t, ns, "blue", "sys-cl-blue", true, map[string]any{"range": "10.98.0.0/24"})
	blueIf := kubevirt.PodInterfaceName("blue")
	requested := netip.MustParsePrefix("10.98.0.50/24")

	vm := framework.NewVM(ns, "src", framework.VMNetwork{Name: "blue", NAD: "blue"})
	vm.Spec.Template.ObjectMeta.Annotations = map[string]string{claims.RequestedAddressesAnnotation: `{"blue":["` + requested.Addr().String() + `"]}`}
	if err := c.CP.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	_, launcher := c.StartVM(t, vm, "node-a")
	if got := launcher.MustAddr(t, blueIf); got != requested {
		t.Fatalf("the VM's launcher has %s on %s, want the requested %s", got, blueIf, requested)
	}
	peer := c.MustRun(t, c.PlainPod(t, ns, "peer", "node-b", "blue"))
	mustPing(t, peer, requested.Addr())

	// Stopped (KubeVirt snapshots a stopped VM without virt-handler),
	// cloned, and restored over itself from a snapshot.
	if err := c.KV.Stop(ctx, vm); err != nil {
		t.Fatal(err)
	}
	clone, err := c.KV.Clone(ctx, vm, "clone-src", "copy")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KV.Snapshot(ctx, vm, "snap-src"); err != nil {
		t.Fatal(err)
	}
	if vm, err = c.KV.Restore(ctx, ns, "restore-src", "snap-src", "src"); err != nil {
		t.Fatal(err)
	}

	_, launcher = c.StartVM(t, vm, "node-a")
	if got := launcher.MustAddr(t, blueIf); got != requested {
		t.Fatalf("after the restore the VM's launcher has %s, want its address %s", got, requested)
	}
	_, copied := c.StartVM(t, clone, "node-b")
	copyAddr := copied.MustAddr(t, blueIf)
	if copyAddr == requested || copyAddr.Addr() == peer.MustAddr(t, "net1").Addr() {
		t.Fatalf("the clone's launcher has %s: want an address of its own", copyAddr)
	}
	claim := c.WaitClaimIPs(t, ns, "copy.blue")
	if got := claimstatus.Addresses(claim); len(got) != 1 || got[0] != copyAddr.Addr() {
		t.Fatalf("claim copy.blue records %v, the clone's launcher has %s", claim.Status.IPs, copyAddr)
	}
	// Each restarted launcher has a new interface (a new MAC: the VM's
	// spec sets none) and announces itself first, as KubeVirt's guest
	// does, so the peer's neighbour table learns it; then the peer
	// reaches each at its address.
	peerAddr := peer.MustAddr(t, "net1").Addr()
	mustPing(t, launcher, peerAddr)
	mustPing(t, copied, peerAddr)
	mustPing(t, peer, requested.Addr())
	mustPing(t, peer, copyAddr.Addr())
	mustPing(t, copied, requested.Addr())
}
