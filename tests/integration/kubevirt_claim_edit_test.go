// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestRunningVMsEditedAddressIsHeldUntilItStops (issue 53, item 9): an
// administrator edits the claim's status.ips of a VM that runs (real
// virt-controller, its launcher Running). Before, ipkeeper-controller
// released the address the VM's guest still used at once, with no word.
// Now it reserves the new address, keeps the old one reserved for the
// claim while the launcher runs, says so (condition AddressesHeld, a
// Warning AddressesHeldWhileRunning Event on the claim and on the VM,
// naming the address, the pod and status.ips), and releases it once the
// VM stopped (a Normal HeldAddressesReleased Event).
func TestRunningVMsEditedAddressIsHeldUntilItStops(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	const network = "edit-blue"
	e.nad(t, "blue", bridgeNAD(network, true))
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := waitFilled(t, e.ns, "vm1.blue")
	old := netip.MustParsePrefix(claim.Status.IPs[0]).Addr()
	_, launcher, err := e.kv.Start(ctx, vm, "node-edit")
	if err != nil {
		t.Fatal(err)
	}
	waitOwnerPod(t, e.ns, claim.Name, launcher.Name)

	edited := netip.MustParseAddr("10.77.0.200")
	if edited == old {
		edited = netip.MustParseAddr("10.77.0.201")
	}
	setClaimIPs(t, e.ns, claim.Name, netip.PrefixFrom(edited, 24).String())
	oldRes := keyOf(naming.Reservation(network, old))
	waitFor(t, "the edited address reserved and the old one held while the VM runs", func(ctx context.Context) (bool, error) {
		var r ipkeeperv1alpha1.IPReservation
		if err := cp.Client.Get(ctx, oldRes, &r); err != nil || r.Spec.Owner.UID != claim.UID || r.Spec.Released() {
			t.Fatalf("the address %s the running VM's guest uses was released or lost (%v, owner %+v, reuseAfter %v) after status.ips was edited to %s",
				old, err, r.Spec.Owner, r.Spec.ReuseAfter, edited)
		}
		var n ipkeeperv1alpha1.IPReservation
		if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, edited)), &n); err != nil || n.Spec.Owner.UID != claim.UID {
			return false, client.IgnoreNotFound(err)
		}
		c := getClaim(t, e.ns, claim.Name)
		cond := meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionHeld)
		return cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
	want := "status.ips does not record " + old.String() + ", but pod " + launcher.Name
	waitEvent(t, claim, "AddressesHeldWhileRunning", want)
	waitEvent(t, vm, "AddressesHeldWhileRunning", "IPAMClaim vm1.blue: "+want)

	if err := e.kv.Stop(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old address released once the VM stopped", func(ctx context.Context) (bool, error) {
		var r ipkeeperv1alpha1.IPReservation
		err := cp.Client.Get(ctx, oldRes, &r)
		released := err != nil || r.Spec.Owner.UID != claim.UID || r.Spec.Released()
		c := getClaim(t, e.ns, claim.Name)
		return released && meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionHeld) == nil, client.IgnoreNotFound(err)
	})
	waitEvent(t, claim, "HeldAddressesReleased", "none runs any more")
}
