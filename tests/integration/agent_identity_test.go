// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Who may use an attachment: the pod must run on the agent's node, and a
// claim owned by a VM or VMI only by that owner's virt-launcher pods.
// VMs are run by the real virt-controller (framework.KubeVirt simulates the
// scheduler, kubelet, Multus status and virt-handler); no kubelet runs, so
// the CNI requests a runtime would send are sent to the agent directly.

// TestAgentRefusesPodsOfOtherNodes: a request naming a pod bound to another
// node, or to no node, is refused with CNI code 4, also when K8S_POD_UID is
// missing; without K8S_POD_UID the live pod's UID is the identity.
func TestAgentRefusesPodsOfOtherNodes(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "nodes")
	const network = "nodes-net"
	conf := framework.NetConf(network, map[string]any{"range": "10.166.0.0/24"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	a := cp.StartAgent(t, "node-n1")
	elsewhere := cp.CreatePods(t, ns, "node-n2", "elsewhere", 1)[0]
	unbound := cp.CreatePods(t, ns, "", "unbound", 1)[0]
	local := cp.CreatePods(t, ns, a.Node, "local", 1)[0]

	_, err := a.Add(ctx, elsewhere, "net1", conf)
	mustContain(t, err, ns+"/elsewhere", "bound to node node-n2", "node-n1")
	if cniCode(err) != 4 {
		t.Errorf("pod of another node: CNI code %d, want 4", cniCode(err))
	}
	_, err = a.Add(ctx, unbound, "net1", conf)
	mustContain(t, err, ns+"/unbound", "not bound to any node")
	if cniCode(err) != 4 {
		t.Errorf("unbound pod: CNI code %d, want 4", cniCode(err))
	}

	withoutUID := func(p *corev1.Pod) error {
		_, err := a.Client.Do(ctx, cniproto.Request{
			Command: cniproto.CmdAdd, ContainerID: framework.SandboxID(p), Netns: "/var/run/netns/" + p.Name, IfName: "net1",
			Args:   fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s", p.Namespace, p.Name),
			Config: conf,
		})
		return err
	}
	err = withoutUID(elsewhere)
	mustContain(t, err, "bound to node node-n2")
	if cniCode(err) != 4 {
		t.Errorf("pod of another node without K8S_POD_UID: CNI code %d, want 4", cniCode(err))
	}
	if n := len(reservationsOf(t, network)); n != 0 {
		t.Fatalf("%d reservations after refused requests, want 0", n)
	}
	if err := withoutUID(local); err != nil {
		t.Fatalf("pod of this node without K8S_POD_UID: %v", err)
	}
	rs := reservationsOf(t, network)
	if len(rs) != 1 || rs[0].Spec.Owner.UID != local.UID {
		t.Fatalf("reservations %+v, want one owned by the live pod's UID %s", rs, local.UID)
	}
}

// TestClaimOnlyForItsVMsLaunchers: a pod of the namespace whose networks
// annotation names a VM's claim is refused, naming the claim and its owner;
// the VM's launcher pods (first start, migration target) get its address.
func TestClaimOnlyForItsVMsLaunchers(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	const network = "own-blue"
	e.nad(t, "blue", bridgeNAD(network, true))
	conf := json.RawMessage(bridgeNAD(network, true))
	ifName := kubevirt.PodInterfaceName("blue")
	a := cp.StartAgent(t, "node-own")
	b := cp.StartAgent(t, "node-own-b")

	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	vmi, launcher, err := e.kv.Start(ctx, vm, a.Node)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Add(ctx, launcher, ifName, conf)
	if err != nil {
		t.Fatalf("the VM's launcher: %v", err)
	}
	vmIP := resultIPs(t, res)[0]

	annot, _ := json.Marshal([]map[string]any{{"name": "blue", "namespace": e.ns, "interface": ifName, "ipam-claim-reference": "vm1.blue"}})
	impostor := cp.CreateAnnotatedPods(t, e.ns, a.Node, "impostor", 1, map[string]string{multus.Annotation: string(annot)})[0]
	res, err = a.Add(ctx, impostor, ifName, conf)
	if err == nil {
		t.Fatalf("a pod that is not the VM's launcher got the VM's claim and address %v", resultIPs(t, res))
	}
	mustContain(t, err, "IPAMClaim "+e.ns+"/vm1.blue belongs to VirtualMachine vm1 (uid "+string(vm.UID), impostor.Name)
	if cniCode(err) != 7 {
		t.Errorf("impostor: CNI code %d, want 7", cniCode(err))
	}
	if c, _ := e.claim(ctx, "vm1.blue"); c.Status.OwnerPod == nil || c.Status.OwnerPod.Name != launcher.Name {
		t.Fatalf("claim ownerPod = %+v, want the launcher %s", c.Status.OwnerPod, launcher.Name)
	}

	_, target, err := e.kv.Migrate(ctx, vmi, b.Node)
	if err != nil {
		t.Fatal(err)
	}
	res, err = b.Add(ctx, target, ifName, conf)
	if err != nil {
		t.Fatalf("the VM's migration target: %v", err)
	}
	if got := resultIPs(t, res)[0]; got != vmIP {
		t.Fatalf("migration target got %s, want the VM's %s", got, vmIP)
	}
}

// TestStandaloneVMIClaimOnlyForItsLauncher: the same rule for a claim owned
// by a VMI without a VM.
func TestStandaloneVMIClaimOnlyForItsLauncher(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	const network = "own-vmi"
	e.nad(t, "blue", bridgeNAD(network, true))
	conf := json.RawMessage(bridgeNAD(network, true))
	ifName := kubevirt.PodInterfaceName("blue")
	a := cp.StartAgent(t, "node-own-vmi")

	_, launcher, err := e.kv.CreateVMI(ctx, e.ns, "solo", a.Node, framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "solo.blue")
	if _, err := a.Add(ctx, launcher, ifName, conf); err != nil {
		t.Fatalf("the VMI's launcher: %v", err)
	}
	other, _, err := e.kv.CreateVMI(ctx, e.ns, "other", a.Node)
	if err != nil {
		t.Fatal(err)
	}
	// A pod of VMI "other" (controlled by it and labelled
	// kubevirt.io/created-by, as its launcher is) whose annotation names
	// solo's claim. It lacks the launcher label, so the webhook, which
	// refuses such a launcher pod, does not see it.
	annot, _ := json.Marshal([]map[string]any{{"name": "blue", "namespace": e.ns, "interface": ifName, "ipam-claim-reference": "solo.blue"}})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.ns, Name: "other-helper",
			Labels:          map[string]string{kubevirtv1.CreatedByLabel: string(other.UID)},
			Annotations:     map[string]string{multus.Annotation: string(annot)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(other, kubevirtv1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{NodeName: a.Node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}},
	}
	if err := cp.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	_, err = a.Add(ctx, pod, ifName, conf)
	mustContain(t, err, "IPAMClaim "+e.ns+"/solo.blue belongs to VirtualMachineInstance solo", "launches VirtualMachineInstance other (uid "+string(other.UID))
}

// TestOrphanedClaimStillHeldByItsVM: after orphan deletion removed the
// claim's owner reference, its owner labels still say whose it is. The VMI
// the deletion left keeps running and may migrate: its target pod gets the
// claim's address. A new VM of the same name adopts that VMI (KubeVirt's VM
// controller adopts an orphaned VMI of its name): the claim is not handed
// over while the adopted launcher uses it (a conflict event on the new VM),
// and once the new VM restarts, the old claim goes and the new VM gets its
// own.
func TestOrphanedClaimStillHeldByItsVM(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("orphan-blue", true))
	a := cp.StartAgent(t, "node-orphan")
	b := cp.StartAgent(t, "node-orphan-b")

	old, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	oldClaim := e.waitClaim(t, "vm1.blue")
	oldVMI, _, err := e.kv.Start(ctx, old, a.Node)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kv.DeleteVM(ctx, old, metav1.DeletePropagationOrphan); err != nil {
		t.Fatal(err)
	}

	_, target, err := e.kv.Migrate(ctx, oldVMI, b.Node)
	if err != nil {
		t.Fatalf("migration of the VMI orphan deletion left: %v", err)
	}
	if _, err := b.Add(ctx, target, kubevirt.PodInterfaceName("blue"), json.RawMessage(bridgeNAD("orphan-blue", true))); err != nil {
		t.Fatalf("ADD of the orphaned VMI's migration target: %v", err)
	}
	claim, err := e.claim(ctx, "vm1.blue")
	if err != nil || claim.UID != oldClaim.UID {
		t.Fatalf("the claim must outlive its VM while the orphaned VMI runs: %v", err)
	}
	if ref := metav1.GetControllerOf(claim); ref != nil {
		t.Fatalf("orphan deletion left the claim's controller reference %+v", ref)
	}

	recreated, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new VM adopting the orphaned VMI", func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(oldVMI), oldVMI); err != nil {
			return false, err
		}
		return metav1.IsControlledBy(oldVMI, recreated), nil
	})
	waitEvent(t, recreated, string(claims.ReasonClaimConflict), "belongs to VirtualMachine vm1 (uid "+string(old.UID))
	assertKeptAfterReconcile(t, e, target, oldClaim.Name)

	if err := e.kv.Stop(ctx, recreated); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the re-created VM's own claim", func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, "vm1.blue")
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return metav1.IsControlledBy(c, recreated), nil
	})
	_, pod, err := e.kv.Start(ctx, recreated, a.Node)
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("the re-created VM's launcher references %q, want vm1.blue", got)
	}
}

// multusDelegate renders what Multus hands a delegate for plugin i of a
// conflist NAD (through libcni): the plugin object with the list's name and
// cniVersion injected, and nothing else of the list's top level.
func multusDelegate(t testing.TB, conflist string, i int) json.RawMessage {
	t.Helper()
	var list struct {
		Name       string           `json:"name"`
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(conflist), &list); err != nil {
		t.Fatal(err)
	}
	p := list.Plugins[i]
	p["name"], p["cniVersion"] = list.Name, list.CNIVersion
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPersistentIPsFlagOnBothNADShapes: the NAD's top-level
// allowPersistentIPs is the one rule, for a single plugin config and for a
// conflist (whose top level the delegate never sees); set only inside a
// conflist's plugin it is ignored, and both the controller (event on the
// VM) and the agent (CNI error) say where it was found.
func TestPersistentIPsFlagOnBothNADShapes(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	a := cp.StartAgent(t, "node-flag")
	b := cp.StartAgent(t, "node-flag-b")
	single := bridgeNAD("flag-single", true)
	conflist := `{"cniVersion":"1.0.0","name":"flag-list","allowPersistentIPs":true,"plugins":[{"type":"bridge","bridge":"br-list","ipam":{"type":"ipkeeper","range":"10.79.0.0/24"}},{"type":"tuning"}]}`
	nested := `{"cniVersion":"1.0.0","name":"flag-nested","plugins":[{"type":"bridge","bridge":"br-nested","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.79.1.0/24"}}]}`
	e.nad(t, "single", single)
	e.nad(t, "list", conflist)
	e.nad(t, "nested", nested)

	for _, tc := range []struct {
		nad, network string
		delegate     json.RawMessage
	}{
		{"single", "flag-single", json.RawMessage(single)},
		{"list", "flag-list", multusDelegate(t, conflist, 0)},
	} {
		vm, err := e.kv.CreateVM(ctx, e.ns, "vm-"+tc.nad, framework.VMNetwork{Name: "blue", NAD: tc.nad})
		if err != nil {
			t.Fatal(err)
		}
		claim := e.waitClaim(t, "vm-"+tc.nad+".blue")
		vmi, pod, err := e.kv.Start(ctx, vm, a.Node)
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.Add(ctx, pod, kubevirt.PodInterfaceName("blue"), tc.delegate)
		if err != nil {
			t.Fatalf("%s NAD: ADD of the VM's launcher: %v", tc.nad, err)
		}
		ip := resultIPs(t, res)[0]
		if c, _ := e.claim(ctx, claim.Name); len(c.Status.IPs) != 1 || netip.MustParsePrefix(c.Status.IPs[0]).Addr() != ip {
			t.Fatalf("%s NAD: claim status.ips = %v, launcher got %s", tc.nad, c.Status.IPs, ip)
		}
		_, target, err := e.kv.Migrate(ctx, vmi, b.Node)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := b.Add(ctx, target, kubevirt.PodInterfaceName("blue"), tc.delegate); err != nil || resultIPs(t, res)[0] != ip {
			t.Fatalf("%s NAD: migration target: %v, want %s", tc.nad, err, ip)
		}
	}

	vm, err := e.kv.CreateVM(ctx, e.ns, "vm-nested", framework.VMNetwork{Name: "blue", NAD: "nested"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, vm, string(claims.ReasonNADProblem), `NetworkAttachmentDefinition `+e.ns+`/nested: "allowPersistentIPs" is set at spec.config.plugins[0].allowPersistentIPs, where it is ignored; set it at the top level`)
	if _, err := e.claim(ctx, "vm-nested.blue"); err == nil {
		t.Fatal("a claim was made for a NAD whose flag is only inside a plugin")
	}
	// A claim referenced anyway (made by hand or by another tool): the
	// agent refuses, naming the NAD and where the flag was found.
	createClaim(t, e.ns, "by-hand.blue", "flag-nested")
	annot, _ := json.Marshal([]map[string]any{{"name": "nested", "namespace": e.ns, "interface": "net1", "ipam-claim-reference": "by-hand.blue"}})
	pod := cp.CreateAnnotatedPods(t, e.ns, a.Node, "nested", 1, map[string]string{multus.Annotation: string(annot)})[0]
	_, err = a.Add(ctx, pod, "net1", multusDelegate(t, nested, 0))
	mustContain(t, err, "NetworkAttachmentDefinition "+e.ns+"/nested", "spec.config.plugins[0].allowPersistentIPs, where it is ignored")
	if cniCode(err) != 7 {
		t.Errorf("flag only in a plugin: CNI code %d, want 7", cniCode(err))
	}
	for _, r := range reservationsOf(t, "flag-nested") {
		if r.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerPod {
			t.Errorf("reservation %s left by a refused ADD", r.Name)
		}
	}
}

// TestClaimReferenceWithMultusDefaultNetwork: with one Multus default
// network, Multus names the first annotation element without "interface"
// net2, not net1; the agent finds the element by its NAD's network.
func TestClaimReferenceWithMultusDefaultNetwork(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "defnet")
	startClaimController(t, ns)
	a := cp.StartAgent(t, "node-defnet")
	for n, r := range map[string]string{"def-a": "10.80.0.0/24", "def-b": "10.80.1.0/24"} {
		persistentNAD(t, ns, n, n, persistentConf(n, map[string]any{"range": r}))
		createClaim(t, ns, "vm1."+n, n)
	}
	annot := `[{"name":"def-a","ipam-claim-reference":"vm1.def-a"},{"name":"def-b","ipam-claim-reference":"vm1.def-b"}]`
	pod := cp.CreateAnnotatedPods(t, ns, a.Node, "p", 1, map[string]string{multus.Annotation: annot})[0]
	// Multus: net0 cluster network, net1 the default network, net2 def-a, net3 def-b.
	res, err := a.Add(ctx, pod, "net2", persistentConf("def-a", map[string]any{"range": "10.80.0.0/24"}))
	if err != nil {
		t.Fatalf("net2 (def-a): %v", err)
	}
	if got := getClaim(t, ns, "vm1.def-a").Status.IPs; len(got) != 1 || netip.MustParsePrefix(got[0]).Addr() != resultIPs(t, res)[0] {
		t.Fatalf("claim vm1.def-a status %v, pod got %v", got, resultIPs(t, res))
	}
}

// TestClaimReferenceByPosition: two elements of one network without
// "interface": only the position tells them apart, which needs the number of
// Multus default networks; unknown, the agent refuses rather than guess.
func TestClaimReferenceByPosition(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "position")
	const network = "pos-net"
	conf := persistentConf(network, map[string]any{"range": "10.81.0.0/24"})
	startClaimController(t, ns)
	persistentNAD(t, ns, "pos", network, conf)
	createClaim(t, ns, "vm1.first", network)
	createClaim(t, ns, "vm1.second", network)
	annot := `[{"name":"pos","ipam-claim-reference":"vm1.first"},{"name":"pos","ipam-claim-reference":"vm1.second"}]`

	unknown := cp.StartAgent(t, "node-pos-unknown", func(o *agent.Options) { o.MultusDefaultNetworks = -1 })
	pod := cp.CreateAnnotatedPods(t, ns, unknown.Node, "u", 1, map[string]string{multus.Annotation: annot})[0]
	_, err := unknown.Add(ctx, pod, "net2", conf)
	mustContain(t, err, "--multus-default-networks", `"interface"`)
	if cniCode(err) != 7 {
		t.Errorf("undecidable element: CNI code %d, want 7", cniCode(err))
	}

	known := cp.StartAgent(t, "node-pos-known", func(o *agent.Options) { o.MultusDefaultNetworks = 1 })
	pod = cp.CreateAnnotatedPods(t, ns, known.Node, "k", 1, map[string]string{multus.Annotation: annot})[0]
	for ifName, claim := range map[string]string{"net2": "vm1.first", "net3": "vm1.second"} {
		res, err := known.Add(ctx, pod, ifName, conf)
		if err != nil {
			t.Fatalf("%s: %v", ifName, err)
		}
		if got := getClaim(t, ns, claim).Status.IPs; len(got) != 1 || netip.MustParsePrefix(got[0]).Addr() != resultIPs(t, res)[0] {
			t.Fatalf("%s: claim %s status %v, pod got %v", ifName, claim, got, resultIPs(t, res))
		}
	}
	var list ipkeeperv1alpha1.IPReservationList
	if err := cp.Client.List(ctx, &list, client.MatchingFields{"spec.network": network}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("%d reservations, want one per claim", len(list.Items))
	}
}
