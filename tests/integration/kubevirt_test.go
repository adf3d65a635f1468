// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claims"
	"github.com/ipkeeper/ipkeeper/internal/controllermanager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// VM create -> claims (only for the persistent network) -> start -> pod
// mutated -> stop/start -> same claim -> migration -> both pods reference it.
func TestVMClaimsAcrossStartStopAndMigration(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("tenant-blue", true))
	e.nad(t, "red", bridgeNAD("tenant-red", false))

	vm, err := e.sim.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"}, framework.VMNetwork{Name: "red", NAD: e.ns + "/red"})
	if err != nil {
		t.Fatal(err)
	}
	claim := e.waitClaim(t, "vm1.blue")
	if claim.Spec.Network != "tenant-blue" || claim.Spec.Interface != kubevirt.PodInterfaceName("blue") {
		t.Errorf("claim spec = %+v, want network tenant-blue interface %s", claim.Spec, kubevirt.PodInterfaceName("blue"))
	}
	controllerRef(t, claim, vm, "VirtualMachine")
	if !slices.Contains(claim.Finalizers, claims.Finalizer) {
		t.Errorf("claim finalizers = %v, want %s", claim.Finalizers, claims.Finalizer)
	}
	waitEvent(t, vm, string(claims.ReasonClaimCreated), "vm1.blue")
	if _, err := e.claim(ctx, "vm1.red"); err == nil {
		t.Error("a claim was made for red, whose NAD does not allow persistent IPs")
	}

	_, pod1, err := e.sim.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	got := refs(t, pod1)
	want := map[string]string{kubevirt.PodInterfaceName("blue"): "vm1.blue", kubevirt.PodInterfaceName("red"): ""}
	if len(got) != 2 || got[kubevirt.PodInterfaceName("blue")] != "vm1.blue" || got[kubevirt.PodInterfaceName("red")] != "" {
		t.Fatalf("launcher pod references = %v, want %v", got, want)
	}

	if err := e.sim.Stop(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pod1)
	vmi, pod2, err := e.sim.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, pod2)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("restarted launcher references %q, want vm1.blue", got)
	}
	after, err := e.claim(ctx, "vm1.blue")
	if err != nil || after.UID != claim.UID {
		t.Fatalf("claim after stop/start: %v (uid %s), want the same claim (uid %s)", err, after.UID, claim.UID)
	}

	target, err := e.sim.Migrate(ctx, vmi, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, target)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("migration target references %q, want vm1.blue", got)
	}
	if err := cp.Client.Delete(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pod2)
	// The claim outlives the migration source: the VM still wants it.
	if after, err := e.claim(ctx, "vm1.blue"); err != nil || after.UID != claim.UID || after.DeletionTimestamp != nil {
		t.Fatalf("claim after migration: %v, deleting=%v", err, after.DeletionTimestamp != nil)
	}
}

// Every way of deleting a VM ends with no claim and no reservation, and
// nothing hangs on the finalizer.
func TestVMDeletionModesLeaveNoClaim(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("del-blue", true))

	bg, fg, orphan := metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan
	cases := []struct {
		name    string
		running bool
		policy  metav1.DeletionPropagation
	}{
		{"background", true, bg},
		{"foreground", true, fg},
		{"orphan", true, orphan},
		{"stopped", false, bg},
		{"stopped-foreground", false, fg},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm, err := e.sim.CreateVM(ctx, e.ns, "vm-"+tc.name, framework.VMNetwork{Name: "blue", NAD: "blue"})
			if err != nil {
				t.Fatal(err)
			}
			claim := e.waitClaim(t, naming.Claim(vm.Name, "blue"))
			res := newReservation("del-blue", "10.77.0."+map[string]string{"background": "11", "foreground": "12", "orphan": "13", "stopped": "14", "stopped-foreground": "15"}[tc.name])
			res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, res.Spec.Owner.UID = "IPAMClaim", e.ns, claim.Name, claim.UID
			if err := cp.Client.Create(ctx, res); err != nil {
				t.Fatal(err)
			}
			var pod *corev1.Pod
			var vmi *kubevirtv1.VirtualMachineInstance
			if tc.running {
				if vmi, pod, err = e.sim.Start(ctx, vm, ""); err != nil {
					t.Fatal(err)
				}
			}
			if err := cp.Client.Delete(ctx, vm, client.PropagationPolicy(tc.policy)); err != nil {
				t.Fatal(err)
			}
			if tc.policy == orphan {
				// The orphaned VMI still runs: its claim must stay.
				waitGone(t, vm)
				if c, err := e.claim(ctx, claim.Name); err != nil || c.UID != claim.UID {
					t.Fatalf("claim gone while the orphaned VMI still runs: %v", err)
				}
				if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != claim.Name {
					t.Fatalf("pod references %q", got)
				}
				if err := cp.Client.Delete(ctx, vmi); err != nil {
					t.Fatal(err)
				}
			}
			waitGone(t, vm)
			if pod != nil {
				waitGone(t, pod)
			}
			waitGone(t, claim)
			waitGone(t, res)
		})
	}
	e.waitNoClaims(t)
}

func TestStandaloneVMIClaims(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("vmi-blue", true))

	vmi, pod, err := e.sim.CreateVMI(ctx, e.ns, "lonely", "", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := e.waitClaim(t, "lonely.blue")
	controllerRef(t, claim, vmi, "VirtualMachineInstance")
	// The pod may have been admitted before the claim existed: the
	// reference is there regardless, and the IPAM waits for the claim.
	if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != "lonely.blue" {
		t.Fatalf("pod references %q, want lonely.blue", got)
	}
	if err := cp.Client.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pod)
	waitGone(t, claim)
}

func TestHotplugAndUnplug(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("hp-blue", true))
	e.nad(t, "green", bridgeNAD("hp-green", true))

	vm, err := e.sim.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	_, pod, err := e.sim.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sim.Hotplug(ctx, vm, pod, framework.VMNetwork{Name: "green", NAD: "green"}); err != nil {
		t.Fatal(err)
	}
	green := e.waitClaim(t, "vm1.green")
	got := refs(t, pod)
	if got[kubevirt.PodInterfaceName("blue")] != "vm1.blue" || got[kubevirt.PodInterfaceName("green")] != "vm1.green" {
		t.Fatalf("after hotplug the pod references %v", got)
	}

	if err := e.sim.Unplug(ctx, vm, "green"); err != nil {
		t.Fatal(err)
	}
	// The VM no longer wants green, but its launcher pod still has it.
	assertKeptAfterReconcile(t, e, pod, green.Name)
	if err := e.sim.SyncPodNetworks(ctx, vm, pod); err != nil {
		t.Fatal(err)
	}
	if _, ok := refs(t, pod)[kubevirt.PodInterfaceName("green")]; ok {
		t.Fatal("unplugged network still in the pod annotation")
	}
	waitGone(t, green)
	if c, err := e.claim(ctx, "vm1.blue"); err != nil || c.DeletionTimestamp != nil {
		t.Fatalf("blue claim touched by unplugging green: %v", err)
	}
}

// A VM deleted and re-created with the same name while its old launcher pod
// still terminates: the old claim is not handed over, the new VM gets an
// event, and it gets its own claim once the old pod is gone.
func TestSameNameVMRecreated(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.sim.HoldFinalizer = "test.ipkeeper.io/slow-kubelet"
	e.nad(t, "blue", bridgeNAD("re-blue", true))

	old, err := e.sim.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	oldClaim := e.waitClaim(t, "vm1.blue")
	_, oldPod, err := e.sim.Start(ctx, old, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sim.Release(context.Background(), oldPod) })
	if err := cp.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old)

	conflictsBefore := controllerCounter("ipkeeper_controller_claim_conflicts_total", "", "")
	e.sim.HoldFinalizer = ""
	recreated, err := e.sim.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, recreated, string(claims.ReasonClaimConflict), "vm1.blue")
	if controllerCounter("ipkeeper_controller_claim_conflicts_total", "", "") <= conflictsBefore {
		t.Error("conflict metric did not move")
	}
	// The new VM's launcher must not get the old VM's addresses.
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "vm1", UID: "new-vmi"}}
	vmi.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(recreated, kubevirtv1.VirtualMachineGroupVersionKind)}
	vmi.Spec = framework.VMTemplate(framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err := cp.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.LauncherPod(ctx, vmi, "", ""); err == nil || !strings.Contains(err.Error(), "still belongs to VirtualMachine vm1 (uid "+string(old.UID)) {
		t.Fatalf("launcher pod of the new VM admitted while the old claim lives, or unclear error: %v", err)
	}
	assertKeptAfterReconcile(t, e, oldPod, oldClaim.Name)
	if c, _ := e.claim(ctx, "vm1.blue"); c.UID != oldClaim.UID {
		t.Fatalf("old claim replaced while its pod still terminates")
	}

	if err := e.sim.Release(ctx, oldPod); err != nil {
		t.Fatal(err)
	}
	waitGone(t, oldPod)
	if err := framework.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, "vm1.blue")
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ref := metav1.GetControllerOf(c)
		return ref != nil && ref.UID == recreated.UID, nil
	}); err != nil {
		t.Fatalf("the re-created VM never got its own claim: %v", err)
	}
	pod, err := e.sim.LauncherPod(ctx, vmi, "", "")
	if err != nil {
		t.Fatalf("launcher pod refused once the claim is the new VM's: %v", err)
	}
	if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("pod references %q", got)
	}
}

func TestFeatureGateOffThenOn(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("gate-blue", true))
	if err := e.sim.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sim.SetFeatureGate(context.Background(), true) })

	// Gate off: the API server no longer calls the webhook at all.
	if err := cp.WaitWebhookScope(ctx, e.ctrl.WebhookConfig, false); err != nil {
		t.Fatal(err)
	}
	before := reconciles("vm-claims")
	vm, err := e.sim.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, "vm-claims", before, 1)
	_, pod, err := e.sim.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != "" {
		t.Fatalf("gate off, yet the pod references %q", got)
	}
	if _, err := e.claim(ctx, "vm1.blue"); err == nil {
		t.Fatal("gate off, yet a claim was created")
	}

	if err := e.sim.SetFeatureGate(ctx, true); err != nil {
		t.Fatal(err)
	}
	claim := e.waitClaim(t, "vm1.blue") // reacts to the gate, no VM change needed
	if err := cp.WaitWebhookScope(ctx, e.ctrl.WebhookConfig, true); err != nil {
		t.Fatal(err)
	}
	controllerRef(t, claim, vm, "VirtualMachine")
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		t.Fatal(err)
	}
	target, err := e.sim.Migrate(ctx, vmi, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, target)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("gate on: pod references %q", got)
	}

	// Turning the gate off keeps existing claims. (Counted from before the
	// change: the re-queue it causes may finish at once.)
	before = reconciles("vm-claims")
	if err := e.sim.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, "vm-claims", before, 1)
	if c, err := e.claim(ctx, "vm1.blue"); err != nil || c.DeletionTimestamp != nil {
		t.Fatalf("turning the gate off touched the claim: %v", err)
	}
}

// With --require-kubevirt-feature-gate=false the gate is not read at all.
func TestFeatureGateCheckDisabled(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t, func(o *controllermanager.Options) { o.RequireGate = false })
	if err := e.sim.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sim.SetFeatureGate(context.Background(), true) })
	e.nad(t, "blue", bridgeNAD("nogate-blue", true))
	vm, err := e.sim.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	_, pod, err := e.sim.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("pod references %q", got)
	}
}

// Two interfaces on one NAD get two claims; a NAD without the flag gets
// none; a malformed NAD nobody uses blocks nothing; a malformed NAD a VM
// uses is reported on the VM and denies its launcher pod, naming the field.
func TestNADVariants(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "shared", bridgeNAD("nad-shared", true))
	e.nad(t, "plain", bridgeNAD("nad-plain", false))
	e.nad(t, "broken", `{"cniVersion":"1.0.0","name":"nad-broken","allowPersistentIPs":"yes"}`)

	vm, err := e.sim.CreateVM(ctx, e.ns, "vm1",
		framework.VMNetwork{Name: "a", NAD: "shared"}, framework.VMNetwork{Name: "b", NAD: "shared"}, framework.VMNetwork{Name: "p", NAD: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := e.waitClaim(t, "vm1.a"), e.waitClaim(t, "vm1.b")
	if a.Spec.Network != "nad-shared" || b.Spec.Network != "nad-shared" || a.Spec.Interface == b.Spec.Interface {
		t.Fatalf("claims a=%+v b=%+v: want one network, two interfaces", a.Spec, b.Spec)
	}
	_, pod, err := e.sim.Start(ctx, vm, "")
	if err != nil {
		t.Fatalf("an unrelated broken NAD blocked the VM: %v", err)
	}
	got := refs(t, pod)
	if got[kubevirt.PodInterfaceName("a")] != "vm1.a" || got[kubevirt.PodInterfaceName("b")] != "vm1.b" || got[kubevirt.PodInterfaceName("p")] != "" {
		t.Fatalf("pod references %v", got)
	}
	if _, err := e.claim(ctx, "vm1.p"); err == nil {
		t.Fatal("claim made for a NAD without allowPersistentIPs")
	}

	uses, err := e.sim.CreateVM(ctx, e.ns, "vm2", framework.VMNetwork{Name: "a", NAD: "shared"}, framework.VMNetwork{Name: "x", NAD: "broken"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, uses, string(claims.ReasonNADProblem), "spec.config.allowPersistentIPs")
	e.waitClaim(t, "vm2.a") // the healthy network is not held back
	if _, _, err := e.sim.Start(ctx, uses, ""); err == nil || !strings.Contains(err.Error(), "NetworkAttachmentDefinition "+e.ns+"/broken: spec.config.allowPersistentIPs") {
		t.Fatalf("launcher pod using a broken NAD: err = %v, want a denial naming the NAD and field", err)
	}
}

// Pairs that collide under plain "<vm>.<network>" naming get separate
// claims, each owned by its own VM.
func TestClaimNamesDoNotCollide(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("names-blue", true))
	first, err := e.sim.CreateVM(ctx, e.ns, "vm.net", framework.VMNetwork{Name: "a", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.sim.CreateVM(ctx, e.ns, "vm", framework.VMNetwork{Name: "net.a", NAD: "blue"}, framework.VMNetwork{Name: "Net_A", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{naming.Claim("vm.net", "a"), naming.Claim("vm", "net.a"), naming.Claim("vm", "Net_A")}
	owners := []client.Object{first, second, second}
	for i, n := range names {
		c := e.waitClaim(t, n)
		controllerRef(t, c, owners[i], "VirtualMachine")
	}
	_, pod, err := e.sim.Start(ctx, second, "")
	if err != nil {
		t.Fatal(err)
	}
	got := refs(t, pod)
	if got[kubevirt.PodInterfaceName("net.a")] != names[1] || got[kubevirt.PodInterfaceName("Net_A")] != names[2] {
		t.Fatalf("pod references %v, want %v", got, names[1:])
	}
}

// assertKeptAfterReconcile makes the claim release controller look at
// claim again (through the pod that references it) and checks the claim
// survived that look.
func assertKeptAfterReconcile(t *testing.T, e *kvEnv, pod *corev1.Pod, claim string) {
	t.Helper()
	before := reconciles("claim-release")
	if err := e.sim.Touch(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, "claim-release", before, 1)
	c, err := e.claim(context.Background(), claim)
	if err != nil {
		t.Fatalf("claim %s released while pod %s still uses it: %v", claim, pod.Name, err)
	}
	if !slices.Contains(c.Finalizers, claims.Finalizer) {
		t.Fatalf("claim %s lost its finalizer while pod %s still uses it", claim, pod.Name)
	}
}
