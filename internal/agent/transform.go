// SPDX-License-Identifier: Apache-2.0

package agent

import (
	corev1 "k8s.io/api/core/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// trimPool drops an IPPool's managed fields (most of its size); its
// annotations hold an inline network's definition and stay.
func trimPool(obj any) (any, error) {
	if o, ok := obj.(*ipkeeperv1alpha1.IPPool); ok {
		o.ManagedFields = nil
	}
	return obj, nil
}

// trimPod keeps a pod's identity and annotations (the networks annotation
// says which IPAMClaim an attachment uses) and drops spec and status.
func trimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		p.ManagedFields = nil
		p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName}
		p.Status = corev1.PodStatus{}
	}
	return obj, nil
}
