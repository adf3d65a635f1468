// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestVMGuestNetworkConfig: a VM asking for its guest network
// configuration (ipkeeper.io/guest-network-config) gets a Secret, before
// it ever starts, whose networkdata netplan (the format's reference
// parser) reads as: each NIC matched by its claim's MAC (or the VM's own),
// with every address of its claim, IPv4 and IPv6, and its network's routes
// (through the range's gateway) and DNS. A network plugged in and a NAD
// swapped to another network rewrite it; a claim without addresses holds
// it back. Real: kube-apiserver, etcd, KubeVirt's virt-controller (its VM
// controller), ipkeeper-controller; no VM runs.
func TestVMGuestNetworkConfig(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", `{"cniVersion":"1.0.0","name":"gn-blue","type":"bridge","bridge":"br-gnb","allowPersistentIPs":true,"ipam":{"type":"ipkeeper",`+
		`"range":"10.231.0.0/24","gateway":"10.231.0.1","ipRanges":[{"range":"fd31::/120"}],`+
		`"routes":[{"dst":"10.232.0.0/16"}],"dns":{"nameservers":["10.231.0.53"],"search":["vms.example"]}}}`)
	e.nad(t, "red", `{"cniVersion":"1.0.0","name":"gn-red","type":"bridge","bridge":"br-gnr","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"fd32::/120"}}`)
	e.nad(t, "green", `{"cniVersion":"1.0.0","name":"gn-green","type":"bridge","bridge":"br-gng","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.233.0.0/24"}}`)
	e.nad(t, "tiny", `{"cniVersion":"1.0.0","name":"gn-tiny","type":"bridge","bridge":"br-gnt","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.234.0.0/24","range_start":"10.234.0.10","range_end":"10.234.0.10"}}`)

	create := func(name string, networks ...framework.VMNetwork) *kubevirtv1.VirtualMachine {
		t.Helper()
		vm := framework.NewVM(e.ns, name, networks...)
		vm.Annotations = map[string]string{guestnet.Annotation: "true"}
		if err := cp.Client.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	// networkd reads the Secret until it says everything in want.
	waitSecret := func(vm *kubevirtv1.VirtualMachine, want func(files map[string]string) error) *corev1.Secret {
		t.Helper()
		var s corev1.Secret
		var last error
		if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: guestnet.SecretName(vm.Name)}, &s); err != nil {
				last = err
				return false, client.IgnoreNotFound(err)
			}
			files, err := framework.Netplan(ctx, s.Data[guestnet.DataKey])
			if err != nil {
				return false, err // ipkeeper wrote what the format refuses
			}
			last = want(files)
			return last == nil, nil
		}); err != nil {
			t.Fatalf("Secret %s/%s: %v (last: %v)\n%s", e.ns, guestnet.SecretName(vm.Name), err, last, s.Data[guestnet.DataKey])
		}
		return &s
	}
	has := func(file string, wants ...string) func(map[string]string) error {
		return func(files map[string]string) error {
			for _, w := range wants {
				if !strings.Contains(files[file], w) {
					return fmt.Errorf("%s lacks %q: %q", file, w, files[file])
				}
			}
			return nil
		}
	}
	macOf := func(c *ipamclaimsv1alpha1.IPAMClaim) string {
		mac, _, _ := macaddr.OfClaim(c)
		return mac.String()
	}

	// 1. Dual-stack blue: ready before the VM's first start.
	vm := create("vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	blue := waitFilled(t, e.ns, "vm1.blue")
	if len(blue.Status.IPs) != 2 {
		t.Fatalf("vm1.blue records %v, want one IPv4 and one IPv6 address", blue.Status.IPs)
	}
	s := waitSecret(vm, has("10-netplan-blue.network", "PermanentMACAddress="+macOf(blue), "Address="+blue.Status.IPs[0], "Address="+blue.Status.IPs[1],
		"Destination=10.232.0.0/16\nGateway=10.231.0.1", "DNS=10.231.0.53", "Domains=vms.example"))
	if ref := metav1.GetControllerOf(s); ref != nil || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != vm.UID {
		t.Errorf("Secret owner references %+v, want the VM %s (uid %s) only", s.OwnerReferences, vm.Name, vm.UID)
	}
	if s.Labels[guestnet.OfLabel] != vm.Name || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("Secret labels %v, type %s", s.Labels, s.Type)
	}

	// The pod network's interface has no macAddress: the configuration
	// cannot name it, and the VM is told. Given one, it is left to DHCP.
	waitEvent(t, vm, string(guestnet.ReasonUnmatched), `interfaces "default" have no macAddress`)
	patchVM(t, vm, []map[string]any{{"op": "add", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "02:00:00:00:aa:0d"}})
	waitSecret(vm, has("10-netplan-default.network", "PermanentMACAddress=02:00:00:00:aa:0d", "DHCP=yes"))

	// 2. A network plugged in (IPv6 only): rewritten with it.
	patchVM(t, vm, []map[string]any{
		{"op": "add", "path": "/spec/template/spec/domain/devices/interfaces/-", "value": map[string]any{"name": "red", "bridge": map[string]any{}}},
		{"op": "add", "path": "/spec/template/spec/networks/-", "value": map[string]any{"name": "red", "multus": map[string]any{"networkName": "red"}}},
	})
	red := waitFilled(t, e.ns, "vm1.red")
	waitSecret(vm, func(files map[string]string) error {
		if err := has("10-netplan-red.network", "PermanentMACAddress="+macOf(red), "Address="+red.Status.IPs[0], "IPv6AcceptRA=no")(files); err != nil {
			return err
		}
		return has("10-netplan-blue.network", "Address="+blue.Status.IPs[0])(files)
	})

	// 3. blue's NAD swapped to another network: its new claim's address.
	patchVM(t, vm, []map[string]any{{"op": "replace", "path": "/spec/template/spec/networks/1/multus/networkName", "value": "green"}})
	var green *ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		var list ipamclaimsv1alpha1.IPAMClaimList
		if err := cp.Client.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
			return false, err
		}
		for i := range list.Items {
			c := &list.Items[i]
			if owner, ok := claimowner.Of(c); ok && owner.UID == vm.UID && c.Spec.Network == "gn-green" && claimstatus.Filled(c) {
				green = c
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no filled claim of network gn-green for vm1: %v", err)
	}
	waitSecret(vm, func(files map[string]string) error {
		if err := has("10-netplan-blue.network", "PermanentMACAddress="+macOf(green), "Address="+green.Status.IPs[0])(files); err != nil {
			return err
		}
		if strings.Contains(files["10-netplan-blue.network"], "10.231.0.") {
			return fmt.Errorf("blue still has the old network's address: %s", files["10-netplan-blue.network"])
		}
		return nil
	})

	// 4. A VM's own MAC is what the guest matches.
	const own = "02:00:00:00:aa:02"
	vm2 := create("vm2", framework.VMNetwork{Name: "blue", NAD: "blue", MAC: own})
	blue2 := waitFilled(t, e.ns, "vm2.blue")
	waitSecret(vm2, has("10-netplan-blue.network", "PermanentMACAddress="+own, "Address="+blue2.Status.IPs[0]))
	// The claim records that MAC, not one derived from its address.
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, "vm2.blue")
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return c.Annotations[macaddr.OwnAnnotation] == own && c.Labels[macaddr.Label] == "02-00-00-00-aa-02", nil
	}); err != nil {
		t.Fatalf("vm2.blue never recorded the VM's own MAC %s (annotation %s, label %s): %v", own, macaddr.OwnAnnotation, macaddr.Label, err)
	}

	// 5. A claim without addresses (its one-address network is taken)
	// holds the Secret back: no half configuration.
	vm3 := create("vm3", framework.VMNetwork{Name: "tiny", NAD: "tiny"})
	waitFilled(t, e.ns, "vm3.tiny")
	vm4 := create("vm4", framework.VMNetwork{Name: "blue", NAD: "blue"}, framework.VMNetwork{Name: "tiny", NAD: "tiny"})
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, "vm4.tiny")
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return meta.IsStatusConditionFalse(c.Status.Conditions, claimstatus.ConditionIPsAllocated), nil
	}); err != nil {
		t.Fatalf("vm4.tiny never said it has no address: %v", err)
	}
	waitFilled(t, e.ns, "vm4.blue")
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: guestnet.SecretName(vm4.Name)}, &corev1.Secret{}); err == nil {
		t.Fatalf("vm4's Secret was written while its claim vm4.tiny has no address")
	}
	// The address freed, the claim filled: the Secret, with both networks.
	if err := cp.Client.Delete(ctx, vm3); err != nil {
		t.Fatal(err)
	}
	tiny := waitFilledWithin(t, e.ns, "vm4.tiny", 2*time.Minute)
	waitSecret(vm4, func(files map[string]string) error {
		if err := has("10-netplan-tiny.network", "Address="+tiny.Status.IPs[0])(files); err != nil {
			return err
		}
		return has("10-netplan-blue.network", "Address=10.231.0.")(files)
	})

	// 6. Per network: a NAD asking for it (the annotation on the NAD)
	// gives its VMs the Secret, all their networks in it, unless a VM
	// refuses it.
	optin := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "optin", Annotations: map[string]string{guestnet.Annotation: "true"}},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"gn-optin","type":"bridge","bridge":"br-gno","allowPersistentIPs":true,` +
			`"ipam":{"type":"ipkeeper","range":"10.236.0.0/24"}}`},
	}
	if err := cp.Client.Create(ctx, optin); err != nil {
		t.Fatal(err)
	}
	refusing := framework.NewVM(e.ns, "vm6", framework.VMNetwork{Name: "optin", NAD: "optin"})
	refusing.Annotations = map[string]string{guestnet.Annotation: "false"}
	silent := framework.NewVM(e.ns, "vm5", framework.VMNetwork{Name: "optin", NAD: "optin"}, framework.VMNetwork{Name: "blue", NAD: "blue"})
	for _, v := range []*kubevirtv1.VirtualMachine{refusing, silent} {
		if err := cp.Client.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	in := waitFilled(t, e.ns, "vm5.optin")
	waitSecret(silent, func(files map[string]string) error {
		if err := has("10-netplan-optin.network", "Address="+in.Status.IPs[0])(files); err != nil {
			return err
		}
		return has("10-netplan-blue.network", "Address=10.231.0.")(files)
	})
	waitFilled(t, e.ns, "vm6.optin")
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: guestnet.SecretName(refusing.Name)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a VM refusing its guest network configuration (%s: \"false\") on a NAD asking for it: Secret lookup %v, want none", guestnet.Annotation, err)
	}
}

// patchVM applies a JSON patch to a VM.
func patchVM(t *testing.T, vm *kubevirtv1.VirtualMachine, ops []map[string]any) {
	t.Helper()
	patch, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Patch(context.Background(), vm, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		t.Fatalf("patching VM %s: %v", vm.Name, err)
	}
}

// TestVMGuestAddressesCompared: a running VM's guest, as its guest agent
// reports in the VMI's status (simulated virt-handler), is compared with
// its claim: GuestAddresses=True while it uses the claim's addresses,
// False (with a Warning on the VMI) when it uses another or lacks one,
// True again when it comes back. Real: kube-apiserver, etcd,
// virt-controller, ipkeeper-controller.
func TestVMGuestAddressesCompared(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", `{"cniVersion":"1.0.0","name":"ga-blue","type":"bridge","bridge":"br-gab","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.235.0.0/24"}}`)
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := waitFilled(t, e.ns, "vm1.blue")
	vmi, _, err := e.kv.Start(ctx, vm, "node-ga")
	if err != nil {
		t.Fatal(err)
	}
	// What the guest reports: set as virt-handler does (the VMI has no
	// status subresource).
	report := func(ips ...string) {
		t.Helper()
		var live kubevirtv1.VirtualMachineInstance
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vmi), &live); err != nil {
			t.Fatal(err)
		}
		base := live.DeepCopy()
		live.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{
			Name: "blue", InterfaceName: "eth1", InfoSource: "domain, guest-agent", IPs: ips, IP: ips[0],
		}}
		if err := cp.Client.Patch(ctx, &live, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(status metav1.ConditionStatus, msg string) {
		t.Helper()
		var c *metav1.Condition
		if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
			got, err := e.claim(ctx, "vm1.blue")
			if err != nil {
				return false, err
			}
			c = meta.FindStatusCondition(got.Status.Conditions, claimstatus.ConditionGuestAddresses)
			return c != nil && c.Status == status && strings.Contains(c.Message, msg), nil
		}); err != nil {
			t.Fatalf("GuestAddresses = %+v, want %s with %q: %v", c, status, msg, err)
		}
	}
	own := netipAddr(t, claim.Status.IPs[0])
	report(own, "fe80::1")
	wait(metav1.ConditionTrue, "eth1 uses the claim's addresses")
	report("10.235.0.250")
	wait(metav1.ConditionFalse, "uses 10.235.0.250, which ipkeeper did not give it and lacks "+own)
	waitEvent(t, vmi, string(guestnet.ReasonDrift), "10.235.0.250")
	runCLICases(t, []cliCase{{name: "why vm shows the guest beside its claim", args: []string{"why", "vm/vm1", "-n", e.ns}, code: cli.ExitOK,
		stdout: []string{"condition GuestAddresses=False GuestAddressesDiffer", "Guest (as its guest agent reports):\n  blue: eth1, MAC <none>, addresses 10.235.0.250"}}})
	report(own)
	wait(metav1.ConditionTrue, "uses the claim's addresses")
	if got := getClaim(t, e.ns, "vm1.blue"); !slices.Equal(got.Status.IPs, claim.Status.IPs) {
		t.Fatalf("status.ips changed from %v to %v", claim.Status.IPs, got.Status.IPs)
	}
}

func netipAddr(t *testing.T, cidr string) string {
	t.Helper()
	ip, err := claimstatus.ParseIP(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return ip.String()
}
