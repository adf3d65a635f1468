// SPDX-License-Identifier: Apache-2.0

package agent

import (
	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trimCached drops the managed fields (most of an object's size) of what
// the cache keeps without a transform of its own: IPPools (their
// annotations hold an inline network's definition and stay) and NADs.
func trimCached(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
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
