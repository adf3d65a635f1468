// SPDX-License-Identifier: Apache-2.0

// Package multus is the one home of what ipkeeper reads from Multus'
// objects:
//
//   - the k8s.v1.cni.cncf.io/networks pod annotation (network selection
//     elements, in the JSON list or the short "ns/name@iface" form), read
//     and rewritten without losing fields it does not know, so the webhook
//     can add ipam-claim-reference and leave the rest of what KubeVirt wrote
//     untouched (annotation.go);
//   - which element of that annotation a CNI attachment is, by Multus'
//     interface naming (net<N>) and its default networks (element.go);
//   - NetworkAttachmentDefinitions: the network name (the CNI config
//     "name", which IPAMClaim.spec.network and the IPAM's pools use), the
//     one rule for whether the network keeps persistent IPs (top-level
//     "allowPersistentIPs": true), and the "namespace/name" references
//     KubeVirt and Multus use to point at a NAD (nad.go).
//
// The claims controller, the pod webhook and the agent all read these
// through this package, so they cannot disagree.
package multus
