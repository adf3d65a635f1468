// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeVirt drives VMs through the real virt-controller (a control plane
// started with Options.VirtController): the test writes what a user
// writes (a VM, its runStrategy, a VirtualMachineInstanceMigration, a NIC
// hotplug or unplug in the VM spec), virt-controller writes the VMI, the
// launcher pods and their networks annotation, and KubeVirt simulates only
// what runs on nodes and cannot run here:
//
//   - the scheduler: binds launcher pods through pods/binding;
//   - the kubelet: reports bound pods Running and Ready (the compute
//     container running), runs their sandbox through the PodRunner hook,
//     and finishes the graceful deletions virt-controller starts
//     (grace period 60 s) at once;
//   - Multus: writes the network-status annotation from the pod's networks
//     annotation (unless RealMultus), and attaches and detaches hot-plugged
//     networks, updating network-status, as its dynamic networks
//     controller would;
//   - virt-api: only the finalizer its webhook puts on every new VMI (and
//     no defaulting: VM templates are explicit, ExplicitVMTemplate);
//   - virt-handler: writes the VMI status a running guest gets (phase
//     Running, selinuxContext, conditions Ready/LiveMigratable/
//     AgentConnected, interfaces), the migration state transitions up to
//     completion or failure, and phase Succeeded once a stopped VMI's
//     launcher pod is gone.
//
// Every method waits, with Timeout, for virt-controller's part of a step
// before it does the next simulated one, so a test sees the objects in
// the order a cluster writes them.
type KubeVirt struct {
	C client.Client
	// Kubelet runs launcher pods' sandboxes; zero: API only.
	Kubelet PodRunner
	// RealMultus: the Kubelet runs the real Multus, which writes the
	// network-status annotation when a sandbox starts (hotplug's changes to
	// it stay simulated).
	RealMultus bool
	// Timeout bounds each wait for virt-controller; zero means a minute.
	Timeout time.Duration
}

// Simulated names what this driver simulates, for the test's output.
func (k *KubeVirt) Simulated() string {
	kubelet := "kubelet (API only: pod status, no sandbox)"
	if k.Kubelet.Run != nil {
		kubelet = "kubelet (pod status; sandboxes run by the test's PodRunner)"
	}
	multusPart := "Multus network-status annotation and dynamic attach/detach"
	if k.RealMultus {
		multusPart = "Multus dynamic attach/detach (network-status from the real Multus)"
	}
	return "real: KubeVirt virt-controller; simulated: scheduler binding, " + kubelet + ", " + multusPart +
		", virt-handler (VMI phase, conditions, interfaces, migration state), virt-api's VMI finalizer; absent: virt-api's defaulting (explicit VM templates)"
}

func (k *KubeVirt) timeout() time.Duration {
	if k.Timeout > 0 {
		return k.Timeout
	}
	return time.Minute
}

func (k *KubeVirt) wait(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	if err := Eventually(ctx, k.timeout(), 50*time.Millisecond, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// NewVM returns a stopped VM (runStrategy Halted) with an explicit template
// (ExplicitVMTemplate, with a fresh firmware UUID) and the given secondary
// networks, for tests that change it before creating it.
func NewVM(ns, name string, networks ...VMNetwork) *kubevirtv1.VirtualMachine {
	halted := kubevirtv1.RunStrategyHalted
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &halted,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       ExplicitVMTemplate(uuid.NewUUID(), networks...),
			},
		},
	}
}

// CreateVM creates a stopped VM (NewVM).
func (k *KubeVirt) CreateVM(ctx context.Context, ns, name string, networks ...VMNetwork) (*kubevirtv1.VirtualMachine, error) {
	vm := NewVM(ns, name, networks...)
	if err := k.C.Create(ctx, vm); err != nil {
		return nil, fmt.Errorf("creating VirtualMachine %s/%s: %w", ns, name, err)
	}
	return vm, nil
}

// Start sets the VM's runStrategy to Always and waits for virt-controller's
// VMI and launcher pod. With a node, the pod is then bound there and run,
// and the VMI reported Running (virt-handler); without, it stays Pending.
func (k *KubeVirt) Start(ctx context.Context, vm *kubevirtv1.VirtualMachine, node string) (*kubevirtv1.VirtualMachineInstance, *corev1.Pod, error) {
	if err := k.setRunStrategy(ctx, vm, kubevirtv1.RunStrategyAlways); err != nil {
		return nil, nil, err
	}
	vmi, err := k.waitVMI(ctx, vm)
	if err != nil {
		return nil, nil, err
	}
	return k.launch(ctx, vmi, node)
}

// CreateVMI creates a standalone VMI (no VM) and, like Start, waits for its
// launcher pod and runs it on node ("" leaves it Pending).
func (k *KubeVirt) CreateVMI(ctx context.Context, ns, name, node string, networks ...VMNetwork) (*kubevirtv1.VirtualMachineInstance, *corev1.Pod, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name},
			Finalizers: []string{kubevirtv1.VirtualMachineInstanceFinalizer}}, // virt-api's, see addVirtAPIFinalizer
		Spec: ExplicitVMTemplate(uuid.NewUUID(), networks...),
	}
	if err := k.C.Create(ctx, vmi); err != nil {
		return nil, nil, fmt.Errorf("creating VirtualMachineInstance %s/%s: %w", ns, name, err)
	}
	return k.launch(ctx, vmi, node)
}

func (k *KubeVirt) launch(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, node string) (*kubevirtv1.VirtualMachineInstance, *corev1.Pod, error) {
	pod, err := k.waitPod(ctx, vmi, "")
	if err != nil {
		return nil, nil, err
	}
	if node == "" {
		return vmi, pod, nil
	}
	if pod, err = k.bindAndRun(ctx, pod, node); err != nil {
		return nil, nil, err
	}
	// virt-controller sees the pod running: VMI Scheduled on node.
	if err := k.wait(ctx, "VMI "+vmi.Name+" Scheduled on "+node, func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return false, err
		}
		return vmi.Status.Phase == kubevirtv1.Scheduled && vmi.Status.NodeName == node, nil
	}); err != nil {
		return nil, nil, err
	}
	if err := k.reportGuest(ctx, vmi, pod, nil); err != nil {
		return nil, nil, err
	}
	if owner := metav1.GetControllerOf(vmi); owner != nil && owner.Kind == "VirtualMachine" {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: owner.Name}}
		if err := k.wait(ctx, "VM "+vm.Name+" Ready", func(ctx context.Context) (bool, error) {
			if err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
				return false, err
			}
			return vm.Status.Ready, nil
		}); err != nil {
			return nil, nil, err
		}
	}
	return vmi, pod, nil
}

// Stop sets the VM's runStrategy to Halted; virt-controller deletes the
// VMI and its launcher pod, the simulated kubelet and virt-handler finish
// that, and Stop returns once the VMI is gone.
func (k *KubeVirt) Stop(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	if err := k.setRunStrategy(ctx, vm, kubevirtv1.RunStrategyHalted); err != nil {
		return err
	}
	if err != nil {
		return nil
	}
	return k.FinishVMI(ctx, vmi)
}

// DeleteVM deletes the VM with the given propagation policy and returns
// once it is gone; unless orphaned, its VMI is stopped and gone too.
func (k *KubeVirt) DeleteVM(ctx context.Context, vm *kubevirtv1.VirtualMachine, policy metav1.DeletionPropagation) error {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	hasVMI := err == nil && metav1.IsControlledBy(vmi, vm)
	if err := k.C.Delete(ctx, vm, client.PropagationPolicy(policy)); err != nil {
		return fmt.Errorf("deleting VirtualMachine %s/%s (%s): %w", vm.Namespace, vm.Name, policy, err)
	}
	if hasVMI && policy != metav1.DeletePropagationOrphan {
		if err := k.FinishVMI(ctx, vmi); err != nil {
			return err
		}
	}
	return WaitGone(ctx, k.C, vm, k.timeout())
}

// DeleteVMI deletes a VMI and returns once it is gone (its launcher pods
// deleted by virt-controller, the deletions finished by the kubelet).
func (k *KubeVirt) DeleteVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	if err := k.C.Delete(ctx, vmi); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return k.FinishVMI(ctx, vmi)
}

// StopAll stops every VMI of namespace ns (through its VM's runStrategy,
// or by deleting a standalone one) and returns once they are gone, so a
// test leaves no VMI that waits for a node which no longer answers.
func (k *KubeVirt) StopAll(ctx context.Context, ns string) error {
	var list kubevirtv1.VirtualMachineInstanceList
	if err := k.C.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing the VMIs of %s: %w", ns, err)
	}
	var errs []error
	for i := range list.Items {
		vmi := &list.Items[i]
		if owner := metav1.GetControllerOf(vmi); owner != nil && owner.Kind == "VirtualMachine" {
			vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: owner.Name}}
			if err := k.setRunStrategy(ctx, vm, kubevirtv1.RunStrategyHalted); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
				continue
			}
		} else if err := k.C.Delete(ctx, vmi); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting VMI %s/%s: %w", ns, vmi.Name, err))
			continue
		}
		if err := k.FinishVMI(ctx, vmi); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FinishVMI plays the node's part once a VMI is being deleted (by a stop,
// its VM's deletion or directly): the kubelet finishes the deletion of the
// launcher pods virt-controller deletes, then virt-handler reports the VMI
// Succeeded, so virt-controller drops its finalizer. It returns once the
// VMI (this UID) is gone.
func (k *KubeVirt) FinishVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	uid := vmi.UID
	return k.wait(ctx, "VMI "+vmi.Namespace+"/"+vmi.Name+" gone", func(ctx context.Context) (bool, error) {
		var live kubevirtv1.VirtualMachineInstance
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), &live); err != nil {
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}
		if live.UID != uid {
			return true, nil
		}
		if live.DeletionTimestamp == nil {
			return false, nil
		}
		pods, err := k.pods(ctx, &live)
		if err != nil {
			return false, err
		}
		alive := 0
		for i := range pods {
			p := &pods[i]
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			alive++
			if p.DeletionTimestamp != nil && p.Spec.NodeName != "" {
				if err := k.FinishPodDeletion(ctx, p); err != nil {
					return false, err
				}
			}
		}
		if alive > 0 || live.Status.NodeName == "" || live.IsFinal() {
			return false, nil
		}
		// virt-handler: the domain is gone.
		return false, k.patchVMI(ctx, &live, func(*kubevirtv1.VirtualMachineInstance) (map[string]any, error) {
			return map[string]any{"status": map[string]any{"phase": kubevirtv1.Succeeded}}, nil
		})
	})
}

// running returns the VM's running VMI and its live launcher pod, or nils
// if the VM has no VMI.
func (k *KubeVirt) running(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, *corev1.Pod, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	pod, err := k.LauncherPod(ctx, vmi)
	if err != nil {
		return nil, nil, err
	}
	return vmi, pod, nil
}

// LauncherPod returns the VMI's live launcher pod: running on the VMI's
// node (after a migration, the target), or the one pod not yet bound.
func (k *KubeVirt) LauncherPod(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (*corev1.Pod, error) {
	pods, err := k.pods(ctx, vmi)
	if err != nil {
		return nil, err
	}
	var found []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if vmi.Status.NodeName == "" || p.Spec.NodeName == vmi.Status.NodeName {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("VMI %s/%s on node %q has %d live launcher pods, want 1", vmi.Namespace, vmi.Name, vmi.Status.NodeName, len(found))
	}
	return found[0], nil
}

// pods lists the VMI's launcher pods (label kubevirt.io/created-by).
func (k *KubeVirt) pods(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := k.C.List(ctx, &list, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return nil, fmt.Errorf("listing the launcher pods of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return list.Items, nil
}

// waitPod waits for virt-controller's launcher pod of vmi: the first one
// (migration "") or the target pod of a migration.
func (k *KubeVirt) waitPod(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, migration types.UID) (*corev1.Pod, error) {
	var pod *corev1.Pod
	what := "the launcher pod of VMI " + vmi.Namespace + "/" + vmi.Name
	if migration != "" {
		what = "the migration target pod of VMI " + vmi.Namespace + "/" + vmi.Name
	}
	err := k.wait(ctx, what, func(ctx context.Context) (bool, error) {
		pods, err := k.pods(ctx, vmi)
		if err != nil {
			return false, err
		}
		for i := range pods {
			if pods[i].DeletionTimestamp == nil && types.UID(pods[i].Labels[kubevirtv1.MigrationJobLabel]) == migration {
				pod = &pods[i]
				return true, nil
			}
		}
		return false, nil
	})
	return pod, err
}

// waitVMI waits for the VMI virt-controller creates for vm (controlled by
// this VM, not being deleted).
func (k *KubeVirt) waitVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err := k.wait(ctx, "the VMI of VM "+vm.Namespace+"/"+vm.Name, func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return vmi.DeletionTimestamp == nil && metav1.IsControlledBy(vmi, vm), nil
	})
	if err != nil {
		return nil, err
	}
	return vmi, k.addVirtAPIFinalizer(ctx, vmi)
}

// addVirtAPIFinalizer adds the finalizer virt-api's mutating webhook puts
// on every new VMI (kubevirt.io/foregroundDeleteVirtualMachine), which
// virt-controller removes only once the VMI is final and all its launcher
// pods are gone. No virt-api runs here: without it a VMI would vanish
// before its pods, which no cluster does.
func (k *KubeVirt) addVirtAPIFinalizer(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	if slices.Contains(vmi.Finalizers, kubevirtv1.VirtualMachineInstanceFinalizer) {
		return nil
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": vmi.UID},
		{"op": "add", "path": "/metadata/finalizers/-", "value": kubevirtv1.VirtualMachineInstanceFinalizer},
	})
	if err != nil {
		return err
	}
	if len(vmi.Finalizers) == 0 {
		patch, err = json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": vmi.UID},
			{"op": "add", "path": "/metadata/finalizers", "value": []string{kubevirtv1.VirtualMachineInstanceFinalizer}},
		})
		if err != nil {
			return err
		}
	}
	if err := k.C.Patch(ctx, vmi, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("adding virt-api's finalizer to VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

func (k *KubeVirt) setRunStrategy(ctx context.Context, vm *kubevirtv1.VirtualMachine, s kubevirtv1.VirtualMachineRunStrategy) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runStrategy":"`+string(s)+`"}}`))
	if err := k.C.Patch(ctx, vm, patch); err != nil {
		return fmt.Errorf("setting runStrategy %s on VirtualMachine %s/%s: %w", s, vm.Namespace, vm.Name, err)
	}
	return nil
}

// Touch changes a label on obj so that every controller watching it looks
// at it again (a barrier for tests that assert something did not happen).
func Touch(ctx context.Context, c client.Client, obj client.Object) error {
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"test.ipkeeper.io/touched":"%d"}}}`, time.Now().UnixNano())))
	if err := c.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("touching %s: %w", obj.GetName(), err)
	}
	return nil
}

// SetFeatureGate turns KubeVirt's PersistentIPs feature gate on or off.
func (k *KubeVirt) SetFeatureGate(ctx context.Context, on bool) error {
	return SetPersistentIPsGate(ctx, k.C, on)
}
