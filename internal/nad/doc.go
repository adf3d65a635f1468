// Package nad reads what ipkeeper's controller needs from a
// NetworkAttachmentDefinition: the network name (the CNI config "name",
// which is what IPAMClaim.spec.network and the IPAM's pools use) and whether
// the network opts in to persistent IPs ("allowPersistentIPs": true at the
// top level of the config). It also resolves the "namespace/name" references
// KubeVirt and Multus use to point at a NAD.
package nad
