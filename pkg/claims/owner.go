package claims

import (
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

const (
	// Finalizer keeps a claim (and so the VM's addresses) until no VMI or
	// launcher pod uses it; the name is the one existing tools use.
	Finalizer = "kubevirt.io/persistent-ipam"

	// ManagedByLabel marks claims this controller created or adopted.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "ipkeeper-controller"
	// OwnerUIDLabel records the owner's UID. It outlives the owner
	// reference, which orphan deletion removes.
	OwnerUIDLabel = "ipkeeper.io/owner-uid"
	// OwnerAnnotation records the owner as "<Kind>/<name>" (names can be
	// longer than a label value allows).
	OwnerAnnotation = "ipkeeper.io/owner"
	// NetworkAnnotation records the KubeVirt logical network name, which a
	// hashed claim name no longer shows.
	NetworkAnnotation = "ipkeeper.io/logical-network"

	kindVM  = "VirtualMachine"
	kindVMI = "VirtualMachineInstance"
)

// Owner identifies the VM or standalone VMI a claim belongs to.
type Owner struct {
	Kind string
	Name string
	UID  types.UID
}

func (o Owner) String() string { return o.Kind + " " + o.Name + " (uid " + string(o.UID) + ")" }

// ownerOf returns the owner of a claim: its controller reference to a VM or
// VMI, else (after orphan deletion removed the reference) what this
// controller recorded in labels and annotations. ok is false for claims that
// are not ours to release.
func ownerOf(claim *ipamclaimsv1alpha1.IPAMClaim) (Owner, bool) {
	if ref := metav1.GetControllerOf(claim); ref != nil {
		if ref.APIVersion == kubevirtv1.SchemeGroupVersion.String() && (ref.Kind == kindVM || ref.Kind == kindVMI) {
			return Owner{Kind: ref.Kind, Name: ref.Name, UID: ref.UID}, true
		}
		return Owner{}, false
	}
	if claim.Labels[ManagedByLabel] != ManagedByValue {
		return Owner{}, false
	}
	kind, name, ok := strings.Cut(claim.Annotations[OwnerAnnotation], "/")
	uid := claim.Labels[OwnerUIDLabel]
	if !ok || name == "" || uid == "" || (kind != kindVM && kind != kindVMI) {
		return Owner{}, false
	}
	return Owner{Kind: kind, Name: name, UID: types.UID(uid)}, true
}
