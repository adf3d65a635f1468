// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var managedFields = []metav1.ManagedFieldsEntry{{
	Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
	Time:     &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{}}}`)},
}}

func fullPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-7d9c8b6f5d-x2x9k", Namespace: "shop", UID: "0b9e1c6e-8f7a-4a59-9d0b-3f0c2a1e5d44",
			ResourceVersion: "4711",
			Labels:          map[string]string{"app": "web"},
			Annotations: map[string]string{
				"k8s.v1.cni.cncf.io/networks": `[{"name":"storage","ipam-claim-reference":"web-storage"}]`,
			},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-7d9c8b6f5d", UID: "rs-uid"}},
			ManagedFields:   managedFields,
		},
		Spec: corev1.PodSpec{
			NodeName: "worker-1",
			Containers: []corev1.Container{{
				Name: "web", Image: "registry.example/web:1.2.3", Command: []string{"/web", "--port=8080"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}},
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Volumes:        []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations:    []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.1.7",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, ContainerID: "containerd://abc"}},
		},
	}
}

func fullReservation() *ipkeeperv1alpha1.IPReservation {
	return &ipkeeperv1alpha1.IPReservation{
		TypeMeta: metav1.TypeMeta{Kind: "IPReservation", APIVersion: "ipkeeper.io/v1alpha1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "storage.10-1-2-3", UID: "5f0a3c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b", ResourceVersion: "99",
			CreationTimestamp: metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
			Labels:            map[string]string{"ipkeeper.io/network": "storage", "ipkeeper.io/owner-kind": "Pod"},
			Annotations:       map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			ManagedFields:     managedFields,
		},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: "storage", Network: "storage", IP: "10.1.2.3",
			Owner:         ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "shop", Name: "web-7d9c8b6f5d-x2x9k", UID: "0b9e1c6e-8f7a-4a59-9d0b-3f0c2a1e5d44"},
			InterfaceName: "net1", ContainerID: "3f1e9a", Node: "worker-1",
		},
	}
}

func TestTrimPod(t *testing.T) {
	want := fullPod()
	want.ManagedFields = nil
	want.Spec = corev1.PodSpec{NodeName: "worker-1"}
	want.Status = corev1.PodStatus{}

	tests := []struct {
		name string
		in   any
		want any
	}{
		{"full pod", fullPod(), want},
		{"already trimmed", want.DeepCopy(), want},
		{"other types pass through", fullReservation(), fullReservation()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := trimPod(tt.in)
			if err != nil {
				t.Fatalf("trimPod: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("trimPod =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}

	// Spelled out, so a change to the expectation above cannot hide what
	// the agent relies on.
	got, _ := trimPod(fullPod())
	p := got.(*corev1.Pod)
	if p.Name != "web-7d9c8b6f5d-x2x9k" || p.Namespace != "shop" || p.UID != "0b9e1c6e-8f7a-4a59-9d0b-3f0c2a1e5d44" || p.Spec.NodeName != "worker-1" {
		t.Errorf("identity lost: %s/%s uid %s node %q", p.Namespace, p.Name, p.UID, p.Spec.NodeName)
	}
	if p.Annotations["k8s.v1.cni.cncf.io/networks"] == "" {
		t.Error("networks annotation dropped")
	}
	if p.ManagedFields != nil || p.Spec.Containers != nil || p.Spec.InitContainers != nil || p.Spec.Volumes != nil || !reflect.DeepEqual(p.Status, corev1.PodStatus{}) {
		t.Errorf("not trimmed: managedFields %v containers %v status %+v", p.ManagedFields, p.Spec.Containers, p.Status)
	}
}

func fullPool() *ipkeeperv1alpha1.IPPool {
	return &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{
			Name: "storage", UID: "7c2e4a1b-3d5f-4a6b-9c8d-1e2f3a4b5c6d", ResourceVersion: "12",
			Annotations:   map[string]string{ipkeeperv1alpha1.InlineDefinitionAnnotation: `{"ranges":[[{"subnet":"10.1.0.0/16"}]]}`},
			ManagedFields: managedFields,
		},
	}
}

// The cache keeps IPPools and NADs with trimCached: managed fields go;
// a pool's annotations (an inline network's definition) and a NAD's
// config, which the agent reads, stay.
func TestTrimCached(t *testing.T) {
	want := fullPool()
	want.ManagedFields = nil
	nad := func() *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "blue", ManagedFields: managedFields},
			Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"blue","allowPersistentIPs":true}`},
		}
	}
	wantNAD := nad()
	wantNAD.ManagedFields = nil

	tests := []struct {
		name string
		in   any
		want any
	}{
		{"pool: managed fields go, annotations (its definition) stay", fullPool(), want},
		{"already trimmed", want.DeepCopy(), want},
		{"NAD: managed fields go, its config stays", nad(), wantNAD},
		{"not an object: passes through", "not an object", "not an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := trimCached(tt.in)
			if err != nil {
				t.Fatalf("trimCached: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("trimCached =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}
