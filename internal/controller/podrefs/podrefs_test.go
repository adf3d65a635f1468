// SPDX-License-Identifier: Apache-2.0

package podrefs

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// Only pods' metadata is the shared view: whole pods, and other kinds'
// metadata, are not.
func TestIsPodMetadata(t *testing.T) {
	cm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	for _, tt := range []struct {
		obj  any
		want bool
	}{
		{Metadata(), true},
		{MetadataList(), true},
		{&corev1.Pod{}, false},
		{&corev1.PodList{}, false},
		{cm, false},
		{&metav1.PartialObjectMetadata{}, false},
	} {
		if got := IsPodMetadata(tt.obj); got != tt.want {
			t.Errorf("IsPodMetadata(%T %v) = %v, want %v", tt.obj, tt.obj, got, tt.want)
		}
	}
}

// A pod asks for each claim its networks annotation references, in its
// namespace; a pod that references none asks for nothing.
func TestClaimRequests(t *testing.T) {
	pod := Metadata()
	pod.Namespace, pod.Name = "blue", "virt-launcher-vm1-abcde"
	pod.Annotations = map[string]string{multus.Annotation: `[{"name":"net1","ipam-claim-reference":"vm1.net1"},{"name":"net2","namespace":"blue","ipam-claim-reference":"vm1.net2"},{"name":"net3"}]`}
	reqs := ClaimRequests(context.Background(), pod)
	if len(reqs) != 2 || reqs[0].Namespace != "blue" || reqs[0].Name != "vm1.net1" || reqs[1].Name != "vm1.net2" {
		t.Errorf("ClaimRequests = %v, want blue/vm1.net1 and blue/vm1.net2", reqs)
	}
	if got := Claims(pod); len(got) != 2 {
		t.Errorf("Claims = %v, want the two references", got)
	}
	pod.Annotations = nil
	if reqs := ClaimRequests(context.Background(), pod); len(reqs) != 0 {
		t.Errorf("ClaimRequests of a pod without references = %v, want none", reqs)
	}
}

func TestMetadataChangedDropsStatusOnlyUpdates(t *testing.T) {
	pod := func(rv string) *metav1.PartialObjectMetadata {
		p := Metadata()
		p.Namespace, p.Name, p.UID, p.ResourceVersion = "ns", "virt-launcher-vm1-abcde", "uid-1", rv
		p.Labels = map[string]string{"kubevirt.io": "virt-launcher"}
		p.Annotations = map[string]string{multus.Annotation: `[{"name":"blue","ipam-claim-reference":"vm1.blue"}]`}
		return p
	}
	changed := func(old, cur *metav1.PartialObjectMetadata) bool {
		return MetadataChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur})
	}
	if changed(pod("1"), pod("2")) {
		t.Error("an update changing only the pod's resourceVersion (its status) was let through")
	}
	for name, edit := range map[string]func(*metav1.PartialObjectMetadata){
		"a label":      func(p *metav1.PartialObjectMetadata) { p.Labels["kubevirt.io/migrationJobUID"] = "m1" },
		"annotations":  func(p *metav1.PartialObjectMetadata) { p.Annotations[multus.Annotation] = `[]` },
		"its deletion": func(p *metav1.PartialObjectMetadata) { p.DeletionTimestamp = &metav1.Time{} },
		"its owners": func(p *metav1.PartialObjectMetadata) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "VirtualMachineInstance", Name: "vm1", UID: "vmi-1"}}
		},
	} {
		cur := pod("3")
		edit(cur)
		if !changed(pod("2"), cur) {
			t.Errorf("an update of %s was dropped", name)
		}
	}
}
