// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
)

// reportGuest writes what virt-handler reports for a running guest: phase
// Running, selinuxContext (without it a migration fails), conditions Ready,
// LiveMigratable and AgentConnected, and one interface per attached network
// of the VMI spec (not absent, not in gone; a secondary one only once the
// pod's network-status lists it), with the addresses Multus reported.
func (k *KubeVirt) reportGuest(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, pod *corev1.Pod, gone []string) error {
	return k.patchVMI(ctx, vmi, func(live *kubevirtv1.VirtualMachineInstance) (map[string]any, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return nil, fmt.Errorf("reading pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		conds := []kubevirtv1.VirtualMachineInstanceCondition{}
		set := map[kubevirtv1.VirtualMachineInstanceConditionType]bool{
			kubevirtv1.VirtualMachineInstanceReady: true, kubevirtv1.VirtualMachineInstanceIsMigratable: true,
			kubevirtv1.VirtualMachineInstanceAgentConnected: true,
		}
		for _, c := range live.Status.Conditions {
			if !set[c.Type] {
				conds = append(conds, c)
			}
		}
		now := metav1.Now()
		for _, t := range []kubevirtv1.VirtualMachineInstanceConditionType{kubevirtv1.VirtualMachineInstanceReady,
			kubevirtv1.VirtualMachineInstanceIsMigratable, kubevirtv1.VirtualMachineInstanceAgentConnected} {
			// lastProbeTime set: a zero one is written as null, which the
			// API server prunes, and then virt-controller's JSON-patch
			// "test" of /status/conditions (its cached copy, with null)
			// fails for ever: it could never add a condition.
			conds = append(conds, kubevirtv1.VirtualMachineInstanceCondition{Type: t, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now})
		}
		return map[string]any{"status": map[string]any{
			"phase":          kubevirtv1.Running,
			"selinuxContext": "none",
			"conditions":     conds,
			"interfaces":     guestInterfaces(live, pod, gone),
		}}, nil
	})
}

func guestInterfaces(vmi *kubevirtv1.VirtualMachineInstance, pod *corev1.Pod, gone []string) []kubevirtv1.VirtualMachineInstanceNetworkInterface {
	networks := map[string]kubevirtv1.Network{}
	for _, n := range vmi.Spec.Networks {
		networks[n.Name] = n
	}
	attached := podNetworkStatus(pod)
	var out []kubevirtv1.VirtualMachineInstanceNetworkInterface
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		n, ok := networks[iface.Name]
		if !ok || iface.State == kubevirtv1.InterfaceStateAbsent || slices.Contains(gone, iface.Name) {
			continue
		}
		status := kubevirtv1.VirtualMachineInstanceNetworkInterface{
			Name: iface.Name, InterfaceName: fmt.Sprintf("eth%d", i), InfoSource: "domain, guest-agent", QueueCount: 1,
		}
		if n.Pod != nil {
			status.PodInterfaceName, status.MAC = "eth0", fakeMAC(pod, "guest-"+iface.Name)
			out = append(out, status)
			continue
		}
		podIface := kubevirt.PodInterfaceName(iface.Name)
		s, ok := attached[podIface]
		if !ok {
			continue
		}
		status.PodInterfaceName, status.MAC, status.IPs = podIface, s.Mac, s.IPs
		status.InfoSource += ", multus-status"
		if len(s.IPs) > 0 {
			status.IP = s.IPs[0]
		}
		out = append(out, status)
	}
	return out
}

// patchVMI merge-patches the VMI (whose CRD has no status subresource: a
// handler writes the object), guarded by the resourceVersion it read, and
// retries on conflicts. A merge patch, not an update: it leaves alone what
// virt-controller wrote in fields this module's KubeVirt API version may
// not know.
func (k *KubeVirt) patchVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, change func(*kubevirtv1.VirtualMachineInstance) (map[string]any, error)) error {
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		body, err := change(vmi)
		if err != nil {
			return err
		}
		meta, _ := body["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["resourceVersion"] = vmi.ResourceVersion
		body["metadata"] = meta
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		lastErr = k.C.Patch(ctx, vmi, client.RawPatch(types.MergePatchType, raw))
		if lastErr == nil || !apierrors.IsConflict(lastErr) {
			break
		}
	}
	if lastErr != nil {
		return fmt.Errorf("writing the status of VirtualMachineInstance %s/%s as virt-handler: %w", vmi.Namespace, vmi.Name, lastErr)
	}
	return nil
}
