// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestClaimNetworkComesFromItsOwner (issue 53, item 2): a claim that does
// not record its NAD, as ipam-extensions makes every claim (OpenShift
// Virtualization's default), gets its network and pool from what its VM
// uses, its spec.networks[].multus.networkName; a NAD of the same network
// name in an unrelated namespace, naming another pool, changes nothing.
// Before, the claim was left IPsAllocated=False ("served by more than one
// pool"), not retried, and its launchers failed. The unrelated namespace
// learns nothing of the VM or its claim from its own Events.
func TestClaimNetworkComesFromItsOwner(t *testing.T) {
	ctx := context.Background()
	vmNS := cp.NewNamespace(t, "owner-vm")
	netNS := cp.NewNamespace(t, "owner-net")
	evilNS := cp.NewNamespace(t, "owner-evil")
	const network = "owner-blue"
	createPool(t, "owner-blue-pool", ipkeeperv1alpha1.PoolRange{Range: "10.93.0.0/24"})
	createPool(t, "owner-evil-pool", ipkeeperv1alpha1.PoolRange{Range: "10.94.0.0/24"})
	// ipam-extensions makes the claims: ipkeeper-controller only fills them.
	cp.StartController(t, vmNS, func(o *manager.Options) {
		o.EnableWebhook = false
		o.ClaimsController = string(claimmaker.External)
	})
	persistentNAD(t, netNS, "blue", network, persistentConf(network, map[string]any{"pool": "owner-blue-pool"}))
	// The hostile tenant's NAD: the same network name, another pool.
	persistentNAD(t, evilNS, "blue", network, persistentConf(network, map[string]any{"pool": "owner-evil-pool"}))

	vm := framework.NewVM(vmNS, "vm1", framework.VMNetwork{Name: "blue", NAD: netNS + "/blue"})
	if err := cp.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), vm) })
	// The claim as ipam-extensions v0.6.0 makes it: <vm>.<network>, a
	// controller reference to the VM, spec.network the NAD's CNI network,
	// no NAD recorded.
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmNS, Name: "vm1.blue", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: kubevirt.PodInterfaceName("blue")},
	}
	if err := cp.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}

	var got ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), &got); err != nil {
			return false, err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, "IPsAllocated"); c != nil && c.Status == metav1.ConditionFalse && !strings.Contains(c.Message, "not exist yet") {
			t.Fatalf("claim %s/%s: IPsAllocated=False %s: %s, want its VM's network's pool", vmNS, claim.Name, c.Reason, c.Message)
		}
		return len(got.Status.IPs) > 0, nil
	}); err != nil {
		t.Fatalf("claim %s/%s never got addresses (conditions %+v): %v", vmNS, claim.Name, got.Status.Conditions, err)
	}
	if len(got.Status.IPs) != 1 || !strings.HasPrefix(got.Status.IPs[0], "10.93.0.") {
		t.Fatalf("status.ips = %v, want one address of IPPool owner-blue-pool (10.93.0.0/24), the pool of the VM's NAD %s/blue", got.Status.IPs, netNS)
	}
	for _, r := range reservationsOf(t, network) {
		if r.Spec.Owner.UID == got.UID && r.Spec.Pool != "owner-blue-pool" {
			t.Errorf("reservation %s of the claim is in IPPool %s, want owner-blue-pool", r.Name, r.Spec.Pool)
		}
	}

	// The unrelated namespace is told nothing about the VM, its claim or
	// its namespace.
	var events corev1.EventList
	if err := cp.Client.List(ctx, &events, client.InNamespace(evilNS)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		for _, secret := range []string{vmNS, "vm1", string(vm.UID), string(got.UID)} {
			if strings.Contains(e.Message, secret) || strings.Contains(e.InvolvedObject.Name, secret) {
				t.Errorf("an Event in %s (%s on %s %s) names %q of another namespace: %s", evilNS, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, secret, e.Message)
			}
		}
	}
}
