// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
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
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","network_name":%q,"ipRanges":[{"range":"10.102.0.0/24","gateway":"10.102.0.1"}]}}`, network, network)
	e.nad(t, "blue", conf)
	const requested = "10.102.0.50"
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

// TestVMAddressesKeptAcrossDeleteAndRestore: in a pool with a reuse
// cooldown, a deleted VM's addresses are kept for its claim names, so the
// VM made again under its name (by hand at once, or restored from a
// snapshot by KubeVirt's real restore controller once the addresses cool
// down) gets them back, with no request; another VM never gets them
// meanwhile.
func TestVMAddressesKeptAcrossDeleteAndRestore(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	poolName := retainingPool(t, "keep-"+e.ns, "10.103.0.0/29")
	e.nad(t, "blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":%q}}`, "keep-"+e.ns, poolName))
	kv := e.kv

	vm, err := kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	first := waitFilled(t, e.ns, "vm1.blue")
	if err := kv.Snapshot(ctx, vm, "snap-vm1"); err != nil {
		t.Fatal(err)
	}
	// deleteVM deletes a VM and waits for its claim to go and, with
	// retired, for the garbage collector to have released the claim's
	// addresses (they cool down).
	deleteVM := func(vm *kubevirtv1.VirtualMachine, claim *ipamclaimsv1alpha1.IPAMClaim, retired bool) {
		t.Helper()
		if err := cp.Client.Delete(ctx, vm); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the deleted VM's claim to go", func(ctx context.Context) (bool, error) {
			c, err := e.claim(ctx, claim.Name)
			if err == nil {
				return c.UID != claim.UID, nil
			}
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if !retired {
			return
		}
		waitFor(t, "the deleted VM's addresses to cool down", func(ctx context.Context) (bool, error) {
			for _, ip := range claimstatus.Addresses(claim) {
				var r ipkeeperv1alpha1.IPReservation
				if err := cp.Client.Get(ctx, keyOf(naming.Reservation(poolName, ip)), &r); err != nil {
					return false, client.IgnoreNotFound(err)
				}
				if r.Spec.Owner.UID != claim.UID || !r.Spec.Released() {
					return false, nil
				}
			}
			return true, nil
		})
	}

	// Deleted, then made again by hand under the same name (at once: the
	// addresses may not be released yet) after another VM took what was
	// free.
	deleteVM(vm, first, false)
	if _, err := kv.CreateVM(ctx, e.ns, "vm2", framework.VMNetwork{Name: "blue", NAD: "blue"}); err != nil {
		t.Fatal(err)
	}
	if got := waitFilled(t, e.ns, "vm2.blue"); slices.ContainsFunc(got.Status.IPs, func(ip string) bool { return slices.Contains(first.Status.IPs, ip) }) {
		t.Fatalf("another VM's claim records %v while vm1's %v cool down for it", got.Status.IPs, first.Status.IPs)
	}
	if vm, err = kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"}); err != nil {
		t.Fatal(err)
	}
	again := waitFilled(t, e.ns, "vm1.blue")
	if again.UID == first.UID || !slices.Equal(again.Status.IPs, first.Status.IPs) {
		t.Fatalf("VM made again: claim uid %s ips %v, want a new claim with the addresses %v", again.UID, again.Status.IPs, first.Status.IPs)
	}
	assertClaimKept(t, e, again)

	// Deleted again, then restored from the snapshot taken at first, once
	// the addresses cool down.
	deleteVM(vm, again, true)
	if _, err := kv.Restore(ctx, e.ns, "restore-vm1", "snap-vm1", "vm1"); err != nil {
		t.Fatal(err)
	}
	restored := waitFilled(t, e.ns, "vm1.blue")
	if restored.UID == again.UID || !slices.Equal(restored.Status.IPs, first.Status.IPs) {
		t.Fatalf("VM restored after its deletion: claim uid %s ips %v, want a new claim with the addresses %v", restored.UID, restored.Status.IPs, first.Status.IPs)
	}
	assertClaimKept(t, e, restored)
}

// TestVMBackupRestoreKeepsAddresses restores a deleted VM the way Velero's
// default restore does (objects recreated from the backup with their
// labels, annotations and finalizers but without status, UID or owner
// references; IPAMClaims before VirtualMachines, by its default order),
// and in the other order, into a pool with a reuse cooldown: either way
// the VM ends up with its addresses, held once. Velero itself does not
// run here: the test writes exactly what its restore writes
// (pkg/restore/restore.go, resetMetadataAndStatus).
func TestVMBackupRestoreKeepsAddresses(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	poolName := retainingPool(t, "backup-"+e.ns, "10.104.0.0/29")
	e.nad(t, "blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":%q}}`, "backup-"+e.ns, poolName))
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := waitFilled(t, e.ns, "vm1.blue")
	// The backup: the objects as the API server returned them.
	backupVM, backupClaim := vm.DeepCopy(), claim.DeepCopy()

	restoreVM := func() *kubevirtv1.VirtualMachine {
		v := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: backupVM.Name,
			Labels: backupVM.Labels, Annotations: backupVM.Annotations, Finalizers: backupVM.Finalizers}, Spec: *backupVM.Spec.DeepCopy()}
		if err := cp.Client.Create(ctx, v); err != nil {
			t.Fatalf("restoring the VM: %v", err)
		}
		return v
	}
	restoreClaim := func() {
		c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: backupClaim.Name,
			Labels: backupClaim.Labels, Annotations: backupClaim.Annotations, Finalizers: backupClaim.Finalizers}, Spec: backupClaim.Spec}
		// Velero skips an object that exists (a claim the controller made
		// for the VM restored first).
		if err := cp.Client.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("restoring the claim: %v", err)
		}
	}
	deleteVM := func(vm *kubevirtv1.VirtualMachine) {
		t.Helper()
		if err := cp.Client.Delete(ctx, vm); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the deleted VM's claims to go", func(ctx context.Context) (bool, error) {
			_, err := e.claim(ctx, "vm1.blue")
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	}
	for _, order := range []string{"claims first (Velero's default)", "VM first"} {
		deleteVM(vm)
		if order == "VM first" {
			vm = restoreVM()
			restoreClaim()
		} else {
			restoreClaim()
			vm = restoreVM()
		}
		waitFor(t, order+": the restored VM's claim to hold its addresses", func(ctx context.Context) (bool, error) {
			c, err := e.claim(ctx, "vm1.blue")
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			owner := metav1.GetControllerOf(c)
			return owner != nil && owner.UID == vm.UID && slices.Equal(c.Status.IPs, claim.Status.IPs), nil
		})
		now, err := e.claim(ctx, "vm1.blue")
		if err != nil {
			t.Fatal(err)
		}
		assertClaimKept(t, e, now)
		var list ipkeeperv1alpha1.IPReservationList
		if err := cp.Client.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, r := range list.Items {
			if r.Spec.Pool == poolName && !r.Spec.Released() {
				held++
			}
		}
		if held != len(claim.Status.IPs) {
			t.Fatalf("%s: %d reservations hold addresses of the pool, want the VM's %d", order, held, len(claim.Status.IPs))
		}
	}
}

// retainingPool creates an IPPool with a reuse cooldown of an hour and
// removes it, and every reservation of it, with the test.
func retainingPool(t *testing.T, name, cidr string) string {
	t.Helper()
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipkeeperv1alpha1.IPPoolSpec{
		Ranges: []ipkeeperv1alpha1.PoolRange{{Range: cidr}}, ReuseCooldown: &ipkeeperv1alpha1.Duration{Duration: time.Hour}}}
	if err := cp.Client.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	removeReservationsAtEnd(t, func(r *ipkeeperv1alpha1.IPReservation) bool { return r.Spec.Pool == name })
	return name
}

// removeReservationsAtEnd deletes, when t ends, the reservations match
// selects: retired for an hour, they are removed with the test, not left
// to a later test's garbage collector.
func removeReservationsAtEnd(t *testing.T, match func(*ipkeeperv1alpha1.IPReservation) bool) {
	t.Cleanup(func() {
		var list ipkeeperv1alpha1.IPReservationList
		_ = cp.Client.List(context.Background(), &list)
		for i := range list.Items {
			if match(&list.Items[i]) {
				_ = cp.Client.Delete(context.Background(), &list.Items[i])
			}
		}
	})
}
