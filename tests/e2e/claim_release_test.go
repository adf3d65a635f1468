// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestClaimReleaseSurvivesFailureAndCrashBetweenSteps releases a claim
// (its network hot-unplugged from a stopped VM, so nothing but ipkeeper
// will ever delete it) while the API server refuses one of the two steps of
// the release, SIGKILLs the ipkeeper-controller process at that point, lets
// the step through again and restarts the controller. Whatever the point of
// the crash, the claim and its address reservation must end up gone.
//
//   - delete refused: the release fails after its first step; the claim
//     must still hold its finalizer so that a later pass finds it.
//   - finalizer removal refused: the claim is already deleted and held by
//     its finalizer; the restarted controller must let it go.
//
// The refusals are ValidatingAdmissionPolicies in the test namespace (the
// API server's own admission, nothing in the controller knows). The VM
// stays stopped: only the VM object is used (the real virt-controller
// runs, and has nothing to do for it).
func TestClaimReleaseSurvivesFailureAndCrashBetweenSteps(t *testing.T) {
	cl := setup(t)
	ctx := context.Background()
	c := cl.CP.Client
	ns := cl.NewNamespace(t, "e2e-release")
	for _, n := range []string{"blue", "red"} {
		nad := &nadv1.NetworkAttachmentDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n},
			Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(`{"cniVersion":"1.0.0","name":"release-%s","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.77.9.0/24","network_name":"release-%s"}}`, n, n)},
		}
		if err := c.Create(ctx, nad); err != nil {
			t.Fatal(err)
		}
	}
	// The cluster's controller is the one that releases, crashes and restarts.
	proc := cl.Controller

	vm := cl.CreateVM(t, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"}, framework.VMNetwork{Name: "red", NAD: "red"})
	blue := waitClaimWithFinalizer(t, c, ns, naming.Claim(vm.Name, "blue"))
	red := waitClaimWithFinalizer(t, c, ns, naming.Claim(vm.Name, "red"))
	blueRes := claimReservation(t, c, blue, "release-blue", "10.77.9.10")
	redRes := claimReservation(t, c, red, "release-red", "10.77.9.11")

	crashAt := func(t *testing.T, claim *ipamclaimsv1alpha1.IPAMClaim, network string, fault *framework.Fault, probe func(context.Context) error, reached func(*ipamclaimsv1alpha1.IPAMClaim) bool) {
		removeNetwork(t, c, vm, network)
		if err := framework.Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			if !strings.Contains(proc.Tail(400), fault.Message) {
				return false, nil
			}
			var cur ipamclaimsv1alpha1.IPAMClaim
			if err := c.Get(ctx, client.ObjectKeyFromObject(claim), &cur); err != nil {
				return false, err
			}
			return reached(&cur), nil
		}); err != nil {
			t.Fatalf("the controller never reached the refused step for %s: %v", claim.Name, err)
		}
		proc.Kill()
		fault.Remove(t, probe)
		if err := proc.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := proc.WaitReady(ctx, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		cl.WaitGone(t, claim)
	}

	t.Run("delete refused", func(t *testing.T) {
		probe := func(ctx context.Context) error { return c.Delete(ctx, blue.DeepCopy(), client.DryRunAll) }
		fault := cl.CP.InjectFault(t, "ipk-refuse-delete-"+ns, framework.FaultSpec{
			Group: ipamclaimsv1alpha1.SchemeGroupVersion.Group, Resource: "ipamclaims", Namespace: ns,
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
			Refuse:     "true",
		}, probe)
		crashAt(t, blue, "blue", fault, probe, func(*ipamclaimsv1alpha1.IPAMClaim) bool { return true })
		cl.WaitGone(t, blueRes)
	})

	t.Run("finalizer removal refused", func(t *testing.T) {
		probe := func(ctx context.Context) error {
			var cur ipamclaimsv1alpha1.IPAMClaim
			if err := c.Get(ctx, client.ObjectKeyFromObject(red), &cur); err != nil {
				return err
			}
			patch := client.MergeFrom(cur.DeepCopy())
			controllerutil.RemoveFinalizer(&cur, claims.Finalizer)
			return c.Patch(ctx, &cur, patch, client.DryRunAll)
		}
		has := fmt.Sprintf("(has(%%[1]s.metadata.finalizers) && %%[1]s.metadata.finalizers.exists(f, f == '%s'))", claims.Finalizer)
		fault := cl.CP.InjectFault(t, "ipk-refuse-unfinalize-"+ns, framework.FaultSpec{
			Group: ipamclaimsv1alpha1.SchemeGroupVersion.Group, Resource: "ipamclaims", Namespace: ns,
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
			Refuse:     fmt.Sprintf(has, "oldObject") + " && !" + fmt.Sprintf(has, "object"),
		}, probe)
		// Deleted (the first step) and held by the finalizer when killed.
		crashAt(t, red, "red", fault, probe, func(cl *ipamclaimsv1alpha1.IPAMClaim) bool { return cl.DeletionTimestamp != nil })
		cl.WaitGone(t, redRes)
	})
}

func waitClaimWithFinalizer(t *testing.T, c client.Client, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &claim)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && controllerutil.ContainsFinalizer(&claim, claims.Finalizer), err
	}); err != nil {
		t.Fatalf("IPAMClaim %s/%s never appeared with its finalizer: %v", ns, name, err)
	}
	return &claim
}

// claimReservation stands for the address the IPAM allocated for the claim.
func claimReservation(t *testing.T, c client.Client, claim *ipamclaimsv1alpha1.IPAMClaim, network, ip string) *ipkv1alpha1.IPReservation {
	t.Helper()
	res := &ipkv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Reservation(network, netip.MustParseAddr(ip)),
			Labels: map[string]string{naming.NetworkLabel: naming.NetworkLabelValue(network)},
		},
		Spec: ipkv1alpha1.IPReservationSpec{
			Network: network, Pool: naming.InlinePool(network), IP: ip,
			Owner: ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	if err := c.Create(context.Background(), res); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), res) })
	return res
}

// removeNetwork takes a network out of a stopped VM's spec: its claim is no
// longer wanted, and no garbage collector of Kubernetes will delete it.
func removeNetwork(t *testing.T, c client.Client, vm *kubevirtv1.VirtualMachine, network string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		t.Fatal(err)
	}
	spec := &vm.Spec.Template.Spec
	spec.Networks = without(spec.Networks, func(n kubevirtv1.Network) bool { return n.Name == network })
	spec.Domain.Devices.Interfaces = without(spec.Domain.Devices.Interfaces, func(i kubevirtv1.Interface) bool { return i.Name == network })
	if err := c.Update(ctx, vm); err != nil {
		t.Fatal(err)
	}
}

func without[T any](s []T, drop func(T) bool) []T {
	var out []T
	for _, v := range s {
		if !drop(v) {
			out = append(out, v)
		}
	}
	return out
}
