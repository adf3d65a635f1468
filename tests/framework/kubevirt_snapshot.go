// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clonev1beta1 "kubevirt.io/api/clone/v1beta1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	snapshotv1beta1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeVirt's clone, snapshot and restore, as a user asks for them: the
// objects are written here and virt-controller's own clone, snapshot and
// restore controllers do the rest (a VM with only a containerDisk needs
// no CSI snapshot or CDI). The VMs are snapshotted stopped: a running
// one's guest would be frozen by virt-handler, which is simulated.

// VMRef refers to a VirtualMachine of the object's namespace.
func VMRef(name string) corev1.TypedLocalObjectReference {
	return corev1.TypedLocalObjectReference{APIGroup: ptr.To(kubevirtv1.GroupVersion.Group), Kind: "VirtualMachine", Name: name}
}

// Clone clones a VM into a new VM named target (a VirtualMachineClone
// named name) and returns the target once the clone succeeded.
func (k *KubeVirt) Clone(ctx context.Context, vm *kubevirtv1.VirtualMachine, name, target string) (*kubevirtv1.VirtualMachine, error) {
	clone := &clonev1beta1.VirtualMachineClone{
		ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: name},
		Spec:       clonev1beta1.VirtualMachineCloneSpec{Source: ptr.To(VMRef(vm.Name)), Target: ptr.To(VMRef(target))},
	}
	if err := k.C.Create(ctx, clone); err != nil {
		return nil, fmt.Errorf("creating VirtualMachineClone %s/%s: %w", clone.Namespace, name, err)
	}
	if err := k.wait(ctx, "VirtualMachineClone "+vm.Namespace+"/"+name+" to succeed", func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(clone), clone); err != nil {
			return false, err
		}
		if clone.Status.Phase == clonev1beta1.Failed {
			return false, fmt.Errorf("VirtualMachineClone %s/%s failed: %+v", clone.Namespace, name, clone.Status.Conditions)
		}
		return clone.Status.Phase == clonev1beta1.Succeeded, nil
	}); err != nil {
		return nil, err
	}
	out := &kubevirtv1.VirtualMachine{}
	if err := k.C.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: target}, out); err != nil {
		return nil, fmt.Errorf("reading the clone %s/%s: %w", vm.Namespace, target, err)
	}
	return out, nil
}

// Snapshot takes a VirtualMachineSnapshot named name of a VM and returns
// once it is ready to use.
func (k *KubeVirt) Snapshot(ctx context.Context, vm *kubevirtv1.VirtualMachine, name string) error {
	snap := &snapshotv1beta1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: name},
		Spec:       snapshotv1beta1.VirtualMachineSnapshotSpec{Source: VMRef(vm.Name)},
	}
	if err := k.C.Create(ctx, snap); err != nil {
		return fmt.Errorf("creating VirtualMachineSnapshot %s/%s: %w", snap.Namespace, name, err)
	}
	return k.wait(ctx, "VirtualMachineSnapshot "+vm.Namespace+"/"+name+" to be ready", func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(snap), snap); err != nil {
			return false, err
		}
		if snap.Status != nil && snap.Status.Phase == snapshotv1beta1.Failed {
			return false, fmt.Errorf("VirtualMachineSnapshot %s/%s failed: %+v", snap.Namespace, name, snap.Status.Conditions)
		}
		return snap.Status != nil && ptr.Deref(snap.Status.ReadyToUse, false), nil
	})
}

// Restore restores the VirtualMachineSnapshot snapshot onto the VM named
// target (the stopped source itself, or a new VM) through a
// VirtualMachineRestore named name, and returns the VM once the restore
// completed.
func (k *KubeVirt) Restore(ctx context.Context, ns, name, snapshot, target string) (*kubevirtv1.VirtualMachine, error) {
	r := &snapshotv1beta1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       snapshotv1beta1.VirtualMachineRestoreSpec{Target: VMRef(target), VirtualMachineSnapshotName: snapshot},
	}
	if err := k.C.Create(ctx, r); err != nil {
		return nil, fmt.Errorf("creating VirtualMachineRestore %s/%s: %w", ns, name, err)
	}
	if err := k.wait(ctx, "VirtualMachineRestore "+ns+"/"+name+" to complete", func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
			return false, err
		}
		if r.Status == nil {
			return false, nil
		}
		for _, c := range r.Status.Conditions {
			if c.Type == snapshotv1beta1.ConditionFailure && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("VirtualMachineRestore %s/%s failed: %s: %s", ns, name, c.Reason, c.Message)
			}
		}
		return ptr.Deref(r.Status.Complete, false), nil
	}); err != nil {
		return nil, err
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := k.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: target}, vm); err != nil {
		return nil, fmt.Errorf("reading the restored VM %s/%s: %w", ns, target, err)
	}
	return vm, nil
}

// DeleteSnapshot deletes a VirtualMachineSnapshot (and so its content)
// and the VirtualMachineRestores of it.
func (k *KubeVirt) DeleteSnapshot(ctx context.Context, ns, name string) error {
	var restores snapshotv1beta1.VirtualMachineRestoreList
	if err := k.C.List(ctx, &restores, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing VirtualMachineRestores of %s: %w", ns, err)
	}
	for i := range restores.Items {
		if r := &restores.Items[i]; r.Spec.VirtualMachineSnapshotName == name {
			if err := k.C.Delete(ctx, r); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting VirtualMachineRestore %s/%s: %w", ns, r.Name, err)
			}
		}
	}
	snap := &snapshotv1beta1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k.C.Delete(ctx, snap); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VirtualMachineSnapshot %s/%s: %w", ns, name, err)
	}
	return nil
}
