// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BlockHolder says who hands out a block's addresses.
// +kubebuilder:validation:Enum=Node;IPAMClaims
type BlockHolder string

const (
	// HolderNode: the agent of the block's node, to that node's pods.
	HolderNode BlockHolder = "Node"
	// HolderIPAMClaims: ipkeeper-controller, to IPAMClaims (VMs' addresses,
	// which move between nodes with the VM).
	HolderIPAMClaims BlockHolder = "IPAMClaims"
)

// IPBlockSpec says who hands out the addresses of one aligned block of a
// pool's range: one node's agent, or ipkeeper-controller for IPAMClaims. A
// block is a hint, not a lock: each address is still locked by its
// IPReservation's name. It lets each agent watch only its own node's pod
// reservations (labelled ipkeeper.io/node), and no agent watch the
// reservations of IPAMClaims' blocks (labelled ipkeeper.io/claims-block),
// since no other holder hands out addresses of a block.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an IPBlock is immutable; delete it to give the block up"
// +kubebuilder:validation:XValidation:rule="has(self.holder) && self.holder == 'IPAMClaims' ? !has(self.node) : has(self.node) && size(self.node) > 0",message="node is required for a block of a node (holder Node), and must be empty for a block of IPAMClaims"
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
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() >= (cidr(self).ip().family() == 4 ? 27 : 120)",message="a block holds at most 32 IPv4 or 256 IPv6 addresses (a /27 or /120), the largest a pool's geometry cuts"
	CIDR string `json:"cidr"`
	// Holder says who hands out the block's addresses: the agent of Node
	// (Node), or ipkeeper-controller, to IPAMClaims (IPAMClaims).
	// +optional
	// +kubebuilder:default=Node
	Holder BlockHolder `json:"holder,omitempty"`
	// Node is the node whose agent hands out the block's addresses; empty
	// for a block of IPAMClaims.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
}

// HolderName names who hands out the block's addresses: its node, or
// "IPAMClaims" (which no node can be called: node names are lowercase).
func (s *IPBlockSpec) HolderName() string {
	if s.Holder == HolderIPAMClaims {
		return string(HolderIPAMClaims)
	}
	return s.Node
}

// IPBlock gives one block of a pool's addresses to one holder. Agents take
// blocks for their nodes as they need them, and a block goes back when its
// Node object is deleted (its owner); ipkeeper-controller takes blocks for
// IPAMClaims, owned by their IPPool.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipb;ipbs,categories=ipkeeper
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.spec.holder`
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
