package claims

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
)

const (
	// Finalizer keeps a claim (and so the VM's addresses) until no VMI or
	// launcher pod uses it; the name is the one existing tools use.
	Finalizer = "kubevirt.io/persistent-ipam"

	// NetworkAnnotation records the KubeVirt logical network name, which a
	// hashed claim name no longer shows.
	NetworkAnnotation = "ipkeeper.io/logical-network"

	// The ownership labels and kinds live in internal/claimowner, shared with
	// the webhook and the agent; these names keep this package readable.
	ManagedByLabel  = claimowner.ManagedByLabel
	ManagedByValue  = claimowner.ManagedByValue
	OwnerUIDLabel   = claimowner.OwnerUIDLabel
	OwnerAnnotation = claimowner.OwnerAnnotation

	kindVM  = claimowner.KindVM
	kindVMI = claimowner.KindVMI
)

// Owner identifies the VM or standalone VMI a claim belongs to.
type Owner = claimowner.Owner

// ownerOf is claimowner.Of: the one ownership rule.
func ownerOf(claim metav1.Object) (Owner, bool) { return claimowner.Of(claim) }
