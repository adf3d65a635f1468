// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

var installWhereaboutsOnce sync.Once

// installWhereaboutsCRDs installs whereabouts v0.9.4's own IPPool and
// OverlappingRangeIPReservation CRDs (tests/crds/whereabouts, copied
// verbatim from the module's doc/crds).
func installWhereaboutsCRDs(t *testing.T) {
	t.Helper()
	var err error
	installWhereaboutsOnce.Do(func() {
		root, rerr := framework.RepoRoot()
		if rerr != nil {
			err = rerr
			return
		}
		_, err = envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
			Paths: []string{filepath.Join(root, "tests", "crds", "whereabouts")}, ErrorIfPathMissing: true,
			MaxTime: time.Minute, PollInterval: 100 * time.Millisecond,
		})
	})
	if err != nil {
		t.Fatalf("installing the whereabouts CRDs: %v", err)
	}
}

// wbPool creates a whereabouts IPPool as whereabouts v0.9.4 writes it.
func wbPool(t *testing.T, ns, name, rng string, allocs map[string][3]string) {
	t.Helper()
	a := map[string]any{}
	for off, v := range allocs {
		a[off] = map[string]any{"id": v[0], "podref": v[1], "ifname": v[2]}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     map[string]any{"range": rng, "allocations": a},
	}}
	create(t, u)
}

func wbOverlapping(t *testing.T, ns, name, podref, ifname string) {
	t.Helper()
	create(t, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "OverlappingRangeIPReservation",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     map[string]any{"containerid": "c", "podref": podref, "ifname": ifname},
	}})
}

func wbNAD(t *testing.T, ns, name, network, rng string, persistent bool) {
	t.Helper()
	flag := ""
	if persistent {
		flag = `"allowPersistentIPs": true, `
	}
	create(t, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: nadv1.NetworkAttachmentDefinitionSpec{
		Config: fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, %s"type": "bridge", "bridge": "br-wb", "ipam": {"type": "whereabouts", "range": %q, "log_level": "debug", "kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"}}}`, network, flag, rng),
	}})
}

// TestCLIImportWhereabouts: import whereabouts turns whereabouts'
// allocations into the reservations the agent would have made: pod-owned
// for ordinary pods (interface, container ID, node), claim-owned with the
// claim's status.ips for a VM's launcher pod on a network with persistent
// IPs; it skips gone pods and launchers whose claim is not there yet,
// reports an address ipkeeper already gave someone else without touching
// it, writes nothing on --dry-run, and a second run creates nothing.
// The VMs run through the real virt-controller (framework.KubeVirt, which
// names what it simulates); no ipkeeper-controller runs, so the claim is
// created here as ipkeeper-controller names it.
func TestCLIImportWhereabouts(t *testing.T) {
	installWhereaboutsCRDs(t)
	ctx := t.Context()
	ns := cp.NewNamespace(t, "cli-import")
	plainNet, vmNet := ns+"-plain", ns+"-vm"
	wbNAD(t, ns, "plain", plainNet, "10.199.9.0/24", false)
	wbNAD(t, ns, "vmnet", vmNet, "10.199.10.0/24", true)

	p1 := cliPod(t, ns, "p1", func(p *corev1.Pod) { p.Spec.NodeName = "node-a" })
	p3 := cliPod(t, ns, "p3")
	other := cliPod(t, ns, "other")
	// ipkeeper already gave 10.199.9.7 to "other": a conflict for p3's copy.
	conflicting := cliReservation(t, plainNet, plainNet, "10.199.9.7", podOwner(other))

	kv := newKubeVirt(t)
	t.Cleanup(func() {
		if err := kv.StopAll(context.Background(), ns); err != nil {
			t.Logf("stopping the VMs of %s: %v", ns, err)
		}
	})
	vm, err := kv.CreateVM(ctx, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "vmnet"})
	if err != nil {
		t.Fatal(err)
	}
	_, launcher, err := kv.Start(ctx, vm, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	vm2, err := kv.CreateVM(ctx, ns, "vm2", framework.VMNetwork{Name: "blue", NAD: "vmnet"})
	if err != nil {
		t.Fatal(err)
	}
	_, launcher2, err := kv.Start(ctx, vm2, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	iface := kubevirt.PodInterfaceName("blue")
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: naming.Claim("vm1", "blue"),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: vmNet, Interface: iface},
	}
	create(t, claim)

	wbPool(t, ns, "10.199.9.0-24", "10.199.9.0/24", map[string][3]string{
		"5": {"c-p1", ns + "/p1", "net1"},
		"6": {"c-gone", ns + "/gone", "net1"},
		"7": {"c-p3", ns + "/p3", "net1"},
	})
	wbPool(t, ns, "10.199.10.0-24", "10.199.10.0/24", map[string][3]string{
		"9":  {"c-vm1", ns + "/" + launcher.Name, iface},
		"10": {"c-vm2", ns + "/" + launcher2.Name, iface},
	})
	wbOverlapping(t, ns, "10.199.9.5", ns+"/p1", "net1")
	wbOverlapping(t, ns, "10.199.9.99", ns+"/stale", "net1")

	resName := func(network, ip string) string { return naming.Reservation(network, netip.MustParseAddr(ip)) }
	exists := func(t *testing.T, name string) bool {
		err := cp.Client.Get(context.Background(), types.NamespacedName{Name: name}, &ipkeeperv1alpha1.IPReservation{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	actions := func(want map[string]string) func(t *testing.T, r cliResult) {
		return func(t *testing.T, r cliResult) {
			var steps []cli.ImportStep
			if err := json.Unmarshal([]byte(r.out), &steps); err != nil {
				t.Fatalf("-o json: %v", err)
			}
			got := map[string]string{}
			for _, s := range steps {
				if strings.HasPrefix(s.WhereaboutsPool, ns+"/") {
					got[s.IP] = s.Action
				}
			}
			for ip, a := range want {
				if got[ip] != a {
					t.Errorf("%s: action %q, want %q", ip, got[ip], a)
				}
			}
		}
	}
	p1Res, vmRes := resName(plainNet, "10.199.9.5"), resName(vmNet, "10.199.10.9")
	t.Cleanup(func() {
		// What the import made (cluster-scoped, not gone with the namespace).
		for _, name := range []string{p1Res, vmRes, conflicting.Name} {
			_ = cp.Client.Delete(context.Background(), &ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})

	runCLICases(t, []cliCase{
		{name: "no argument", args: []string{"import"}, code: cli.ExitUsage, stderr: []string{"import takes one argument"}},
		{name: "unknown IPAM", args: []string{"import", "calico"}, code: cli.ExitUsage, stderr: []string{`got "calico"`}},
		{name: "dry run table", args: []string{"import", "whereabouts", "--dry-run"}, code: cli.ExitError,
			stdout: []string{"WHEREABOUTS-POOL", "ACTION", ns + "/10.199.9.0-24", " 10.199.9.5 ", p1Res, "Pod " + ns + "/p1", "IPAMClaim " + ns + "/vm1.blue",
				"pod gone", "reserved in ipkeeper by Pod " + ns + "/other", "IPAMClaim " + ns + "/vm2.blue not found"},
			stderr: []string{"to create (dry run: nothing written)", "OverlappingRangeIPReservation " + ns + "/10.199.9.99 (pod " + ns + "/stale) has no allocation", "addresses are reserved in ipkeeper for someone else"},
			checkExtra: func(t *testing.T, _ cliResult) {
				if exists(t, p1Res) || exists(t, vmRes) {
					t.Error("--dry-run created a reservation")
				}
			}},
		{name: "dry run json", args: []string{"import", "whereabouts", "--dry-run", "-o", "json"}, code: cli.ExitError,
			checkExtra: actions(map[string]string{"10.199.9.5": "create", "10.199.9.6": "skip", "10.199.9.7": "conflict", "10.199.10.9": "create", "10.199.10.10": "skip"})},
		{name: "import", args: []string{"import", "whereabouts", "-o", "json"}, code: cli.ExitError,
			stderr:     []string{"2 reservations created, 0 already imported, 2 skipped, 1 conflicts"},
			checkExtra: actions(map[string]string{"10.199.9.5": "create", "10.199.9.7": "conflict", "10.199.10.9": "create"})},
	})

	// What the import made is what the agent would have made.
	var r ipkeeperv1alpha1.IPReservation
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: p1Res}, &r); err != nil {
		t.Fatal(err)
	}
	want := ipkeeperv1alpha1.IPReservationSpec{Pool: plainNet, Network: plainNet, IP: "10.199.9.5", Owner: podOwner(p1), InterfaceName: "net1", ContainerID: "c-p1", Node: "node-a"}
	if r.Spec.Pool != want.Pool || r.Spec.Network != want.Network || r.Spec.IP != want.IP || r.Spec.Owner != want.Owner ||
		r.Spec.InterfaceName != want.InterfaceName || r.Spec.ContainerID != want.ContainerID || r.Spec.Node != want.Node {
		t.Errorf("reservation of p1: %+v, want %+v", r.Spec, want)
	}
	if r.Labels[naming.NetworkLabel] != naming.NetworkLabelValue(plainNet) {
		t.Errorf("reservation of p1: labels %v", r.Labels)
	}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: vmRes}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim || r.Spec.Owner.UID != claim.UID || r.Spec.InterfaceName != iface {
		t.Errorf("reservation of vm1: %+v, want owned by IPAMClaim %s on %s", r.Spec, claim.Name, iface)
	}
	var got ipamclaimsv1alpha1.IPAMClaim
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: claim.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Status.IPs, ",") != "10.199.10.9/24" || got.Status.OwnerPod == nil || got.Status.OwnerPod.Name != launcher.Name ||
		len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != "IPsAllocated" || got.Status.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("claim status %+v, want ips [10.199.10.9/24], ownerPod %s, IPsAllocated=True", got.Status, launcher.Name)
	}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: conflicting.Name}, &r); err != nil || r.Spec.Owner != podOwner(other) {
		t.Errorf("the conflicting reservation changed: %+v, %v", r.Spec, err)
	}

	runCLICases(t, []cliCase{
		{name: "second run creates nothing", args: []string{"import", "whereabouts"}, code: cli.ExitError,
			stdout: []string{"already imported"},
			stderr: []string{"0 reservations created, 2 already imported, 2 skipped, 1 conflicts"}},
	})
	// The operator resolves the conflict (p3 keeps whereabouts' address).
	if err := cp.Client.Delete(ctx, conflicting); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 10*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		return !exists(t, conflicting.Name), nil
	}); err != nil {
		t.Fatalf("reservation %s not deleted: %v", conflicting.Name, err)
	}
	runCLICases(t, []cliCase{
		{name: "conflict resolved", args: []string{"import", "whereabouts"}, code: cli.ExitOK,
			stderr: []string{"1 reservations created, 2 already imported, 2 skipped, 0 conflicts"},
			checkExtra: func(t *testing.T, _ cliResult) {
				if err := cp.Client.Get(context.Background(), types.NamespacedName{Name: conflicting.Name}, &r); err != nil || r.Spec.Owner != podOwner(p3) {
					t.Errorf("10.199.9.7: %+v, %v; want p3's", r.Spec, err)
				}
			}},
		{name: "idempotent", args: []string{"import", "whereabouts"}, code: cli.ExitOK,
			stderr: []string{"0 reservations created, 3 already imported, 2 skipped, 0 conflicts", "Nothing to import"}},
	})
}

// TestCLIWhyWhereaboutsKeys: why lists the whereabouts-only keys a pod's
// NAD still sets after the switch to ipkeeper, and nothing for a NAD
// without them.
func TestCLIWhyWhereaboutsKeys(t *testing.T) {
	ns := cp.NewNamespace(t, "cli-why-wbkeys")
	wbNAD(t, ns, "left", ns+"-left", "10.199.11.0/24", false)
	setNADIPAMType(t, ns, "left")
	create(t, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clean"}, Spec: nadv1.NetworkAttachmentDefinitionSpec{
		Config: `{"cniVersion": "1.0.0", "name": "` + ns + `-clean", "type": "bridge", "ipam": {"type": "ipkeeper", "range": "10.199.12.0/24"}}`,
	}})
	cliPod(t, ns, "p", func(p *corev1.Pod) {
		p.Annotations["k8s.v1.cni.cncf.io/networks"] = `[{"name":"left","interface":"net1"},{"name":"clean","interface":"net2"}]`
	})
	runCLICases(t, []cliCase{
		{name: "pod", args: []string{"why", "pod/p", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"whereabouts keys ipkeeper ignores (no effect, can be removed): ipam.kubernetes.kubeconfig, ipam.log_level"},
			checkExtra: func(t *testing.T, r cliResult) {
				if n := strings.Count(r.out, "whereabouts keys ipkeeper ignores"); n != 1 {
					t.Errorf("listed %d times, want once (only NAD left sets them)", n)
				}
			}},
	})
}

// setNADIPAMType switches a NAD's ipam.type to ipkeeper.
func setNADIPAMType(t *testing.T, ns, name string) {
	t.Helper()
	var nad nadv1.NetworkAttachmentDefinition
	if err := cp.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &nad); err != nil {
		t.Fatal(err)
	}
	nad.Spec.Config = strings.Replace(nad.Spec.Config, `"type": "whereabouts"`, `"type": "ipkeeper"`, 1)
	if err := cp.Client.Update(context.Background(), &nad); err != nil {
		t.Fatal(err)
	}
}
