// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OwnerKind says what holds a reservation.
// +kubebuilder:validation:Enum=Pod;IPAMClaim;IPAddressClaim
// +kubebuilder:validation:MaxLength=32
type OwnerKind string

const (
	// OwnerPod is an ephemeral reservation: released when the pod's attachment
	// is deleted (CNI DEL) or the pod is gone.
	OwnerPod OwnerKind = "Pod"
	// OwnerIPAMClaim is a persistent reservation: kept across pods and
	// released only when the claim is gone.
	OwnerIPAMClaim OwnerKind = "IPAMClaim"
	// OwnerIPAddressClaim is a Cluster API machine's address: held until
	// the IPAddressClaim (ipam.cluster.x-k8s.io) is deleted.
	OwnerIPAddressClaim OwnerKind = "IPAddressClaim"
)

// ReservationOwner identifies the object a reservation belongs to. The UID
// matters: a pod or claim recreated with the same name is a different owner.
type ReservationOwner struct {
	// Kind of the owner.
	// +required
	Kind OwnerKind `json:"kind"`
	// Namespace of the owner.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the owner.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID of the owner.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid"`
}

// Limits of IPReservationSpec fields. The kubebuilder markers below repeat
// the numbers (markers cannot name a constant); TestCRDLimits checks that the
// generated CRD agrees, so code that validates before creating can use these.
const (
	// NetworkMaxLength is the longest spec.network the API server accepts.
	NetworkMaxLength = 253
	// IPMaxLength is the longest spec.ip the API server accepts.
	IPMaxLength = 45
)

// IPReservationSpec records which owner holds one IP of one network.
// Network, IP and interface never change, and the owner only to the claim
// the address was lent to (lentTo) when a VM's decentralized live
// migration to another namespace succeeded: a reservation is otherwise
// released by deleting it. Only the attachment details (container ID,
// node) follow a pod's new sandbox.
// +kubebuilder:validation:XValidation:rule="(self.owner.kind == oldSelf.owner.kind && self.owner.uid == oldSelf.owner.uid && self.owner.name == oldSelf.owner.name && self.owner.__namespace__ == oldSelf.owner.__namespace__) || (has(oldSelf.lentTo) && !has(self.lentTo) && self.owner.kind == oldSelf.lentTo.kind && self.owner.uid == oldSelf.lentTo.uid && self.owner.name == oldSelf.lentTo.name && self.owner.__namespace__ == oldSelf.lentTo.__namespace__)",message="owner is immutable but for passing to the claim it was lent to (lentTo), which then leaves lentTo; delete the reservation to release the address"
// +kubebuilder:validation:XValidation:rule="!has(self.lentTo) || (self.owner.kind == 'IPAMClaim' && self.lentTo.kind == 'IPAMClaim' && self.lentTo.uid != self.owner.uid)",message="lentTo names an IPAMClaim other than the owner, and only an IPAMClaim's address is lent"
// +kubebuilder:validation:XValidation:rule="self.owner.kind != 'Pod' || (has(self.interfaceName) && size(self.interfaceName) > 0)",message="interfaceName is required for reservations owned by a Pod"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.reuseAfter) || (has(self.reuseAfter) && self.reuseAfter == oldSelf.reuseAfter)",message="reuseAfter cannot change once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.pool) || (has(self.pool) && self.pool == oldSelf.pool)",message="pool is immutable"
type IPReservationSpec struct {
	// Network is the CNI network name (the `name` of the NetworkAttachmentDefinition's config).
	// NADs in different namespaces with the same network name share one pool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="network is immutable"
	Network string `json:"network"`
	// Pool is the IPPool the address belongs to; the reservation's name
	// derives from (pool, ip), so one address of a pool has one holder
	// whichever network asks.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// IP is the reserved address, in canonical form (no prefix length).
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip.isCanonical(self)",message="must be an IP address in canonical form, without prefix length"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ip is immutable"
	IP string `json:"ip"`
	// Owner is the pod (ephemeral) or IPAMClaim (persistent) holding the address.
	// +required
	Owner ReservationOwner `json:"owner"`
	// LentTo is the IPAMClaim of another VM that may use the owner
	// claim's address too, while KubeVirt's decentralized live migration
	// moves the owner's VM to that VM (its receiver, in another
	// namespace): both launchers run with the address, which stays the
	// owner's. Set and cleared by ipkeeper-controller; when the migration
	// succeeds the address passes to this claim (owner), and when it fails
	// or is cancelled it is cleared.
	// +optional
	LentTo *ReservationOwner `json:"lentTo,omitempty"`
	// InterfaceName is the pod's interface (CNI_IFNAME) the address is on; pods only.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="interfaceName is immutable"
	InterfaceName string `json:"interfaceName,omitempty"`
	// ContainerID is the CNI container ID of the attachment; pods only. It
	// follows the pod's current sandbox, so a DEL for an older sandbox does
	// not release the address the new one uses.
	// +optional
	ContainerID string `json:"containerID,omitempty"`
	// AttachedAt is when the node's agent last pointed the reservation at
	// an attachment (created it, or set containerID for a new sandbox), by
	// that node's clock; pods only. On a sticky_mac network it is at least
	// a second after every attachment of the MAC the agent saw, so the
	// MAC's latest attachment is the one attached last. A CNI GC spares
	// reservations attached more recently than its minimum age, also
	// across agent restarts.
	// +optional
	AttachedAt *metav1.Time `json:"attachedAt,omitempty"`
	// Node is the node whose agent made the reservation; pods only.
	// +optional
	Node string `json:"node,omitempty"`
	// ReuseAfter is set when the owner released the address in a pool with
	// a reuseCooldown: the reservation then holds the address for nobody
	// until this time and is deleted after it, so the delay survives
	// restarts of every component.
	// +optional
	ReuseAfter *metav1.Time `json:"reuseAfter,omitempty"`
}

// Released reports whether the owner released the address and it only
// waits out its pool's reuse cooldown.
func (s *IPReservationSpec) Released() bool { return s.ReuseAfter != nil }

// IPReservation reserves one IP address of one network for one owner.
//
// Its name is the allocation lock, derived from its pool's lock key and
// its address (IPPool.LockKey), so the API server refuses a second holder
// of an address: <spec.pool>.<address> for a pool whose name is a DNS
// label (10-0-0-1 for 10.0.0.1, eight 4-digit groups for IPv6), else
// <hint>.<sha256 of the lock key>.<address>, whose hash the API server
// cannot compute and so checks only in shape.
// +kubebuilder:validation:XValidation:rule="self.metadata.name.lastIndexOf('.') > 0 && isIP(self.spec.ip) && (self.metadata.name.substring(self.metadata.name.lastIndexOf('.') + 1).matches('^[0-9a-f]{4}(-[0-9a-f]{4}){7}$') ? ip(self.metadata.name.substring(self.metadata.name.lastIndexOf('.') + 1).replace('-', ':')) == ip(self.spec.ip) : self.metadata.name.substring(self.metadata.name.lastIndexOf('.') + 1).replace('-', '.') == self.spec.ip)",message="metadata.name must end in spec.ip's label (10.0.0.1 as 10-0-0-1, fd00::1 as fd00-0000-0000-0000-0000-0000-0000-0001): a reservation is named from its pool's lock key and its address, so that one address has one holder"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.lastIndexOf('.') > 0 && (size(self.spec.pool) <= 63 && self.spec.pool.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') ? self.metadata.name.substring(0, self.metadata.name.lastIndexOf('.')) == self.spec.pool : self.metadata.name.matches('^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?[.][0-9a-f]{32}[.][^.]+$'))",message="metadata.name must be <spec.pool>.<ip label> for a pool whose name is a DNS label, else <hint>.<sha256 of the lock key>.<ip label>: a reservation is named from its pool's lock key and its address, so that one address has one holder"
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipr;iprs,categories=ipkeeper
// +kubebuilder:selectablefield:JSONPath=`.spec.network`
// +kubebuilder:selectablefield:JSONPath=`.spec.node`
// +kubebuilder:selectablefield:JSONPath=`.spec.pool`
// +kubebuilder:selectablefield:JSONPath=`.spec.owner.namespace`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.network`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="Owner-Kind",type=string,JSONPath=`.spec.owner.kind`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner.name`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.owner.namespace`,priority=1
// +kubebuilder:printcolumn:name="Interface",type=string,JSONPath=`.spec.interfaceName`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Reuse-After",type=string,JSONPath=`.spec.reuseAfter`,description="Set once the owner released the address: it cools down, held for nobody, until then; empty while the owner holds it"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPReservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec IPReservationSpec `json:"spec"`
}

// IPReservationList is a list of IPReservations.
// +kubebuilder:object:root=true
type IPReservationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPReservation `json:"items"`
}
