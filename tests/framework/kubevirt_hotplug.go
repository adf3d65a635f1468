// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// Hotplug adds a secondary network to a VM the way a user does (a JSON
// patch appending the interface and the network). If the VM runs, it
// waits for virt-controller to add it to the live launcher pod's networks
// annotation, attaches it (Multus' dynamic networks controller) and reports
// it in the guest (virt-handler); it returns the live launcher pod, or nil
// for a stopped VM.
func (k *KubeVirt) Hotplug(ctx context.Context, vm *kubevirtv1.VirtualMachine, n VMNetwork) (*corev1.Pod, error) {
	var spec kubevirtv1.VirtualMachineInstanceSpec
	addNetwork(&spec, n)
	patch, err := json.Marshal([]map[string]any{
		{"op": "add", "path": "/spec/template/spec/domain/devices/interfaces/-", "value": spec.Domain.Devices.Interfaces[0]},
		{"op": "add", "path": "/spec/template/spec/networks/-", "value": spec.Networks[0]},
	})
	if err != nil {
		return nil, err
	}
	if err := k.C.Patch(ctx, vm, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return nil, fmt.Errorf("hot-plugging network %s into VirtualMachine %s/%s: %w", n.Name, vm.Namespace, vm.Name, err)
	}
	vmi, pod, err := k.running(ctx, vm)
	if err != nil || vmi == nil {
		return nil, err
	}
	iface := kubevirt.PodInterfaceName(n.Name)
	if err := k.waitPodInterface(ctx, pod, iface, true); err != nil {
		return nil, err
	}
	addrs, err := k.run(ctx, pod, []string{iface})
	if err != nil {
		return nil, err
	}
	if err := k.writeNetworkStatus(ctx, pod, []string{iface}, addrs); err != nil {
		return nil, err
	}
	if err := k.reportGuest(ctx, vmi, pod, nil); err != nil {
		return nil, err
	}
	return pod, nil
}

// Unplug hot-unplugs a network from a VM the way a user does (state:
// absent on its interface). If the VM runs, it waits for virt-controller
// to drop it from the live launcher pod's networks annotation, detaches it
// (Multus) and removes it from the guest (virt-handler). It returns once
// virt-controller has removed the interface and network from the VM spec.
func (k *KubeVirt) Unplug(ctx context.Context, vm *kubevirtv1.VirtualMachine, network string) error {
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		return fmt.Errorf("reading VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	idx := -1
	for i, iface := range vm.Spec.Template.Spec.Domain.Devices.Interfaces {
		if iface.Name == network {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("VirtualMachine %s/%s has no interface %q", vm.Namespace, vm.Name, network)
	}
	path := fmt.Sprintf("/spec/template/spec/domain/devices/interfaces/%d", idx)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path + "/name", "value": network},
		{"op": "add", "path": path + "/state", "value": kubevirtv1.InterfaceStateAbsent},
	})
	if err != nil {
		return err
	}
	if err := k.C.Patch(ctx, vm, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("unplugging network %s from VirtualMachine %s/%s: %w", network, vm.Namespace, vm.Name, err)
	}
	vmi, pod, err := k.running(ctx, vm)
	if err != nil {
		return err
	}
	if vmi != nil {
		iface := kubevirt.PodInterfaceName(network)
		if err := k.waitPodInterface(ctx, pod, iface, false); err != nil {
			return err
		}
		if k.Kubelet.Detach != nil {
			if err := k.Kubelet.Detach(ctx, pod, []string{iface}); err != nil {
				return fmt.Errorf("detaching %s from pod %s/%s: %w", iface, pod.Namespace, pod.Name, err)
			}
		}
		if err := k.writeNetworkStatus(ctx, pod, nil, nil); err != nil {
			return err
		}
		if err := k.reportGuest(ctx, vmi, pod, []string{network}); err != nil {
			return err
		}
	}
	return k.wait(ctx, "VM "+vm.Name+" spec without "+network, func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return false, err
		}
		for _, n := range vm.Spec.Template.Spec.Networks {
			if n.Name == network {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitPodInterface waits until virt-controller has (or no longer has) the
// pod interface in the pod's networks annotation.
func (k *KubeVirt) waitPodInterface(ctx context.Context, pod *corev1.Pod, iface string, present bool) error {
	what := fmt.Sprintf("interface %s in the networks annotation of pod %s = %t", iface, pod.Name, present)
	return k.wait(ctx, what, func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
		if err != nil {
			return false, err
		}
		listed := slices.ContainsFunc(elems, func(e multus.Element) bool { return e.Interface == iface })
		return listed == present, nil
	})
}
