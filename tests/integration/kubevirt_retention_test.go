// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestVMAddressesKeptForTheirRetention: a VM annotated with
// ipkeeper.io/retain-addresses-for, on a network whose pool has no reuse
// cooldown, keeps its addresses after its deletion for that long: its
// claim's reservations are retired (not deleted) when the claim is
// released, no other VM gets them meanwhile, and the VM made again under
// its name gets them back. A retention above the controller's
// --max-address-retention is capped, with an event saying so.
func TestVMAddressesKeptForTheirRetention(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t, func(o *manager.Options) { o.MaxAddressRetention = 2 * time.Hour })
	network := "retain-" + e.ns
	e.nad(t, "blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.105.0.0/29"}}`, network))
	removeReservationsAtEnd(t, func(r *ipkeeperv1alpha1.IPReservation) bool { return r.Spec.Network == network })
	createVM := func(name, retention string) *kubevirtv1.VirtualMachine {
		t.Helper()
		vm := framework.NewVM(e.ns, name, framework.VMNetwork{Name: "blue", NAD: "blue"})
		if retention != "" {
			vm.Annotations = map[string]string{claimstatus.RetentionAnnotation: retention}
		}
		if err := cp.Client.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		return vm
	}

	vm := createVM("vm1", "1h")
	first := waitFilled(t, e.ns, "vm1.blue")
	if got := first.Annotations[claimstatus.RetentionAnnotation]; got != "1h0m0s" || !slices.Contains(first.Finalizers, claims.RetentionFinalizer) {
		t.Fatalf("claim %s records retention %q with finalizers %v, want 1h0m0s and %s", first.Name, got, first.Finalizers, claims.RetentionFinalizer)
	}
	bad := createVM("vm-bad", "a week")
	waitEvent(t, bad, string(claims.ReasonRetentionRefused), `"a week" is not a duration`)
	if got := waitFilled(t, e.ns, "vm-bad.blue").Annotations; got[claimstatus.RetentionAnnotation] != "" {
		t.Fatalf("claim of a VM with an unreadable retention records %q", got[claimstatus.RetentionAnnotation])
	}
	runCLICases(t, []cliCase{
		{name: "why vm with a retention", args: []string{"why", "vm/vm1", "-n", e.ns}, code: cli.ExitOK,
			stdout: []string{"Retention:\n  " + claimstatus.RetentionAnnotation + " 1h on the VM", "IPAMClaim vm1.blue: " + claimstatus.RetentionAnnotation + " 1h0m0s: once released, its addresses are kept that long"}},
		{name: "why vm with an unreadable retention", args: []string{"why", "vm/vm-bad", "-n", e.ns}, code: cli.ExitOK,
			stdout: []string{"Next: fix the VM's annotation " + claimstatus.RetentionAnnotation + ` "a week" is not a duration`}},
	})
	capped := createVM("vm-capped", "720h")
	waitEvent(t, capped, string(claims.ReasonRetentionRefused), "kept for 2h0m0s")
	if got := waitFilled(t, e.ns, "vm-capped.blue").Annotations[claimstatus.RetentionAnnotation]; got != "2h0m0s" {
		t.Fatalf("capped claim records retention %q, want 2h0m0s", got)
	}

	deletedAt := time.Now()
	if err := cp.Client.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted VM's claim to go", func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, "vm1.blue")
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	for _, ip := range claimstatus.Addresses(first) {
		var r ipkeeperv1alpha1.IPReservation
		if err := cp.Client.Get(ctx, keyOf(naming.Reservation(naming.InlinePool(network), ip)), &r); err != nil {
			t.Fatalf("the deleted VM's reservation of %s: %v (want it retired, not deleted)", ip, err)
		}
		if r.Spec.Owner.UID != first.UID || !r.Spec.Released() {
			t.Fatalf("reservation of %s: owner %+v reuseAfter %v, want the deleted claim's, retired", ip, r.Spec.Owner, r.Spec.ReuseAfter)
		}
		if left := r.Spec.ReuseAfter.Sub(deletedAt); left < 59*time.Minute || left > 62*time.Minute {
			t.Fatalf("reservation of %s reusable after %v, %v after the deletion; want about 1h", ip, r.Spec.ReuseAfter, left)
		}
	}

	// Another VM takes what is free, never the retained addresses.
	createVM("vm2", "")
	if got := waitFilled(t, e.ns, "vm2.blue"); slices.ContainsFunc(got.Status.IPs, func(ip string) bool { return slices.Contains(first.Status.IPs, ip) }) {
		t.Fatalf("another VM's claim records %v while vm1's %v are retained for it", got.Status.IPs, first.Status.IPs)
	}
	createVM("vm1", "1h")
	again := waitFilled(t, e.ns, "vm1.blue")
	if again.UID == first.UID || !slices.Equal(again.Status.IPs, first.Status.IPs) {
		t.Fatalf("VM made again: claim uid %s ips %v, want a new claim with the addresses %v", again.UID, again.Status.IPs, first.Status.IPs)
	}
	assertClaimKept(t, e, again)
	var held ipamclaimsv1alpha1.IPAMClaimList
	if err := cp.Client.List(ctx, &held, client.InNamespace(e.ns)); err != nil || len(held.Items) != 4 {
		t.Fatalf("claims %d (%v), want vm1's, vm2's, vm-bad's and vm-capped's", len(held.Items), err)
	}
}
