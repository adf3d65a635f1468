// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The test bed of KubeVirt's decentralized live migration inside one
// cluster, driven by the real virt-controller v1.8.2 with its
// DecentralizedLiveMigration gate on: a VM of one namespace moves to a
// receiver VM (runStrategy WaitAsReceiver) of another. It checks the
// framework's simulation of what cannot run here (KubeVirt's
// synchronization controller, virt-handler; framework.KubeVirt's
// DecentralizedSimulated) against what virt-controller does with it: the
// receiver's target launcher pod in the receiver's namespace, running next
// to the source, then a completed migration (source VM halted, receiver
// running on the target node) or a failed one (source still running,
// target pod gone, receiver waiting again). Both namespaces have the same
// NAD (ipkeeper IPAM, persistent IPs); the kubelet runs no sandbox (the
// API-only kubelet of startKubeVirtEnv) but records when it would run the
// target pod's CNI ADD and what both VMIs say then.
func TestDecentralizedMigrationTestBed(t *testing.T) {
	ctx := context.Background()
	e, recv := startDecentralizedEnv(t)

	suffix := e.ns[len(e.ns)-5:]
	conf := bridgeNAD("dlm-"+suffix, true)
	e.nad(t, "blue", conf)
	recv.nad(t, "blue", conf)
	blue := framework.VMNetwork{Name: "blue", NAD: "blue"}
	nodeA, nodeB := "node-dlm-a-"+suffix, "node-dlm-b-"+suffix

	// The kubelet's Run hook: where a sandbox's CNI ADD runs. This one
	// runs none (as startKubeVirtEnv's API-only kubelet) and records, for
	// migration target pods, what the receiver and the source VMI say at
	// that moment.
	var (
		mu     sync.Mutex
		ran    = map[string]string{} // "<ns>/<pod>" -> what both VMIs said when its sandbox ran
		source *kubevirtv1.VirtualMachineInstance
	)
	e.kv.Kubelet.Run = func(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error) {
		if _, target := pod.Labels[kubevirtv1.MigrationJobLabel]; !target {
			return nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		ran[pod.Namespace+"/"+pod.Name] = dlmVMIUIDs(ctx, pod, source)
		return nil, nil
	}
	t.Log(e.kv.Simulated())
	t.Log(e.kv.DecentralizedSimulated())

	// start runs a source VM on node A and makes a receiver VM.
	start := func(t *testing.T, name string) (srcVM *kubevirtv1.VirtualMachine, srcVMI *kubevirtv1.VirtualMachineInstance, recvVM *kubevirtv1.VirtualMachine, recvVMI *kubevirtv1.VirtualMachineInstance) {
		t.Helper()
		srcVM, err := e.kv.CreateVM(ctx, e.ns, name, blue)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dlmDeleteVM(t, e.kv, srcVM) })
		e.waitClaim(t, name+".blue")
		srcVMI, srcPod, err := e.kv.Start(ctx, srcVM, nodeA)
		if err != nil {
			t.Fatal(err)
		}
		if srcPod.Spec.NodeName != nodeA {
			t.Fatalf("source launcher on %q, want %s", srcPod.Spec.NodeName, nodeA)
		}
		recvVM, recvVMI, err = e.kv.CreateReceiverVM(ctx, recv.ns, name+"-recv", blue)
		if recvVM != nil {
			t.Cleanup(func() { dlmDeleteVM(t, e.kv, recvVM) })
		}
		if err != nil {
			t.Fatal(err)
		}
		if recvVMI.Annotations[kubevirtv1.CreateMigrationTarget] != "true" || recvVMI.Status.Phase != kubevirtv1.WaitingForSync || !metav1.IsControlledBy(recvVMI, recvVM) {
			t.Fatalf("receiver VMI: annotations %v, phase %s, controlled by its VM %t; want %s=true, WaitingForSync, true",
				recvVMI.Annotations, recvVMI.Status.Phase, metav1.IsControlledBy(recvVMI, recvVM), kubevirtv1.CreateMigrationTarget)
		}
		mu.Lock()
		source = srcVMI.DeepCopy()
		mu.Unlock()
		return srcVM, srcVMI, recvVM, recvVMI
	}

	// migrate starts the migration to node B and checks both launchers run.
	migrate := func(t *testing.T, srcVMI *kubevirtv1.VirtualMachineInstance, recvVM *kubevirtv1.VirtualMachine, recvVMI *kubevirtv1.VirtualMachineInstance, id string) *framework.DecentralizedMigration {
		t.Helper()
		began := time.Now()
		m, err := e.kv.StartDecentralizedMigration(ctx, srcVMI, recvVM, nodeB, id)
		if m != nil {
			t.Cleanup(func() { dlmLogTrace(t, m) })
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("decentralized migration %s: target pod %s/%s running after %s", id, m.TargetPod.Namespace, m.TargetPod.Name, time.Since(began).Round(time.Millisecond))
		target := dlmPod(t, m.TargetPod)
		if target.Namespace != recv.ns || target.Spec.NodeName != nodeB || target.Status.Phase != corev1.PodRunning {
			t.Fatalf("target pod %s/%s on %q, phase %s; want namespace %s, node %s, Running", target.Namespace, target.Name, target.Spec.NodeName, target.Status.Phase, recv.ns, nodeB)
		}
		if got := types.UID(target.Labels[kubevirtv1.MigrationJobLabel]); got != m.ReceiveMigration.UID {
			t.Errorf("target pod's %s = %q, want the receive migration's %s", kubevirtv1.MigrationJobLabel, got, m.ReceiveMigration.UID)
		}
		if got := types.UID(target.Labels[kubevirtv1.CreatedByLabel]); got != recvVMI.UID || !metav1.IsControlledBy(&target, recvVMI) {
			t.Errorf("target pod created by %q (controller %v), want the receiver VMI %s", got, metav1.GetControllerOf(&target), recvVMI.UID)
		}
		src := dlmPod(t, m.SourcePod)
		if src.Namespace != e.ns || src.Spec.NodeName != nodeA || src.Status.Phase != corev1.PodRunning || src.DeletionTimestamp != nil {
			t.Fatalf("source pod %s/%s on %q, phase %s (deleting %t); want it running on %s", src.Namespace, src.Name, src.Spec.NodeName, src.Status.Phase, src.DeletionTimestamp != nil, nodeA)
		}
		// What the synchronization controller carried across.
		rms, sms := m.Receiver.Status.MigrationState, m.Source.Status.MigrationState
		if rms == nil || rms.SourceState == nil || rms.SourceState.VirtualMachineInstanceUID == nil || *rms.SourceState.VirtualMachineInstanceUID != srcVMI.UID ||
			rms.SourceState.MigrationUID != m.SendMigration.UID || rms.SourceState.Pod != src.Name || rms.SourceState.Node != nodeA {
			t.Errorf("receiver VMI's sourceState = %+v, want the source VMI %s, its migration %s, pod %s on %s", dlmSourceState(rms), srcVMI.UID, m.SendMigration.UID, src.Name, nodeA)
		}
		if sms == nil || sms.TargetState == nil || sms.TargetState.VirtualMachineInstanceUID == nil || *sms.TargetState.VirtualMachineInstanceUID != recvVMI.UID ||
			sms.TargetState.MigrationUID != m.ReceiveMigration.UID || sms.TargetState.Pod != target.Name || sms.TargetState.Node != nodeB {
			t.Errorf("source VMI's targetState = %+v, want the receiver VMI %s, its migration %s, pod %s on %s", dlmTargetState(sms), recvVMI.UID, m.ReceiveMigration.UID, target.Name, nodeB)
		}
		if m.Receiver.Labels[kubevirtv1.MigrationTargetNodeNameLabel] != nodeB {
			t.Errorf("receiver VMI label %s = %q, want %s (virt-controller's handoff)", kubevirtv1.MigrationTargetNodeNameLabel, m.Receiver.Labels[kubevirtv1.MigrationTargetNodeNameLabel], nodeB)
		}
		mu.Lock()
		at, ok := ran[target.Namespace+"/"+target.Name]
		mu.Unlock()
		if !ok {
			t.Fatalf("the kubelet never ran target pod %s/%s", target.Namespace, target.Name)
		}
		t.Logf("when the kubelet ran target pod %s (its CNI ADD): %s", target.Name, at)
		t.Logf("claim references: source pod %v, target pod %v (the webhook of startKubeVirtEnv covers %s only)", refs(t, &src), refs(t, &target), e.ns)
		for _, c := range []struct{ ns, name string }{{e.ns, srcVMI.Name + ".blue"}, {recv.ns, recvVMI.Name + ".blue"}} {
			var claim ipamclaimsv1alpha1.IPAMClaim
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: c.name}, &claim)
			t.Logf("IPAMClaim %s/%s: addresses %v (%v)", c.ns, c.name, claim.Status.IPs, err)
		}
		return m
	}

	t.Run("Complete", func(t *testing.T) {
		srcVM, srcVMI, recvVM, recvVMI := start(t, "dlm-ok")
		m := migrate(t, srcVMI, recvVM, recvVMI, "dlm-ok-"+suffix)
		began := time.Now()
		if err := m.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("completed in %s", time.Since(began).Round(time.Millisecond))

		live := &kubevirtv1.VirtualMachine{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(srcVM), live); err != nil {
			t.Fatal(err)
		}
		if live.Spec.RunStrategy == nil || *live.Spec.RunStrategy != kubevirtv1.RunStrategyHalted {
			t.Errorf("source VM runStrategy = %v, want Halted", live.Spec.RunStrategy)
		}
		var gone kubevirtv1.VirtualMachineInstance
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(srcVMI), &gone)
		if err == nil && gone.UID == srcVMI.UID && gone.Status.Phase != kubevirtv1.Succeeded {
			t.Errorf("source VMI is %s, want gone or Succeeded", gone.Status.Phase)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(recvVM), live); err != nil {
			t.Fatal(err)
		}
		if live.Spec.RunStrategy == nil || *live.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
			t.Errorf("receiver VM runStrategy = %v, want Always (its restore-run-strategy)", live.Spec.RunStrategy)
		}
		r := &kubevirtv1.VirtualMachineInstance{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(recvVMI), r); err != nil {
			t.Fatal(err)
		}
		if r.UID != recvVMI.UID || r.Status.Phase != kubevirtv1.Running || r.Status.NodeName != nodeB || r.Labels[kubevirtv1.NodeNameLabel] != nodeB {
			t.Errorf("receiver VMI %s (uid %s) on %q (label %q), want the receiver VMI %s Running on %s", r.Status.Phase, r.UID, r.Status.NodeName, r.Labels[kubevirtv1.NodeNameLabel], recvVMI.UID, nodeB)
		}
		if _, ok := r.Status.ActivePods[m.TargetPod.UID]; !ok || r.IsMigrationTarget() || r.IsMigrationTargetNodeLabelSet() {
			t.Errorf("receiver VMI: active pods %v (want %s), still a migration target %t/%t", r.Status.ActivePods, m.TargetPod.UID, r.IsMigrationTarget(), r.IsMigrationTargetNodeLabelSet())
		}
		if ms := r.Status.MigrationState; ms == nil || !ms.Completed || ms.Failed {
			t.Errorf("receiver VMI migration state %+v, want completed", ms)
		}
		if got := dlmPod(t, m.TargetPod); got.Status.Phase != corev1.PodRunning {
			t.Errorf("target pod %s is %s, want Running", got.Name, got.Status.Phase)
		}
		for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
			if mig.Status.Phase != kubevirtv1.MigrationSucceeded {
				t.Errorf("migration %s/%s is %s, want Succeeded", mig.Namespace, mig.Name, mig.Status.Phase)
			}
		}
	})

	// failed checks the end of a failed migration: the source still runs,
	// the target pod is down, both migrations failed, the receiver waits
	// for a migration again.
	failed := func(t *testing.T, m *framework.DecentralizedMigration, srcVMI *kubevirtv1.VirtualMachineInstance, recvVM *kubevirtv1.VirtualMachine) {
		t.Helper()
		s := &kubevirtv1.VirtualMachineInstance{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(srcVMI), s); err != nil {
			t.Fatal(err)
		}
		if s.UID != srcVMI.UID || s.Status.Phase != kubevirtv1.Running || s.Status.NodeName != nodeA {
			t.Errorf("source VMI %s on %q, want Running on %s", s.Status.Phase, s.Status.NodeName, nodeA)
		}
		if ms := s.Status.MigrationState; ms == nil || !ms.Failed {
			t.Errorf("source VMI migration state %+v, want failed", ms)
		}
		if got := dlmPod(t, m.SourcePod); got.Status.Phase != corev1.PodRunning || got.DeletionTimestamp != nil {
			t.Errorf("source pod %s is %s (deleting %t), want Running", got.Name, got.Status.Phase, got.DeletionTimestamp != nil)
		}
		var target corev1.Pod
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(m.TargetPod), &target)
		if err == nil && target.UID == m.TargetPod.UID && target.Status.Phase != corev1.PodFailed {
			t.Errorf("target pod %s is %s, want gone or Failed", target.Name, target.Status.Phase)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
			if mig.Status.Phase != kubevirtv1.MigrationFailed {
				t.Errorf("migration %s/%s is %s, want Failed", mig.Namespace, mig.Name, mig.Status.Phase)
			}
		}
		if m.Receiver.Status.Phase != kubevirtv1.WaitingForSync || !m.Receiver.IsMigrationTarget() {
			t.Errorf("receiver VMI %s (a migration target: %t), want WaitingForSync, still a receiver", m.Receiver.Status.Phase, m.Receiver.IsMigrationTarget())
		}
		// virt-controller: the receiver VM waits for a migration again.
		waitFor(t, "receiver VM "+recvVM.Name+" WaitingForReceiver", func(ctx context.Context) (bool, error) {
			vm := &kubevirtv1.VirtualMachine{}
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(recvVM), vm); err != nil {
				return false, err
			}
			return vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusWaitingForReceiver &&
				vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyWaitAsReceiver, nil
		})
	}

	t.Run("Fail", func(t *testing.T) {
		_, srcVMI, recvVM, recvVMI := start(t, "dlm-fail")
		m := migrate(t, srcVMI, recvVM, recvVMI, "dlm-fail-"+suffix)
		began := time.Now()
		if err := m.Fail(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("failed in %s", time.Since(began).Round(time.Millisecond))
		failed(t, m, srcVMI, recvVM)
		if ms := m.Receiver.Status.MigrationState; ms == nil || !ms.Failed || !ms.Completed {
			t.Errorf("receiver VMI migration state %+v, want failed and completed", ms)
		}
	})

	// A migration libvirt fails once started: KubeVirt v1.8.2 then never
	// marks the receiver VMI's migration state failed (FailAfterStart).
	t.Run("FailAfterStart", func(t *testing.T) {
		_, srcVMI, recvVM, recvVMI := start(t, "dlm-late")
		m := migrate(t, srcVMI, recvVM, recvVMI, "dlm-late-"+suffix)
		began := time.Now()
		if err := m.FailAfterStart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("failed in %s", time.Since(began).Round(time.Millisecond))
		failed(t, m, srcVMI, recvVM)
		if ms := m.Receiver.Status.MigrationState; ms != nil {
			t.Logf("receiver VMI migration state after a failure once started: failed %t, completed %t, start %v, end %v", ms.Failed, ms.Completed, ms.StartTimestamp, ms.EndTimestamp)
		}
	})
}

// dlmDeleteVM deletes vm and waits until it and its VMI are gone.
func dlmDeleteVM(t *testing.T, kv *framework.KubeVirt, vm *kubevirtv1.VirtualMachine) {
	t.Helper()
	if err := kv.DeleteVM(context.Background(), vm, metav1.DeletePropagationForeground); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting VM %s/%s: %v", vm.Namespace, vm.Name, err)
	}
}

func dlmPod(t *testing.T, pod *corev1.Pod) corev1.Pod {
	t.Helper()
	var live corev1.Pod
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &live); err != nil {
		t.Fatalf("reading pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return live
}

func dlmLogTrace(t *testing.T, m *framework.DecentralizedMigration) {
	t.Helper()
	t.Logf("decentralized migration trace:\n%s", strings.Join(m.Trace, "\n"))
}

// dlmVMIUIDs says what the receiver VMI of a target pod (its
// kubevirt.io/domain annotation) and the source VMI say of each other.
func dlmVMIUIDs(ctx context.Context, pod *corev1.Pod, source *kubevirtv1.VirtualMachineInstance) string {
	var out []string
	r := &kubevirtv1.VirtualMachineInstance{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: pod.Annotations[kubevirtv1.DomainAnnotation]}, r); err != nil {
		out = append(out, fmt.Sprintf("receiver VMI: %v", err))
	} else {
		ms := r.Status.MigrationState
		out = append(out, fmt.Sprintf("receiver VMI %s: sourceState.virtualMachineInstanceUID %s, targetState.virtualMachineInstanceUID %s",
			r.Status.Phase, dlmUID(ms, true), dlmUID(ms, false)))
	}
	if source != nil {
		s := &kubevirtv1.VirtualMachineInstance{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(source), s); err != nil {
			out = append(out, fmt.Sprintf("source VMI: %v", err))
		} else {
			ms := s.Status.MigrationState
			out = append(out, fmt.Sprintf("source VMI %s: sourceState.virtualMachineInstanceUID %s, targetState.virtualMachineInstanceUID %s",
				s.Status.Phase, dlmUID(ms, true), dlmUID(ms, false)))
		}
	}
	return strings.Join(out, "; ")
}

func dlmUID(ms *kubevirtv1.VirtualMachineInstanceMigrationState, source bool) string {
	switch {
	case ms == nil:
	case source && ms.SourceState != nil && ms.SourceState.VirtualMachineInstanceUID != nil:
		return string(*ms.SourceState.VirtualMachineInstanceUID)
	case !source && ms.TargetState != nil && ms.TargetState.VirtualMachineInstanceUID != nil:
		return string(*ms.TargetState.VirtualMachineInstanceUID)
	}
	return "(none)"
}

func dlmSourceState(ms *kubevirtv1.VirtualMachineInstanceMigrationState) any {
	if ms == nil || ms.SourceState == nil {
		return nil
	}
	return *ms.SourceState
}

func dlmTargetState(ms *kubevirtv1.VirtualMachineInstanceMigrationState) any {
	if ms == nil || ms.TargetState == nil {
		return nil
	}
	return *ms.TargetState
}
