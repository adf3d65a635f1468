// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/claims"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestVMCloneAndRestore runs KubeVirt's own clone, snapshot and restore
// controllers (those of the real virt-controller the control plane runs;
// the VMs stay stopped, so no virt-handler is needed to freeze a guest) on
// a VM that requests its address with network.kubevirt.io/addresses:
//   - the clone inherits the request while its source holds the address:
//     its claim gets another address at once (TakenOtherAddressesGiven on
//     the claim, an Event on the clone, kubectl ipkeeper why vm), and the
//     source keeps its own;
//   - a restore over the same VM keeps its claim and addresses;
//   - a restore as a new VM, while the source holds the address, gets
//     another address the same way;
//   - a restore after the source was deleted (its claim released, the
//     address freed) gets the address back.
func TestVMCloneAndRestore(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	network := "clone-" + e.ns // cluster-scoped pool and reservations: one network per run
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","network_name":%q,"ipRanges":[{"range":"10.79.0.0/24","gateway":"10.79.0.1"}]}}`, network, network)
	e.nad(t, "blue", conf)
	const requested = "10.79.0.50"
	src := createVMRequesting(t, e, "src", `{"blue":["`+requested+`"]}`)
	srcClaim := waitRequested(t, e, "src.blue", claimstatus.ReasonRequestedReserved)
	if !slices.Equal(srcClaim.Status.IPs, []string{requested + "/24"}) {
		t.Fatalf("source claim status.ips = %v, want %s/24", srcClaim.Status.IPs, requested)
	}
	kv := e.kv

	// The clone: a VirtualMachineClone, for virt-controller's clone
	// controller (which snapshots the source and restores the snapshot as
	// the target VM).
	copyVM, err := kv.Clone(ctx, src, "clone-src", "copy")
	if err != nil {
		t.Fatal(err)
	}
	if !kubevirt.MadeByRestore(copyVM.Annotations) || copyVM.Spec.Template.ObjectMeta.Annotations[claims.RequestedAddressesAnnotation] == "" {
		t.Fatalf("clone's annotations %v, template annotations %v: want KubeVirt's %s and the copied request",
			copyVM.Annotations, copyVM.Spec.Template.ObjectMeta.Annotations, kubevirt.LastRestoreAnnotation)
	}
	copyClaim := waitRequested(t, e, "copy.blue", claimstatus.ReasonRequestedTakenOthersGiven)
	wantHeld := requested + ` on network "blue" is already reserved by IPAMClaim ` + e.ns + "/src.blue"
	assertOtherAddresses(t, copyClaim, requested, wantHeld)
	waitEvent(t, copyVM, string(claimaddrs.ReasonRequestedNotHonoured), claimstatus.ReasonRequestedTakenOthersGiven)
	why := runCLI(t, "why", "vm/copy", "-n", e.ns)
	if why.code != cli.ExitOK || !containsAll(why.out, claimstatus.ReasonRequestedTakenOthersGiven, wantHeld, "got other addresses than it requested") {
		t.Fatalf("kubectl ipkeeper why vm/copy (exit %d):\n%s\nwant the condition, whose the address is, and what to do", why.code, why.out)
	}
	assertClaimKept(t, e, srcClaim)

	// A snapshot of the source, restored over the source itself.
	if err := kv.Snapshot(ctx, src, "snap-src"); err != nil {
		t.Fatal(err)
	}
	if src, err = kv.Restore(ctx, e.ns, "restore-src", "snap-src", "src"); err != nil {
		t.Fatal(err)
	}
	if !kubevirt.MadeByRestore(src.Annotations) {
		t.Fatalf("restored source VM annotations %v, want KubeVirt's %s", src.Annotations, kubevirt.LastRestoreAnnotation)
	}
	assertClaimKept(t, e, srcClaim)

	// Restored as a new VM while the source still holds the address.
	if _, err := kv.Restore(ctx, e.ns, "restore-new", "snap-src", "src-restored"); err != nil {
		t.Fatal(err)
	}
	newClaim := waitRequested(t, e, "src-restored.blue", claimstatus.ReasonRequestedTakenOthersGiven)
	assertOtherAddresses(t, newClaim, requested, wantHeld)
	assertClaimKept(t, e, srcClaim)

	// Restored after the source VM was deleted: its claim is released and
	// the address freed, so the restored VM's request gets it back.
	if err := cp.Client.Delete(ctx, src); err != nil {
		t.Fatal(err)
	}
	pool := naming.InlinePool(network)
	waitFor(t, "the source's claim and reservation to go", func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, "src.blue")
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		err = cp.Client.Get(ctx, keyOf(naming.Reservation(pool, netip.MustParseAddr(requested))), &ipkeeperv1alpha1.IPReservation{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if _, err := kv.Restore(ctx, e.ns, "restore-after-delete", "snap-src", "src"); err != nil {
		t.Fatal(err)
	}
	back := waitRequested(t, e, "src.blue", claimstatus.ReasonRequestedReserved)
	if back.UID == srcClaim.UID || !slices.Equal(back.Status.IPs, []string{requested + "/24"}) {
		t.Fatalf("claim of the VM restored after delete: uid %s ips %v, want a new claim with %s/24", back.UID, back.Status.IPs, requested)
	}
}

// assertOtherAddresses checks a claim that got other addresses than the
// requested one, held by someone else, and says whose it is.
func assertOtherAddresses(t *testing.T, claim *ipamclaimsv1alpha1.IPAMClaim, requested, held string) {
	t.Helper()
	cond := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested)
	if len(claim.Status.IPs) != 1 || strings.HasPrefix(claim.Status.IPs[0], requested+"/") || !strings.Contains(cond.Message, held) ||
		!strings.Contains(cond.Message, "the claim got "+claim.Status.IPs[0]+" instead") {
		t.Fatalf("claim %s: ips %v, condition %+v; want one address other than %s, and a message saying %q and what it got",
			claim.Name, claim.Status.IPs, cond, requested, held)
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionIPsAllocated); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("claim %s: IPsAllocated = %+v, want True", claim.Name, c)
	}
}

// assertClaimKept checks that a claim is still the same object with the
// same addresses, its reservation still its own.
func assertClaimKept(t *testing.T, e *kvEnv, was *ipamclaimsv1alpha1.IPAMClaim) {
	t.Helper()
	now, err := e.claim(context.Background(), was.Name)
	if err != nil {
		t.Fatal(err)
	}
	if now.UID != was.UID || !slices.Equal(now.Status.IPs, was.Status.IPs) {
		t.Fatalf("claim %s: uid %s ips %v, want it kept: uid %s ips %v", was.Name, now.UID, now.Status.IPs, was.UID, was.Status.IPs)
	}
	for _, s := range now.Status.IPs {
		var r ipkeeperv1alpha1.IPReservation
		ip := netip.MustParsePrefix(s).Addr()
		if err := cp.Client.Get(context.Background(), keyOf(naming.Reservation(naming.InlinePool(now.Spec.Network), ip)), &r); err != nil || r.Spec.Owner.UID != now.UID {
			t.Fatalf("reservation of %s: %+v, %v; want it held by claim %s", ip, r.Spec.Owner, err, now.Name)
		}
	}
}
