// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPBlockSpec says which node's agent hands out the addresses of one
// aligned block of a pool's range. A block is a hint, not a lock: each
// address is still locked by its IPReservation's name. It lets an agent
// watch only its own node's pod reservations (labelled ipkeeper.io/node),
// since no other agent hands out addresses of its blocks.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an IPBlock is immutable; delete it to give the block up"
type IPBlockSpec struct {
	// Pool is the IPPool the block belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// CIDR is the block: an aligned prefix inside one of the pool's ranges.
	// +required
	// +kubebuilder:validation:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a CIDR with no host bits set"
	CIDR string `json:"cidr"`
	// Node is the node whose agent hands out the block's addresses.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
}

// IPBlock gives one block of a pool's addresses to one node. Agents take
// blocks as they need them; a block goes back when its Node object is
// deleted (it is the block's owner).
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipb;ipbs,categories=ipkeeper
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPBlock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec IPBlockSpec `json:"spec"`
}

// IPBlockList is a list of IPBlocks.
// +kubebuilder:object:root=true
type IPBlockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPBlock `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IPBlock{}, &IPBlockList{})
}
