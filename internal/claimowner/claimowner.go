// SPDX-License-Identifier: Apache-2.0

package claimowner

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

const (
	// ManagedByLabel marks claims ipkeeper-controller created or adopted.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "ipkeeper-controller"
	// OwnerUIDLabel records the owner's UID. It outlives the owner
	// reference, which orphan deletion removes.
	OwnerUIDLabel = "ipkeeper.io/owner-uid"
	// OwnerAnnotation records the owner as "<Kind>/<name>" (names can be
	// longer than a label value allows).
	OwnerAnnotation = "ipkeeper.io/owner"

	// KindVM and KindVMI are the owner kinds a claim can have.
	KindVM  = "VirtualMachine"
	KindVMI = "VirtualMachineInstance"
)

// apiVersion is the KubeVirt API version owner references name.
var apiVersion = kubevirtv1.SchemeGroupVersion.String()

// Owner identifies the VM or standalone VMI a claim belongs to.
type Owner struct {
	Kind string
	Name string
	UID  types.UID
	// Orphaned is set when the owner comes from the labels because orphan
	// deletion removed the controller reference: the owner VM is gone, and
	// an owner-less VMI of its name is what that deletion left running.
	Orphaned bool
}

func (o Owner) String() string { return o.Kind + " " + o.Name + " (uid " + string(o.UID) + ")" }

// Of returns the owner of a claim: its controller reference to a VM or VMI,
// else (after orphan deletion removed the reference) what
// ipkeeper-controller recorded in its labels and annotation. ok is false
// for claims no VM or VMI owns: claims made by other tools, which any pod
// of the namespace may use.
func Of(claim metav1.Object) (Owner, bool) {
	if ref := metav1.GetControllerOf(claim); ref != nil {
		if ref.APIVersion == apiVersion && (ref.Kind == KindVM || ref.Kind == KindVMI) {
			return Owner{Kind: ref.Kind, Name: ref.Name, UID: ref.UID}, true
		}
		return Owner{}, false
	}
	if !Managed(claim) {
		return Owner{}, false
	}
	kind, name, ok := recorded(claim)
	uid := claim.GetLabels()[OwnerUIDLabel]
	if !ok || uid == "" || (kind != KindVM && kind != KindVMI) {
		return Owner{}, false
	}
	return Owner{Kind: kind, Name: name, UID: types.UID(uid), Orphaned: true}, true
}

// Managed reports whether a claim carries ipkeeper-controller's
// managed-by label.
func Managed(claim metav1.Object) bool { return claim.GetLabels()[ManagedByLabel] == ManagedByValue }

// Record writes owner into a claim's labels and annotation, where Of finds
// it once orphan deletion removed the controller reference.
func Record(claim metav1.Object, owner Owner) {
	labels, annotations := claim.GetLabels(), claim.GetAnnotations()
	if labels == nil {
		labels = map[string]string{}
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	labels[ManagedByLabel] = ManagedByValue
	labels[OwnerUIDLabel] = string(owner.UID)
	annotations[OwnerAnnotation] = owner.Kind + "/" + owner.Name
	claim.SetLabels(labels)
	claim.SetAnnotations(annotations)
}

// RecordedName is the owner name Record wrote on a claim, whatever its
// controller reference says; ok is false when there is none.
func RecordedName(claim metav1.Object) (name string, ok bool) {
	_, name, ok = recorded(claim)
	return name, ok
}

// recorded parses the owner annotation Record writes.
func recorded(claim metav1.Object) (kind, name string, ok bool) {
	kind, name, ok = strings.Cut(claim.GetAnnotations()[OwnerAnnotation], "/")
	return kind, name, ok && name != ""
}

// VMOf is the VM that controls a VMI, or nil for a standalone VMI.
func VMOf(vmi metav1.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != KindVM || ref.APIVersion != apiVersion {
		return nil
	}
	return ref
}

// Launcher is what a virt-launcher pod runs: a VMI and, unless the VMI is
// standalone, the VM controlling it.
type Launcher struct {
	VMIName string
	VMIUID  types.UID
	// VMUID is empty for a standalone VMI.
	VMUID types.UID
}

// LauncherOf describes the launcher of vmi.
func LauncherOf(vmi metav1.Object) Launcher {
	l := Launcher{VMIName: vmi.GetName(), VMIUID: vmi.GetUID()}
	if vm := VMOf(vmi); vm != nil {
		l.VMUID = vm.UID
	}
	return l
}

// Runs reports whether launcher l runs this owner: its VMI, or a VMI
// controlled by its VM, or, once orphan deletion removed the VM, the
// owner-less VMI of the VM's name it left. This is the rule that lets a pod
// use a claim.
func (o Owner) Runs(l Launcher) bool {
	switch o.Kind {
	case KindVMI:
		return l.VMIUID != "" && l.VMIUID == o.UID
	case KindVM:
		if l.VMUID == "" {
			return o.Orphaned && l.VMIUID != "" && l.VMIName == o.Name
		}
		return l.VMUID == o.UID
	}
	return false
}

// RunsVMI reports whether a launcher pod of the VMI vmiName (uid vmiUID)
// runs this owner, as far as the pod itself tells: for a VMI owner by the
// VMI's UID; for a VM owner by the VMI's name, which KubeVirt gives a VM's
// VMI (also the owner-less VMI an orphan deletion of the VM leaves). The
// VM's UID is on the VMI only; a pod's word on its VMI is KubeVirt's
// controller's, since the launcher-identity admission policy lets nobody
// else write it.
func (o Owner) RunsVMI(vmiName string, vmiUID types.UID) bool {
	switch o.Kind {
	case KindVMI:
		return vmiUID != "" && vmiUID == o.UID && vmiName == o.Name
	case KindVM:
		return vmiName != "" && vmiName == o.Name
	}
	return false
}

// RunsPod reports whether pod launches a VMI of this owner, as far as the
// pod tells (PodVMI, RunsVMI): the pods that may use the owner's claims.
func (o Owner) RunsPod(pod metav1.Object) bool {
	name, uid, ok := PodVMI(pod)
	return ok && o.RunsVMI(name, uid)
}

// HasVMI reports whether vmi is one of the owner's: a VMI the owner runs
// (Runs), or an owner-less VMI of a VM owner's name, which is what orphan
// deletion of that VM leaves, also while the claim still has its controller
// reference (the garbage collector removes references one object at a
// time). While such a VMI exists it may start a launcher pod that uses the
// claim (a migration target, for example).
func (o Owner) HasVMI(vmi metav1.Object) bool {
	if o.Runs(LauncherOf(vmi)) {
		return true
	}
	return o.Kind == KindVM && vmi.GetName() == o.Name && metav1.GetControllerOf(vmi) == nil
}

// PodVMI returns the name and UID of the VMI a pod says it launches: its
// controller reference to a VMI (what virt-controller sets), else
// KubeVirt's kubevirt.io/created-by label with the kubevirt.io/domain
// annotation. ok is false for a pod that claims no VMI.
func PodVMI(pod metav1.Object) (name string, uid types.UID, ok bool) {
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == KindVMI && ref.APIVersion == apiVersion {
		return ref.Name, ref.UID, true
	}
	uid = types.UID(pod.GetLabels()[kubevirtv1.CreatedByLabel])
	name = pod.GetAnnotations()[kubevirtv1.DomainAnnotation]
	return name, uid, uid != "" && name != ""
}

// LauncherVMI returns the VMI a pod launches, by what only KubeVirt's
// controller writes on it and the launcher-identity admission policy keeps
// everyone else from writing or changing: its controller reference to a
// VirtualMachineInstance (controller true, KubeVirt's API version) and the
// kubevirt.io/created-by label, which must carry that reference's UID. It
// is the identity a pod must have to use a VM's or VMI's claim (RunsVMI):
// a pod whose reference was removed (the garbage collector's orphaning of
// its VMI; an edit), or whose label and reference disagree, launches
// nothing as far as claims go, whatever its kubevirt.io/domain annotation
// says. problem says what is missing or inconsistent, "" when ok.
func LauncherVMI(pod metav1.Object) (name string, uid types.UID, problem string) {
	var ref *metav1.OwnerReference
	for i, r := range pod.GetOwnerReferences() {
		if r.Kind == KindVMI && strings.HasPrefix(r.APIVersion, kubevirtv1.SchemeGroupVersion.Group+"/") {
			if ref != nil {
				return "", "", "it has more than one reference to a VirtualMachineInstance"
			}
			ref = &pod.GetOwnerReferences()[i]
		}
	}
	createdBy := types.UID(pod.GetLabels()[kubevirtv1.CreatedByLabel])
	switch {
	case ref == nil:
		return "", "", "this pod is no virt-launcher pod (no controller reference to a VirtualMachineInstance)"
	case ref.Controller == nil || !*ref.Controller || ref.APIVersion != apiVersion:
		return "", "", fmt.Sprintf("its reference to VirtualMachineInstance %s is not a %s controller reference", ref.Name, apiVersion)
	case ref.Name == "" || ref.UID == "":
		return "", "", "its controller reference to a VirtualMachineInstance lacks a name or uid"
	case createdBy != ref.UID:
		return "", "", fmt.Sprintf("its controller reference to VirtualMachineInstance %s (uid %s) disagrees with its %s label (%q)",
			ref.Name, ref.UID, kubevirtv1.CreatedByLabel, createdBy)
	}
	return ref.Name, ref.UID, ""
}

// NotRunBy explains that a pod may not use a claim of owner; it names the
// claim and its owner (same namespace as the pod, so nothing about other
// tenants is revealed).
func NotRunBy(claimNamespace, claimName string, owner Owner, why string) error {
	return fmt.Errorf("IPAMClaim %s/%s belongs to %s; only that %s's virt-launcher pods may use it, and %s",
		claimNamespace, claimName, owner, owner.Kind, why)
}
