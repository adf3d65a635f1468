// SPDX-License-Identifier: Apache-2.0

package agent

// RBAC for ipkeeper-agent, generated into manifests/rbac/agent by
// `make generate`: reservations (the allocation of its node's pods'
// addresses), its node's address blocks, pools to read, its node's pods
// (to check the pod a CNI request names); for claim-backed ADDs, which
// only read, IPAMClaims and the NetworkAttachmentDefinitions that say
// whether a network keeps its addresses; namespaces, for pools that admit
// only some (spec.namespaceSelector); ipkeeper's own webhook
// configuration and a launcher's VMI, to find the claim of a launcher the
// webhook missed (attachment.go). Nothing else: the agent writes no
// claim, no pool, no pod, no NAD and no VM, and the node-bound admission
// policy (manifests/policy) narrows its reservation and block writes to
// its own node's pods.
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipreservations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipblocks,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=ipamclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get,resourceNames=ipkeeper
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get
