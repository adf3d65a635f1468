// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// whyEnv is a namespace with three NADs: blue keeps addresses, plain does
// not, misplaced sets the flag where it is ignored.
type whyEnv struct {
	ns, pool string
}

func newWhyEnv(t *testing.T) *whyEnv {
	ns := cp.NewNamespace(t, "cli-why")
	e := &whyEnv{ns: ns, pool: ns}
	cliPool(t, e.pool, ipkeeperv1alpha1.PoolRange{Range: "10.199.6.0/24"}, nil)
	for name, config := range map[string]string{
		"blue":      `{"cniVersion":"1.0.0","name":"blue","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":"` + e.pool + `"}}`,
		"plain":     `{"cniVersion":"1.0.0","name":"plain","type":"bridge","ipam":{"type":"ipkeeper","pool":"` + e.pool + `"}}`,
		"misplaced": `{"cniVersion":"1.0.0","name":"misplaced","type":"bridge","ipam":{"type":"ipkeeper","pool":"` + e.pool + `","allowPersistentIPs":true}}`,
	} {
		create(t, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}})
	}
	return e
}

func withNetworks(annotation string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[multus.Annotation] = annotation }
}

// claim creates an IPAMClaim (controlled by owner when set) with status.
func (e *whyEnv) claim(t *testing.T, name, network string, owner client.Object, status ipamclaimsv1alpha1.IPAMClaimStatus) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "pod16477688c0e"}}
	if owner != nil {
		c.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, kubevirtv1.VirtualMachineGroupVersionKind)}
	}
	create(t, c)
	if status.IPs != nil || status.Conditions != nil {
		c.Status = status
		if err := cp.Client.Status().Update(context.Background(), c); err != nil {
			t.Fatalf("writing the status of IPAMClaim %s: %v", name, err)
		}
	}
	return c
}

func (e *whyEnv) claimReservation(t *testing.T, c *ipamclaimsv1alpha1.IPAMClaim, ip string) {
	t.Helper()
	cliReservation(t, e.pool, c.Spec.Network, ip, ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: e.ns, Name: c.Name, UID: c.UID})
}

func allocated(status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
	return []metav1.Condition{{Type: "IPsAllocated", Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}}
}

// TestCLIWhyPod: why pod/NAME reports the networks annotation with each
// NAD's flag, the claims and reservations, the last CNI failure, and a
// Next line for the state found.
func TestCLIWhyPod(t *testing.T) {
	e := newWhyEnv(t)
	ns := e.ns
	cliPod(t, ns, "bare")
	exhausted := cliPod(t, ns, "exhausted", withNetworks("plain"))
	cniErr := `plugin type="multus" name="multus-cni-network" failed (add): [` + ns + `/exhausted/:plain]: error adding container to network "plain": plugin type="bridge" failed (add): network "plain" is exhausted: no free address in range 10.199.6.0/24 (10.199.6.1-10.199.6.254)`
	cliEvent(t, exhausted, "Pod", corev1.EventTypeWarning, "FailedCreatePodSandBox", cniErr, 4)
	cliEvent(t, exhausted, "Pod", corev1.EventTypeNormal, "Scheduled", "Successfully assigned "+ns+"/exhausted to node-a", 1)
	cliPod(t, ns, "ghost", withNetworks(`[{"name":"blue","interface":"net1","ipam-claim-reference":"ghost.blue"}]`))
	cliPod(t, ns, "noflag", withNetworks(`[{"name":"plain","ipam-claim-reference":"some.claim"}]`))
	cliPod(t, ns, "nonad", withNetworks("nowhere"))
	cliPod(t, ns, "broken", withNetworks(`[{"interface":"net1"}]`))
	holder := cliPod(t, ns, "holder", withNetworks("plain"))
	cliReservation(t, e.pool, "plain", "10.199.6.9", podOwner(holder))
	claim := e.claim(t, "shared.blue", "blue", nil, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.199.6.10/24"}, Conditions: allocated(metav1.ConditionTrue, "SuccessfulAllocation", "")})
	e.claimReservation(t, claim, "10.199.6.10")
	cliPod(t, ns, "claimer", withNetworks(`[{"name":"blue","ipam-claim-reference":"shared.blue"}]`))

	runCLICases(t, []cliCase{
		{name: "no networks", args: []string{"why", "pod/bare", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"Pod " + ns + "/bare", "no k8s.v1.cni.cncf.io/networks annotation", "Next: nothing to do: ipkeeper allocates nothing"}},
		{name: "last CNI failure", args: []string{"why", "pod", "exhausted", "-n", ns}, code: cli.ExitOK,
			stdout:    []string{ns + "/plain: CNI network \"plain\", allowPersistentIPs false", "Last CNI failure:", "Warning FailedCreatePodSandBox (x4): " + cniErr, "Normal Scheduled", "Next: the pool is exhausted: grow it"},
			notStdout: []string{"nothing to do"}},
		{name: "claim missing", args: []string{"why", "pod/ghost", "-n", ns}, code: cli.ExitOK,
			stdout: []string{`interface net1 ipam-claim-reference "ghost.blue": CNI network "blue", allowPersistentIPs true`, "IPAMClaim ghost.blue: not found", "Next: IPAMClaim " + ns + "/ghost.blue does not exist"}},
		{name: "claim on a network without the flag", args: []string{"why", "pod/noflag", "-n", ns}, code: cli.ExitOK,
			stdout: []string{`Next: set "allowPersistentIPs": true at the top level of NetworkAttachmentDefinition ` + ns + `/plain's spec.config`}},
		{name: "NAD missing", args: []string{"why", "pod/nonad", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"Next: NetworkAttachmentDefinition " + ns + "/nowhere does not exist: create it or fix the reference"}},
		{name: "annotation unparsable", args: []string{"why", "pod/broken", "-n", ns}, code: cli.ExitOK,
			stdout: []string{`Next: fix the pod's k8s.v1.cni.cncf.io/networks annotation: annotation k8s.v1.cni.cncf.io/networks: element 0: field "name" is missing or empty`}},
		{name: "holds its address", args: []string{"why", "pod/holder", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"10.199.6.9 in pool " + e.pool + " (network plain, interface net1, node node-a)", "Last CNI failure:\n  none", "Next: nothing to do: ipkeeper holds the pod's addresses"}},
		{name: "through a claim", args: []string{"why", "pod/claimer", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"IPAMClaim shared.blue: status.ips: 10.199.6.10/24", "IPAMClaim shared.blue: condition IPsAllocated=True SuccessfulAllocation", "10.199.6.10 in pool", "Next: nothing to do: ipkeeper holds the pod's addresses"}},
		{name: "json", args: []string{"why", "pod/exhausted", "-n", ns, "-o", "json"}, code: cli.ExitOK,
			checkExtra: func(t *testing.T, r cliResult) {
				var rep cli.Report
				if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
					t.Fatalf("-o json: %v", err)
				}
				if rep.Object == "" || len(rep.Next) != 1 || len(rep.Sections) < 4 {
					t.Errorf("report %+v, want an object, sections and one Next", rep)
				}
			}},
		{name: "not found", args: []string{"why", "pod/nope", "-n", ns}, code: cli.ExitError,
			stderr: []string{"pod " + ns + "/nope not found"}},
		{name: "no kind", args: []string{"why", "nope", "-n", ns}, code: cli.ExitUsage,
			stderr: []string{`"nope": name the object as pod/NAME, ipamclaim/NAME or vm/NAME`}},
		{name: "unknown kind", args: []string{"why", "deployment/web", "-n", ns}, code: cli.ExitUsage,
			stderr: []string{"name the object as pod/NAME"}},
		{name: "wide is no report format", args: []string{"why", "pod/bare", "-n", ns, "-o", "wide"}, code: cli.ExitUsage,
			stderr: []string{"why accepts json, yaml"}},
	})
}

// TestCLIWhyClaim: why ipamclaim/NAME reports the claim's owner, status,
// conditions, reservations and events, and what its conditions call for.
func TestCLIWhyClaim(t *testing.T) {
	e := newWhyEnv(t)
	ns := e.ns
	vm, err := newKubeVirt(t).CreateVM(t.Context(), ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	ok := e.claim(t, "vm1.blue", "blue", vm, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.199.6.20/24"}, Conditions: allocated(metav1.ConditionTrue, "SuccessfulAllocation", "")})
	e.claimReservation(t, ok, "10.199.6.20")
	full := e.claim(t, "full.blue", "blue", nil, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{}, Conditions: allocated(metav1.ConditionFalse, "SubnetExhausted", `network "blue" is exhausted`)})
	cliEvent(t, full, "IPAMClaim", corev1.EventTypeWarning, "AllocationFailed", `network "blue" is exhausted`, 2)
	e.claim(t, "conflict.blue", "blue", nil, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.199.6.21/24"}, Conditions: allocated(metav1.ConditionFalse, "IPAddressConflict", "address 10.199.6.21 is already reserved by Pod x/y")})
	e.claim(t, "lost.blue", "blue", nil, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.199.6.22/24"}, Conditions: allocated(metav1.ConditionTrue, "SuccessfulAllocation", "")})
	e.claim(t, "new.blue", "blue", nil, ipamclaimsv1alpha1.IPAMClaimStatus{})

	runCLICases(t, []cliCase{
		{name: "holds its addresses", args: []string{"why", "ipamclaim/vm1.blue", "-n", ns}, code: cli.ExitOK,
			stdout:    []string{"IPAMClaim " + ns + "/vm1.blue", "Owner:\n  VirtualMachine vm1 (uid " + string(vm.UID) + ")", "status.ips: 10.199.6.20/24", "MAC: 0a:58:0a:c7:06:14 (from its address", "10.199.6.20 in pool " + e.pool, "Next: nothing to do: the claim holds 10.199.6.20/24"},
			notStdout: []string{"no longer exists"}},
		{name: "exhausted", args: []string{"why", "ipamclaim/full.blue", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"no VirtualMachine or VirtualMachineInstance owns it", "condition IPsAllocated=False SubnetExhausted", "Warning AllocationFailed (x2)", `Next: the pool of network "blue" is exhausted: grow it`}},
		{name: "conflict", args: []string{"why", "ipamclaims", "conflict.blue", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"Next: an address of IPAMClaim " + ns + "/conflict.blue is held by someone else"}},
		{name: "reservation missing", args: []string{"why", "ipamclaim/lost.blue", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"Reservations:\n  none", "Next: status.ips lists 10.199.6.22 but no reservation of the claim holds it"}},
		{name: "not yet allocated", args: []string{"why", "ipamclaim/new.blue", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"status.ips: none", "Next: IPAMClaim " + ns + "/new.blue has no addresses yet"}},
		{name: "not found", args: []string{"why", "ipamclaim/nope", "-n", ns}, code: cli.ExitError,
			stderr: []string{"IPAMClaim " + ns + "/nope not found"}},
	})
}

// TestCLIWhyVM: why vm/NAME reports the feature gate, each network's NAD
// flag and claim, the launcher pods and whether the webhook put the claim
// reference in them.
func TestCLIWhyVM(t *testing.T) {
	e := newWhyEnv(t)
	ns := e.ns
	ctx := t.Context()
	kv := newKubeVirt(t)
	t.Cleanup(func() {
		if err := kv.StopAll(context.Background(), ns); err != nil {
			t.Logf("stopping the VMs of %s: %v", ns, err)
		}
	})
	restoreFeatureGate(t)
	if err := kv.SetFeatureGate(ctx, true); err != nil {
		t.Fatal(err)
	}
	newVM := func(name, nad string) *kubevirtv1.VirtualMachine {
		vm, err := kv.CreateVM(ctx, ns, name, framework.VMNetwork{Name: "blue", NAD: nad})
		if err != nil {
			t.Fatal(err)
		}
		return vm
	}
	start := func(vm *kubevirtv1.VirtualMachine) *corev1.Pod {
		_, pod, err := kv.Start(ctx, vm, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	// vm-ok: claim with its address, launcher pod with the reference.
	okVM := newVM("vm-ok", "blue")
	okClaim := e.claim(t, "vm-ok.blue", "blue", okVM, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.199.6.30/24"}, Conditions: allocated(metav1.ConditionTrue, "SuccessfulAllocation", "")})
	e.claimReservation(t, okClaim, "10.199.6.30")
	okPod := start(okVM)
	setClaimRef(t, okPod, "vm-ok.blue")
	// vm-noref: as vm-ok, but the launcher pod was admitted without the webhook.
	norefVM := newVM("vm-noref", "blue")
	norefClaim := e.claim(t, "vm-noref.blue", "blue", norefVM, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.199.6.31/24"}, Conditions: allocated(metav1.ConditionTrue, "SuccessfulAllocation", "")})
	e.claimReservation(t, norefClaim, "10.199.6.31")
	norefPod := start(norefVM)
	newVM("vm-noclaim", "blue")
	newVM("vm-plain", "plain")
	newVM("vm-misplaced", "misplaced")
	newVM("vm-nonad", "nowhere")

	runCLICases(t, []cliCase{
		{name: "all good", args: []string{"why", "vm/vm-ok", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"VirtualMachine " + ns + "/vm-ok", "PersistentIPs listed in a KubeVirt CR: true",
				"blue (multus.networkName blue): NAD " + ns + `/blue, CNI network "blue", allowPersistentIPs true`,
				"IPAMClaim vm-ok.blue: status.ips: 10.199.6.30/24", "10.199.6.30 in pool " + e.pool,
				`network blue: webhook reference "vm-ok.blue" present, mac <none>`, "Next: nothing to do: the VM's claims hold their addresses"}},
		{name: "webhook reference missing", args: []string{"why", "vm/vm-noref", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"network blue: webhook reference missing", "Next: launcher pod virt-launcher-vm-noref-", "restart the VM once the webhook runs"}},
		{name: "claim not created", args: []string{"why", "vm/vm-noclaim", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"IPAMClaim vm-noclaim.blue (network blue): not found", "Launcher pods:\n  none", "Next: ipkeeper-controller has not created IPAMClaim " + ns + "/vm-noclaim.blue"}},
		{name: "network without the flag", args: []string{"why", "vm/vm-plain", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"allowPersistentIPs false", `Next: no network of the VM keeps its addresses across restarts; to keep them, set "allowPersistentIPs": true at the top level of the spec.config of NetworkAttachmentDefinition ` + ns + "/plain"}},
		{name: "flag in the wrong place", args: []string{"why", "vm/vm-misplaced", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"Next: NetworkAttachmentDefinition " + ns + `/misplaced: "allowPersistentIPs" is set at spec.config.ipam.allowPersistentIPs, where it is ignored`}},
		{name: "NAD missing", args: []string{"why", "vm/vm-nonad", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"Next: NetworkAttachmentDefinition " + ns + "/nowhere does not exist"}},
		{name: "launcher pod", args: []string{"why", "pod/" + okPod.Name, "-n", ns}, code: cli.ExitOK,
			stdout: []string{"virt-launcher of VirtualMachineInstance vm-ok", `ipam-claim-reference "vm-ok.blue"`, "Next: nothing to do: ipkeeper holds the pod's addresses"}},
		{name: "launcher pod without the reference", args: []string{"why", "pod/" + norefPod.Name, "-n", ns}, code: cli.ExitOK,
			stdout:    []string{"virt-launcher of VirtualMachineInstance vm-noref", "Next: the pod's element for " + ns + "/blue has no ipam-claim-reference although the network keeps addresses"},
			notStdout: []string{"nothing to do"}},
		{name: "not found", args: []string{"why", "vm/nope", "-n", ns}, code: cli.ExitError,
			stderr: []string{"VirtualMachine " + ns + "/nope not found"}},
	})
	if err := kv.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	runCLICases(t, []cliCase{
		{name: "gate off", args: []string{"why", "vm/vm-noclaim", "-n", ns}, code: cli.ExitOK,
			stdout:    []string{"PersistentIPs listed in a KubeVirt CR: false", "Next: enable the PersistentIPs feature gate in the KubeVirt CR"},
			notStdout: []string{"has not created"}},
	})
}

// setClaimRef does what the webhook does to a launcher pod: the claim
// reference in its networks annotation.
func setClaimRef(t *testing.T, pod *corev1.Pod, claim string) {
	t.Helper()
	// virt-controller updates its launcher pods too: re-read on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
		if err != nil {
			return fmt.Errorf("launcher pod annotation %q: %w", pod.Annotations[multus.Annotation], err)
		}
		if len(elems) != 1 {
			return fmt.Errorf("launcher pod annotation %q: %d elements, want 1", pod.Annotations[multus.Annotation], len(elems))
		}
		elems[0].SetClaimRef(claim)
		ann, err := multus.MarshalElements(elems)
		if err != nil {
			return err
		}
		pod.Annotations[multus.Annotation] = ann
		return cp.Client.Update(context.Background(), pod)
	})
	if err != nil {
		t.Fatalf("setting the claim reference of pod %s: %v", pod.Name, err)
	}
}

// restoreFeatureGate puts the KubeVirt CR's feature gates back as it was after
// the test (other tests set the gate they need, but none should inherit).
func restoreFeatureGate(t *testing.T) {
	t.Helper()
	key := client.ObjectKey{Namespace: framework.KubeVirtNamespace, Name: "kubevirt"}
	var kv kubevirtv1.KubeVirt
	err := cp.Client.Get(context.Background(), key, &kv)
	existed := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	wasOn := existed && kubevirt.GateListed(&kv)
	t.Cleanup(func() {
		if existed {
			if err := framework.SetPersistentIPsGate(context.Background(), cp.Client, wasOn); err != nil {
				t.Error(err)
			}
			return
		}
		if err := cp.Client.Delete(context.Background(), &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}
