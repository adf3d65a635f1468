// SPDX-License-Identifier: Apache-2.0

package agent

// RBAC for ipkeeper-agent, generated into manifests/rbac/agent by
// `make generate`: reservations (the allocation itself), pools (to read
// them, and to create an inline network's pool on its first use), its node's pods (to
// check the pod a CNI request names), IPAMClaims to read and their status to
// write; for claim-backed ADDs only, NetworkAttachmentDefinitions (the
// network's allowPersistentIPs flag and CNI name) and VirtualMachineInstance
// metadata (which VM a launcher pod's VMI belongs to). Nothing else: the
// agent never writes claim specs, pods, NADs or VMs.
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipreservations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipblocks,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=ipamclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=ipamclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get
