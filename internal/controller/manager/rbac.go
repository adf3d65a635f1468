// SPDX-License-Identifier: Apache-2.0

package manager

// RBAC for ipkeeper-controller, generated into manifests/rbac/controller by
// `make generate`. Each rule is what a component of this package needs:
//
// Claims controllers: read VMs, VMIs, the KubeVirt CR (feature gate) and
// NADs; create, adopt and release IPAMClaims; read launcher pods (metadata);
// events on VMs, claims and NADs.
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines;virtualmachineinstances;kubevirts,verbs=get;list;watch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=ipamclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;update
//
// Migration handover: read the VirtualMachineInstanceMigrations of a
// decentralized live migration (which sends, which receives), lend a
// source claim's reservations to the receiver's claim and pass them
// (ipreservations, update, below).
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch
//
// Reservation garbage collector: read, retire (patch spec.reuseAfter) and
// delete reservations; read pools (their reuse cooldown) and the
// IPAddressClaims (metadata) that own some.
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipreservations,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools,verbs=get;list;watch
//
// IPPool status: read pools (and count their reservations, above), write
// their status, and record threshold Events on them (events, above).
// Keep a pool in use from going: add and remove its finalizer
// ipkeeper.io/in-use (patch; the policy ipkeeper-controller-pool-finalizer
// lets that patch change nothing else).
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools/status,verbs=get;update;patch
//
// Inline pools: make the IPPool of an inline network from its NADs.
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools,verbs=create
//
// IPAMClaim addresses (and Cluster API claims' below): the one writer of
// claims' reservations, in blocks it takes for them (owned by their pool);
// claims' status (addresses, conditions, owner pod).
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipreservations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipblocks,verbs=get;list;watch;create;delete
//
// Claims' status: addresses, IPsAllocated and RequestedAddresses, owner
// pod, and AddressesInPool when a pool changes under a claim's address.
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=ipamclaims/status,verbs=get;update;patch
//
// Cluster API IPAM provider: serve IPAddressClaims (finalizer, status);
// create, protect and delete their IPAddresses (owned by the claim and the
// IPPool, blocking their deletion); read Clusters (pause) and IPPools;
// create reservations and release them (update: a cooldown's reuseAfter).
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/finalizers,verbs=update
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ippools/finalizers,verbs=update
// +kubebuilder:rbac:groups=ipkeeper.io,resources=ipreservations,verbs=create;update
//
// Webhook scope (its rules follow KubeVirt; an annotation, the gate and the claims maker) and
// self-managed webhook certificates: only the named webhook configuration,
// and only the named Secret and Lease in the controller's own namespace
// (create cannot be limited by name).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;update;patch,resourceNames=ipkeeper
// --claims-controller=auto looks for another IPAMClaims controller's webhook (claimmaker).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=list
// +kubebuilder:rbac:groups="",namespace=ipkeeper-system,resources=secrets,verbs=get;list;watch;update,resourceNames=ipkeeper-webhook-cert
// +kubebuilder:rbac:groups="",namespace=ipkeeper-system,resources=secrets,verbs=create
// The guest network configuration Secrets (package guestnet), in the VMs'
// namespaces: written by server-side apply, never read; the policy
// ipkeeper-controller-secrets limits the writes to the Secrets it labels.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ipkeeper-system,resources=leases,verbs=get;update,resourceNames=ipkeeper-controller
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ipkeeper-system,resources=leases,verbs=create
