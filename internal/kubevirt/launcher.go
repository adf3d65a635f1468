// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

const (
	// LauncherLabelValue is the value of the kubevirt.io label on virt-launcher pods.
	LauncherLabelValue = "virt-launcher"
	// VMINameLabel is set on launcher pods to the VMI name.
	VMINameLabel = kubevirtv1.DeprecatedVirtualMachineNameLabel
)

// IsLauncherPod reports whether a pod is a virt-launcher pod, and the name
// of its VMI (the kubevirt.io/domain annotation).
func IsLauncherPod(pod metav1.Object) (vmi string, ok bool) {
	if pod.GetLabels()[kubevirtv1.AppLabel] != LauncherLabelValue {
		return "", false
	}
	vmi = pod.GetAnnotations()[kubevirtv1.DomainAnnotation]
	return vmi, vmi != ""
}
