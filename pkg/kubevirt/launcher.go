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

// VMIOwner is the VM that controls a VMI, or nil for a standalone VMI.
func VMIOwner(vmi metav1.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != "VirtualMachine" || ref.APIVersion != kubevirtv1.SchemeGroupVersion.String() {
		return nil
	}
	return ref
}
