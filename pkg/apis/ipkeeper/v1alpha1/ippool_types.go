// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolRange is one range of addresses of a pool. Its keys are those of a
// NetworkAttachmentDefinition's ipam section (and of ipam.ipRanges[]
// entries), so a range copies between the two unchanged.
// +kubebuilder:validation:XValidation:rule="!has(self.range_start) || !isIP(self.range_start) || !isCIDR(self.range) || cidr(self.range).containsIP(self.range_start)",message="range_start must lie inside range"
// +kubebuilder:validation:XValidation:rule="!has(self.range_end) || !isIP(self.range_end) || !isCIDR(self.range) || cidr(self.range).containsIP(self.range_end)",message="range_end must lie inside range"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !isCIDR(self.range) || cidr(self.range).containsIP(self.gateway)",message="gateway must lie inside range"
type PoolRange struct {
	// Range is the subnet as a CIDR ("10.0.0.0/24") or whereabouts'
	// "A-B/prefix" form ("10.0.0.10-10.0.0.50/24").
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) || (self.indexOf('-') > 0 && isIP(self.substring(0, self.indexOf('-'))) && isCIDR(self.substring(self.indexOf('-') + 1)))",message="must be a CIDR (10.0.0.0/24) or whereabouts' A-B/prefix form (10.0.0.10-10.0.0.50/24)"
	Range string `json:"range"`
	// RangeStart is the first address handed out; default the subnet's first usable one.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	RangeStart string `json:"range_start,omitempty"` //nolint:kubeapilinter // the NAD's key, so ranges copy unchanged
	// RangeEnd is the last address handed out; default the subnet's last usable one.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	RangeEnd string `json:"range_end,omitempty"` //nolint:kubeapilinter // the NAD's key, so ranges copy unchanged
	// Exclude lists CIDRs (or single addresses) never handed out.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="self.all(e, isCIDR(e) || isIP(e))",message="every entry must be a CIDR or an IP address"
	Exclude []string `json:"exclude,omitempty"`
	// Gateway is the range's gateway: returned with its addresses and never handed out.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`
}

// IPPoolSpec defines a pool of addresses that networks, VMs and Cluster
// API machines draw from.
type IPPoolSpec struct {
	// Ranges are the pool's address ranges, IPv4 and IPv6 alike. An
	// allocation takes one address per IP family, from the first range of
	// that family with a free address. Adding a range grows the pool at
	// once; removing one (or adding an exclude) stops new allocations
	// there, while addresses already held there stay held and are counted
	// as out of range.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Ranges []PoolRange `json:"ranges"`
	// ReuseCooldown keeps a released address from being handed out again
	// for this long ("30s", "5m", "1h30m"). The release is recorded on the
	// reservation, so it holds across agent and controller restarts. Unset
	// or 0: no delay.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$')",message="must be a duration such as 30s, 5m or 1h30m (digits and units ns, us, ms, s, m, h; no spaces, no sign)"
	ReuseCooldown *Duration `json:"reuseCooldown,omitempty"`
	// NamespaceSelector selects the namespaces whose workloads may take
	// addresses from the pool: pods and VMs through a NAD that names the
	// pool, and Cluster API IPAddressClaims. Unset: every namespace (as
	// before the field existed). Checked wherever an address is reserved
	// (agent, ipkeeper-controller, the Cluster API provider, the whereabouts
	// import); addresses held before a change of the selector stay held.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// WarningThresholdPercent is the usage, in percent of the pool's size
	// in any IP family, at which the pool reports NearlyExhausted and
	// records a Warning event. Default 90.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	WarningThresholdPercent *int32 `json:"warningThresholdPercent,omitempty"`
	// MaxAddressesPerNamespace bounds how many addresses of the pool the
	// workloads of one namespace hold together (over every IP family: a
	// dual-stack attachment holds two): its pods', its VMs' claims' and
	// its Cluster API claims', released addresses that cool down or are
	// retained for a deleted VM included (they are the namespace's until
	// they are free). An allocation that would go beyond it is refused
	// with QuotaExceeded. Unset: no bound. Lowering it below what a
	// namespace holds takes nothing away; the namespace gets no new
	// address until it holds fewer.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxAddressesPerNamespace *int32 `json:"maxAddressesPerNamespace,omitempty"`
}

// DefaultWarningThresholdPercent is spec.warningThresholdPercent's default.
const DefaultWarningThresholdPercent = 90

// PoolUsage counts a set of addresses. Sizes are decimal strings because
// an IPv6 range can hold more than 2^64 addresses.
type PoolUsage struct {
	// Size is how many addresses can be handed out.
	Size string `json:"size"`
	// Used is how many of them are held (including those cooling down).
	Used int64 `json:"used"`
	// Free is Size minus Used.
	Free string `json:"free"`
}

// RangeUsage is the usage of one spec range.
type RangeUsage struct {
	// Range is the spec range this counts, as written there.
	Range     string `json:"range"`
	PoolUsage `json:",inline"`
}

// IPPoolStatus is the pool's observed usage and health.
type IPPoolStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Size is the number of addresses the ranges can hand out, over all families.
	// +optional
	Size string `json:"size,omitempty"`
	// Used is the number of held addresses inside the ranges.
	// +optional
	Used int64 `json:"used"`
	// Free is Size minus Used.
	// +optional
	Free string `json:"free,omitempty"`
	// OutOfRange is the number of held addresses the ranges no longer
	// cover (a range was removed or an address excluded while held).
	// +optional
	OutOfRange int64 `json:"outOfRange"`
	// CoolingDown is the number of released addresses waiting out
	// spec.reuseCooldown; they are counted in Used.
	// +optional
	CoolingDown int64 `json:"coolingDown,omitempty"`
	// Ranges is the usage of each spec range, in spec order.
	// +optional
	// +listType=atomic
	Ranges []RangeUsage `json:"ranges,omitempty"`
	// Families is the usage per IP family ("IPv4", "IPv6"): an allocation
	// needs a free address in each family the pool has.
	// +optional
	// +listType=map
	// +listMapKey=family
	Families []FamilyUsage `json:"families,omitempty"`
	// Namespaces is what the namespaces nearest to
	// spec.maxAddressesPerNamespace hold: those holding at least
	// NamespaceUsageReportPercent of it, at most NamespaceUsageReportMax of
	// them, the fullest first. Empty without a quota.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=10
	Namespaces []NamespaceUsage `json:"namespaces,omitempty"`
	// Networks are the CNI network names seen using the pool.
	// +optional
	// +listType=set
	Networks []string `json:"networks,omitempty"`
	// Conditions: Ready (the spec is valid and allocations proceed),
	// Exhausted (some family has no free address), NearlyExhausted
	// (usage at or above spec.warningThresholdPercent), GatewayInUse (a
	// range's gateway is an address a workload holds) and Deleting (the
	// pool was deleted and waits for its reservations to go).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NamespaceUsage is how many of the pool's addresses one namespace's
// workloads hold (released ones waiting out a cooldown or a retention
// included), against spec.maxAddressesPerNamespace.
type NamespaceUsage struct {
	// Namespace is the holders' namespace.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Used is how many addresses of the pool it holds.
	Used int64 `json:"used"`
}

// Which namespaces status.namespaces lists: those holding at least this
// percentage of the pool's quota, at most this many, so that the status
// stays small however many namespaces draw from the pool.
const (
	NamespaceUsageReportPercent = 80
	NamespaceUsageReportMax     = 10
)

// FamilyUsage is the usage of one IP family.
type FamilyUsage struct {
	// Family is "IPv4" or "IPv6".
	Family    string `json:"family"`
	PoolUsage `json:",inline"`
}

// Pool condition types and reasons.
const (
	PoolReady           = "Ready"
	PoolExhausted       = "Exhausted"
	PoolNearlyExhausted = "NearlyExhausted"
	// PoolGatewayInUse is True while a range's gateway is held by a
	// reservation: an edit moved the gateway onto an address a workload
	// uses, which then answers as every other workload's gateway.
	PoolGatewayInUse = "GatewayInUse"
	// PoolDeleting is True while a deleted pool waits for its last
	// reservation (released ones cooling down included) to go:
	// ipkeeper-controller then removes PoolInUseFinalizer.
	PoolDeleting = "Deleting"

	PoolReasonValid        = "Valid"
	PoolReasonInvalidSpec  = "InvalidSpec"
	PoolReasonOverlaps     = "Overlaps"
	PoolReasonFree         = "AddressesFree"
	PoolReasonNoneFree     = "NoAddressFree"
	PoolReasonAboveWarning = "AboveThreshold"
	PoolReasonBelowWarning = "BelowThreshold"
	PoolReasonGatewayHeld  = "GatewayHeld"
	PoolReasonGatewaysFree = "GatewaysFree"
	// PoolReasonReservationsLeft: the deletion waits for the pool's
	// reservations (the reason of Deleting=True and of its Event).
	PoolReasonReservationsLeft = "ReservationsLeft"
)

// PoolInUseFinalizer is on every IPPool: ipkeeper-controller adds it and
// removes it from a deleted pool once no reservation of it is left, so a
// pool in use is never deleted under its holders and its released
// addresses keep their cooldown.
const PoolInUseFinalizer = "ipkeeper.io/in-use"

// Labels and annotations of pools.
const (
	// InlineLabel marks a pool created from the ipam section of a NAD that
	// names no pool: the network's one authoritative definition.
	InlineLabel = "ipkeeper.io/inline"
	// InlineDefinitionAnnotation holds, for an inline pool, the definition
	// (ranges) it was created from, in canonical form. NADs of the network
	// must carry the same definition; the spec may since have grown.
	InlineDefinitionAnnotation = "ipkeeper.io/inline-definition"
	// InlineNetworkAnnotation holds the CNI network name an inline pool is
	// the definition of. Its reservations are named from it rather than
	// from the pool (LockKey), so that they read as the network's even
	// when the pool's name is a hash (a network name that is not a valid
	// object name).
	InlineNetworkAnnotation = "ipkeeper.io/inline-network"
	// DefinedByAnnotation says what an inline pool was created from:
	// "NAD namespace/name".
	DefinedByAnnotation = "ipkeeper.io/defined-by"
	// NetworkNameAnnotation holds the ipam.network_name (whereabouts' key)
	// of an inline pool's NAD: inline pools whose ranges overlap must
	// declare different ones.
	NetworkNameAnnotation = "ipkeeper.io/network-name"
)

// IPPool is a cluster-wide pool of addresses. A NAD uses it with
// `"ipam": {"type": "ipkeeper", "pool": "<name>"}`; a Cluster API
// IPAddressClaim with a poolRef to it. Every network whose NAD carries its
// ranges inline gets an IPPool named after the network, created on first
// use, so `kubectl get ippools` shows every network's usage.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipp,categories=ipkeeper
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.used`
// +kubebuilder:printcolumn:name="Free",type=string,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Out-Of-Range",type=integer,JSONPath=`.status.outOfRange`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec IPPoolSpec `json:"spec"`
	// +optional
	Status IPPoolStatus `json:"status,omitempty"`
}

// IPPoolList is a list of IPPools.
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}

// LockKey returns what the pool's reservations and blocks are named from
// (naming.Reservation(key, ip)): for the pool of an inline network, that
// network's name (InlineNetworkAnnotation; reservations made before pools
// existed are named from it, and a network name that is not an object
// name gives the pool a hashed name), else the pool's name. It depends on
// the pool object alone, never on the NAD or the writer that asks, so
// every writer names an address of the pool alike: the agent, the
// controller, the Cluster API provider and the import.
func (p *IPPool) LockKey() string {
	if n := p.Annotations[InlineNetworkAnnotation]; n != "" {
		return n
	}
	return p.Name
}

func init() {
	SchemeBuilder.Register(&IPPool{}, &IPPoolList{})
}
