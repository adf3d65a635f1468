// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// VM create -> claims (only for the persistent network) -> start on node-a
// -> pod mutated -> stop, start on node-b -> same claim -> live migration
// back to node-a (a real VirtualMachineInstanceMigration) -> the target pod
// references it -> a failed migration keeps the VM and its claim on node-a.
func TestVMClaimsAcrossStartStopAndMigration(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("tenant-blue", true))
	e.nad(t, "red", bridgeNAD("tenant-red", false))

	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"}, framework.VMNetwork{Name: "red", NAD: e.ns + "/red"})
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

	_, pod1, err := e.kv.Start(ctx, vm, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	got := refs(t, pod1)
	want := map[string]string{kubevirt.PodInterfaceName("blue"): "vm1.blue", kubevirt.PodInterfaceName("red"): ""}
	if !maps.Equal(got, want) {
		t.Fatalf("launcher pod references = %v, want %v", got, want)
	}

	if err := e.kv.Stop(ctx, vm); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pod1)
	vmi, pod2, err := e.kv.Start(ctx, vm, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if pod2.Name == pod1.Name || pod2.Spec.NodeName != "node-b" {
		t.Fatalf("restarted launcher %s on %s, want a new pod on node-b", pod2.Name, pod2.Spec.NodeName)
	}
	if got := refs(t, pod2)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("restarted launcher references %q, want vm1.blue", got)
	}
	after, err := e.claim(ctx, "vm1.blue")
	if err != nil || after.UID != claim.UID {
		t.Fatalf("claim after stop/start: %v (uid %s), want the same claim (uid %s)", err, after.UID, claim.UID)
	}

	mig, target, err := e.kv.Migrate(ctx, vmi, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if target.Labels[kubevirtv1.MigrationJobLabel] != string(mig.UID) || target.Spec.NodeName != "node-a" {
		t.Fatalf("migration target %s: labels %v on node %q, want migration job %s on node-a", target.Name, target.Labels, target.Spec.NodeName, mig.UID)
	}
	if got := refs(t, target)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("migration target references %q, want vm1.blue", got)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.Status.NodeName != "node-a" {
		t.Fatalf("VMI after the migration: %v, on node %q, want node-a", err, vmi.Status.NodeName)
	}
	// The claim outlives the migration source (now Succeeded): the VM
	// still wants it.
	assertKeptAfterReconcile(t, e, target, claim.Name)
	if after, err := e.claim(ctx, "vm1.blue"); err != nil || after.UID != claim.UID {
		t.Fatalf("claim after migration: %v", err)
	}

	// A migration that fails: the target pod referenced the claim too, and
	// its end releases nothing.
	failed, failedTarget, err := e.kv.Migrate(ctx, vmi, "node-b", framework.FailMigration())
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status.Phase != kubevirtv1.MigrationFailed {
		t.Fatalf("migration %s phase %s, want Failed", failed.Name, failed.Status.Phase)
	}
	if got := refs(t, failedTarget)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("failed migration's target references %q, want vm1.blue", got)
	}
	live, err := e.kv.LauncherPod(ctx, vmi)
	if err != nil || live.Name != target.Name {
		t.Fatalf("live launcher after the failed migration: %v (%v), want %s", live, err, target.Name)
	}
	assertKeptAfterReconcile(t, e, live, claim.Name)
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
			vm, err := e.kv.CreateVM(ctx, e.ns, "vm-"+tc.name, framework.VMNetwork{Name: "blue", NAD: "blue"})
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
				if vmi, pod, err = e.kv.Start(ctx, vm, "node-a"); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.kv.DeleteVM(ctx, vm, tc.policy); err != nil {
				t.Fatal(err)
			}
			if tc.policy == orphan {
				// The orphaned VMI still runs: its claim must stay.
				if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.DeletionTimestamp != nil {
					t.Fatalf("orphaned VMI: %v (deleting: %v), want it running", err, vmi.DeletionTimestamp != nil)
				}
				assertKeptAfterReconcile(t, e, pod, claim.Name)
				if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != claim.Name {
					t.Fatalf("pod references %q", got)
				}
				if err := e.kv.DeleteVMI(ctx, vmi); err != nil {
					t.Fatal(err)
				}
			}
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

	vmi, pod, err := e.kv.CreateVMI(ctx, e.ns, "lonely", "node-a", framework.VMNetwork{Name: "blue", NAD: "blue"})
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
	_, target, err := e.kv.Migrate(ctx, vmi, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, target)[kubevirt.PodInterfaceName("blue")]; got != "lonely.blue" {
		t.Fatalf("migration target references %q, want lonely.blue", got)
	}
	if err := e.kv.DeleteVMI(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pod)
	waitGone(t, target)
	waitGone(t, claim)
}

// NIC hotplug into a running VM, through virt-controller: it patches the
// live launcher pod's networks annotation, which the webhook completes with
// the new claim; a migration after the hotplug carries both networks; an
// unplug (state: absent) drops the network from the pod and the claim goes.
func TestHotplugAndUnplug(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("hp-blue", true))
	e.nad(t, "green", bridgeNAD("hp-green", true))

	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	vmi, pod, err := e.kv.Start(ctx, vm, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	live, err := e.kv.Hotplug(ctx, vm, framework.VMNetwork{Name: "green", NAD: "green"})
	if err != nil {
		t.Fatal(err)
	}
	if live.UID != pod.UID {
		t.Fatalf("hotplug replaced the launcher pod (%s, was %s): want the live pod patched", live.Name, pod.Name)
	}
	green := e.waitClaim(t, "vm1.green")
	want := map[string]string{kubevirt.PodInterfaceName("blue"): "vm1.blue", kubevirt.PodInterfaceName("green"): "vm1.green"}
	if got := refs(t, pod); !maps.Equal(got, want) {
		t.Fatalf("after hotplug the pod references %v, want %v", got, want)
	}

	_, target, err := e.kv.Migrate(ctx, vmi, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, target); !maps.Equal(got, want) {
		t.Fatalf("migration target after the hotplug references %v, want %v", got, want)
	}

	if err := e.kv.Unplug(ctx, vm, "green"); err != nil {
		t.Fatal(err)
	}
	if _, ok := refs(t, target)[kubevirt.PodInterfaceName("green")]; ok {
		t.Fatal("unplugged network still in the pod annotation")
	}
	waitGone(t, green)
	if c, err := e.claim(ctx, "vm1.blue"); err != nil || c.DeletionTimestamp != nil {
		t.Fatalf("blue claim touched by unplugging green: %v", err)
	}
}

// A VM deleted and re-created with the same name while its old launcher pod
// still terminates. Real KubeVirt keeps a VM until its VMI is gone, and a
// VMI until its launcher pods are gone, so this happens when an admin
// removes a stuck VMI's finalizers (as runbooks do): the old claim is not
// handed over, the new VM gets an event, its launcher pod is refused while
// the old claim lives (virt-controller retries), and it runs with a claim of
// its own once the old pod is gone.
func TestSameNameVMRecreated(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("re-blue", true))

	old, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	oldClaim := e.waitClaim(t, "vm1.blue")
	oldVMI, oldPod, err := e.kv.Start(ctx, old, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	// virt-controller deletes the VMI and its pod (with a grace period no
	// kubelet finishes here); the admin then removes the VMI's finalizers.
	if err := framework.Eventually(ctx, time.Minute, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(oldPod), oldPod); err != nil {
			return false, err
		}
		return oldPod.DeletionTimestamp != nil, nil
	}); err != nil {
		t.Fatalf("virt-controller never deleted the old launcher pod: %v", err)
	}
	t.Cleanup(func() { _ = e.kv.FinishPodDeletion(context.Background(), oldPod) })
	if err := cp.Client.Patch(ctx, oldVMI, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	waitGone(t, oldVMI)
	waitGone(t, old)

	conflictsBefore := controllerCounter("ipkeeper_controller_claims_name_conflicts_total", "", "")
	recreated, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, recreated, string(claims.ReasonClaimConflict), "vm1.blue")
	if controllerCounter("ipkeeper_controller_claims_name_conflicts_total", "", "") <= conflictsBefore {
		t.Error("conflict metric did not move")
	}
	// The new VM's launcher must not get the old VM's addresses: the
	// webhook refuses it, and virt-controller reports that on the VMI.
	startRefused(t, recreated, "still belongs to VirtualMachine vm1 (uid "+string(old.UID))
	assertKeptAfterReconcile(t, e, oldPod, oldClaim.Name)
	if c, _ := e.claim(ctx, "vm1.blue"); c.UID != oldClaim.UID {
		t.Fatalf("old claim replaced while its pod still terminates")
	}

	if err := e.kv.FinishPodDeletion(ctx, oldPod); err != nil {
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
	// virt-controller retries the refused pod with a backoff that grew
	// while the old claim lived; a change of the VMI retries at once.
	if err := framework.Touch(ctx, cp.Client, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "vm1"}}); err != nil {
		t.Fatal(err)
	}
	_, pod, err := e.kv.Start(ctx, recreated, "node-a")
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
	if err := e.kv.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kv.SetFeatureGate(context.Background(), true) })

	// Gate off: the webhook references only claims that exist.
	if err := cp.WaitWebhookReferences(ctx, e.ctrl.WebhookConfig, webhook.ReferencesExisting); err != nil {
		t.Fatal(err)
	}
	before := reconciles("vm-claims")
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, "vm-claims", before, 1)
	_, pod, err := e.kv.Start(ctx, vm, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, pod)[kubevirt.PodInterfaceName("blue")]; got != "" {
		t.Fatalf("gate off, yet the pod references %q", got)
	}
	if _, err := e.claim(ctx, "vm1.blue"); err == nil {
		t.Fatal("gate off, yet a claim was created")
	}

	if err := e.kv.SetFeatureGate(ctx, true); err != nil {
		t.Fatal(err)
	}
	claim := e.waitClaim(t, "vm1.blue") // reacts to the gate, no VM change needed
	if err := cp.WaitWebhookReferences(ctx, e.ctrl.WebhookConfig, webhook.ReferencesAll); err != nil {
		t.Fatal(err)
	}
	controllerRef(t, claim, vm, "VirtualMachine")
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		t.Fatal(err)
	}
	_, target, err := e.kv.Migrate(ctx, vmi, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, target)[kubevirt.PodInterfaceName("blue")]; got != "vm1.blue" {
		t.Fatalf("gate on: pod references %q", got)
	}

	// Turning the gate off keeps existing claims. (Counted from before the
	// change: the re-queue it causes may finish at once.)
	before = reconciles("vm-claims")
	if err := e.kv.SetFeatureGate(ctx, false); err != nil {
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
	e := startKubeVirtEnv(t, func(o *manager.Options) { o.RequireGate = false })
	if err := e.kv.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kv.SetFeatureGate(context.Background(), true) })
	e.nad(t, "blue", bridgeNAD("nogate-blue", true))
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	_, pod, err := e.kv.Start(ctx, vm, "")
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

	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1",
		framework.VMNetwork{Name: "a", NAD: "shared"}, framework.VMNetwork{Name: "b", NAD: "shared"}, framework.VMNetwork{Name: "p", NAD: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := e.waitClaim(t, "vm1.a"), e.waitClaim(t, "vm1.b")
	if a.Spec.Network != "nad-shared" || b.Spec.Network != "nad-shared" || a.Spec.Interface == b.Spec.Interface {
		t.Fatalf("claims a=%+v b=%+v: want one network, two interfaces", a.Spec, b.Spec)
	}
	_, pod, err := e.kv.Start(ctx, vm, "")
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

	uses, err := e.kv.CreateVM(ctx, e.ns, "vm2", framework.VMNetwork{Name: "a", NAD: "shared"}, framework.VMNetwork{Name: "x", NAD: "broken"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, uses, string(claims.ReasonNADProblem), "spec.config.allowPersistentIPs")
	e.waitClaim(t, "vm2.a") // the healthy network is not held back
	startRefused(t, uses, "NetworkAttachmentDefinition "+e.ns+"/broken: spec.config.allowPersistentIPs")
}

// Pairs that collide under plain "<vm>.<network>" naming get separate
// claims, each owned by its own VM.
func TestClaimNamesDoNotCollide(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("names-blue", true))
	first, err := e.kv.CreateVM(ctx, e.ns, "vm.net", framework.VMNetwork{Name: "a", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.kv.CreateVM(ctx, e.ns, "vm", framework.VMNetwork{Name: "net.a", NAD: "blue"}, framework.VMNetwork{Name: "Net_A", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{naming.Claim("vm.net", "a"), naming.Claim("vm", "net.a"), naming.Claim("vm", "Net_A")}
	owners := []client.Object{first, second, second}
	for i, n := range names {
		c := e.waitClaim(t, n)
		controllerRef(t, c, owners[i], "VirtualMachine")
	}
	_, pod, err := e.kv.Start(ctx, second, "")
	if err != nil {
		t.Fatal(err)
	}
	got := refs(t, pod)
	if got[kubevirt.PodInterfaceName("net.a")] != names[1] || got[kubevirt.PodInterfaceName("Net_A")] != names[2] {
		t.Fatalf("pod references %v, want %v", got, names[1:])
	}
}

// startRefused starts vm and waits until virt-controller reports, with a
// FailedCreate event on the VMI, that the API server refused its launcher
// pod with an error containing want (the webhook's denial).
func startRefused(t *testing.T, vm *kubevirtv1.VirtualMachine, want string) {
	t.Helper()
	ctx := context.Background()
	if err := cp.Client.Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runStrategy":"Always"}}`))); err != nil {
		t.Fatal(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, "the VMI of "+vm.Name, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
		return err == nil && metav1.IsControlledBy(vmi, vm), client.IgnoreNotFound(err)
	})
	waitEvent(t, vmi, "FailedCreate", want)
	var pods corev1.PodList
	if err := cp.Client.List(ctx, &pods, client.InNamespace(vm.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Fatalf("launcher pod %s admitted, want it refused (%s)", pods.Items[0].Name, want)
	}
}
