// SPDX-License-Identifier: Apache-2.0

package claimowner

import (
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestOwnerOf(t *testing.T) {
	vmRef := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1", UID: "u1", Controller: ptr.To(true)}
	tests := []struct {
		name  string
		claim ipamclaimsv1alpha1.IPAMClaim
		want  Owner
		ok    bool
	}{
		{"controller reference", ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{vmRef}}}, Owner{Kind: "VirtualMachine", Name: "vm1", UID: "u1"}, true},
		{"orphaned, ours by labels", ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{ManagedByLabel: ManagedByValue, OwnerUIDLabel: "u2"},
			Annotations: map[string]string{OwnerAnnotation: "VirtualMachine/vm.dotted"},
		}}, Owner{Kind: "VirtualMachine", Name: "vm.dotted", UID: "u2", Orphaned: true}, true},
		{"not ours", ipamclaimsv1alpha1.IPAMClaim{}, Owner{}, false},
		{"controlled by something else", ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "u", Controller: ptr.To(true)}}}}, Owner{}, false},
		{"labels without a valid owner annotation", ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{ManagedByLabel: ManagedByValue, OwnerUIDLabel: "u2"}, Annotations: map[string]string{OwnerAnnotation: "Pod/x"},
		}}, Owner{}, false},
	}
	for _, tt := range tests {
		got, ok := Of(&tt.claim)
		if ok != tt.ok || got != tt.want {
			t.Errorf("%s: Of() = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestRuns(t *testing.T) {
	vm := Owner{Kind: KindVM, Name: "vm1", UID: "vm-uid"}
	vmi := Owner{Kind: KindVMI, Name: "vmi1", UID: "vmi-uid"}
	orphaned := Owner{Kind: KindVM, Name: "vm1", UID: "vm-uid", Orphaned: true}
	tests := []struct {
		name  string
		owner Owner
		l     Launcher
		want  bool
	}{
		{"launcher of the VM's VMI", vm, Launcher{VMIUID: "x", VMUID: "vm-uid"}, true},
		{"launcher of another VM's VMI", vm, Launcher{VMIUID: "x", VMUID: "other"}, false},
		{"launcher of a standalone VMI, VM owner", vm, Launcher{VMIName: "vm1", VMIUID: "vm-uid"}, false},
		{"owner-less VMI of the VM's name, the VM orphan-deleted", orphaned, Launcher{VMIName: "vm1", VMIUID: "x"}, true},
		{"owner-less VMI of another name, the VM orphan-deleted", orphaned, Launcher{VMIName: "vm2", VMIUID: "x"}, false},
		{"VMI of another VM, the VM orphan-deleted", orphaned, Launcher{VMIName: "vm1", VMIUID: "x", VMUID: "new-vm"}, false},
		{"launcher of the standalone VMI", vmi, Launcher{VMIUID: "vmi-uid"}, true},
		{"launcher of another VMI", vmi, Launcher{VMIUID: "other", VMUID: "vmi-uid"}, false},
		{"no launcher", vm, Launcher{}, false},
		{"unknown owner kind", Owner{Kind: "Pod", UID: "vm-uid"}, Launcher{VMIUID: "vm-uid", VMUID: "vm-uid"}, false},
	}
	for _, tt := range tests {
		if got := tt.owner.Runs(tt.l); got != tt.want {
			t.Errorf("%s: Runs() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestHasVMI(t *testing.T) {
	vmOwner := Owner{Kind: KindVM, Name: "vm1", UID: "vm-uid"}
	vmi := func(name string, uid types.UID, controller *metav1.OwnerReference) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
		if controller != nil {
			v.OwnerReferences = []metav1.OwnerReference{*controller}
		}
		return v
	}
	ref := func(uid types.UID) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: KindVM, Name: "vm1", UID: uid, Controller: ptr.To(true)}
	}
	tests := []struct {
		name  string
		vmi   *kubevirtv1.VirtualMachineInstance
		owner Owner
		want  bool
	}{
		{"the VM's own VMI", vmi("vm1", "i1", ref("vm-uid")), vmOwner, true},
		{"the VMI of a re-created VM of the same name is not the old VM's", vmi("vm1", "i2", ref("other-vm")), vmOwner, false},
		{"an owner-less VMI of the VM's name is what orphan deletion left", vmi("vm1", "i3", nil), vmOwner, true},
		{"an owner-less VMI of another name", vmi("vm2", "i4", nil), vmOwner, false},
		{"a standalone VMI is its own user", vmi("vm1", "vmi-uid", nil), Owner{Kind: KindVMI, Name: "vm1", UID: "vmi-uid"}, true},
		{"a re-created standalone VMI is not the old one", vmi("vm1", "new", nil), Owner{Kind: KindVMI, Name: "vm1", UID: "old"}, false},
	}
	for _, tt := range tests {
		if got := tt.owner.HasVMI(tt.vmi); got != tt.want {
			t.Errorf("%s: HasVMI() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRecord(t *testing.T) {
	owner := Owner{Kind: KindVM, Name: "vm.dotted", UID: "u2"}
	var claim ipamclaimsv1alpha1.IPAMClaim
	Record(&claim, owner)
	if !Managed(&claim) {
		t.Errorf("Record() left the claim unmanaged: %v", claim.Labels)
	}
	if name, ok := RecordedName(&claim); !ok || name != "vm.dotted" {
		t.Errorf("RecordedName() = %q, %v; want vm.dotted", name, ok)
	}
	// Once orphan deletion removes the controller reference, Of reads
	// what Record wrote.
	owner.Orphaned = true
	if got, ok := Of(&claim); !ok || got != owner {
		t.Errorf("Of() after Record() = %+v, %v; want %+v", got, ok, owner)
	}
	if _, ok := RecordedName(&ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{OwnerAnnotation: "VirtualMachine/"}}}); ok {
		t.Error("RecordedName() of an owner annotation without a name")
	}
}

func TestPodVMI(t *testing.T) {
	vmiRef := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: KindVMI, Name: "vm1", UID: "vmi-uid", Controller: ptr.To(true)}
	tests := []struct {
		name    string
		pod     corev1.Pod
		wantUID string
		ok      bool
	}{
		{"controller reference", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{vmiRef}}}, "vmi-uid", true},
		{"created-by label with the domain annotation", corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{"kubevirt.io/created-by": "vmi-uid"}, Annotations: map[string]string{"kubevirt.io/domain": "vm1"}}}, "vmi-uid", true},
		{"plain pod", corev1.Pod{}, "", false},
		{"controlled by a ReplicaSet", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "vmi-uid", Controller: ptr.To(true)}}}}, "", false},
	}
	for _, tt := range tests {
		_, uid, ok := PodVMI(&tt.pod)
		if ok != tt.ok || string(uid) != tt.wantUID {
			t.Errorf("%s: PodVMI() = %q, %v; want %q, %v", tt.name, uid, ok, tt.wantUID, tt.ok)
		}
	}
}

func TestLauncherVMI(t *testing.T) {
	ref := func(change func(*metav1.OwnerReference)) []metav1.OwnerReference {
		r := metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: KindVMI, Name: "vm1", UID: "vmi-uid", Controller: ptr.To(true)}
		if change != nil {
			change(&r)
		}
		return []metav1.OwnerReference{r}
	}
	createdBy := map[string]string{kubevirtv1.CreatedByLabel: "vmi-uid"}
	tests := []struct {
		name    string
		meta    metav1.ObjectMeta
		want    string // the VMI's name; "" when problem
		problem string
	}{
		{"what virt-controller writes", metav1.ObjectMeta{OwnerReferences: ref(nil), Labels: createdBy}, "vm1", ""},
		{"the label and the domain annotation alone", metav1.ObjectMeta{Labels: createdBy, Annotations: map[string]string{kubevirtv1.DomainAnnotation: "vm1"}},
			"", "no controller reference"},
		{"no created-by label", metav1.ObjectMeta{OwnerReferences: ref(nil)}, "", "disagrees with its kubevirt.io/created-by label"},
		{"created-by of another VMI", metav1.ObjectMeta{OwnerReferences: ref(nil), Labels: map[string]string{kubevirtv1.CreatedByLabel: "other"}},
			"", "disagrees"},
		{"not a controller reference", metav1.ObjectMeta{OwnerReferences: ref(func(r *metav1.OwnerReference) { r.Controller = nil }), Labels: createdBy},
			"", "not a kubevirt.io/v1 controller reference"},
		{"another API version", metav1.ObjectMeta{OwnerReferences: ref(func(r *metav1.OwnerReference) { r.APIVersion = "kubevirt.io/v2" }), Labels: createdBy},
			"", "not a kubevirt.io/v1 controller reference"},
		{"two references to VMIs", metav1.ObjectMeta{OwnerReferences: append(ref(nil), ref(func(r *metav1.OwnerReference) {
			r.Name, r.Controller = "vm2", nil
		})...), Labels: createdBy}, "", "more than one"},
	}
	for _, tt := range tests {
		name, _, problem := LauncherVMI(&corev1.Pod{ObjectMeta: tt.meta})
		if name != tt.want || (tt.problem == "") != (problem == "") || !strings.Contains(problem, tt.problem) {
			t.Errorf("%s: LauncherVMI() = %q, problem %q; want %q, problem containing %q", tt.name, name, problem, tt.want, tt.problem)
		}
	}
}
