// SPDX-License-Identifier: Apache-2.0

package claimstatus

// A VM moved to another namespace by KubeVirt's decentralized live
// migration keeps its addresses: the receiver VM's claims get the source
// VM's (package handover). These annotations record, on the claims, the
// steps the claim's addresses follow.

// ReceiverAnnotation is set by ipkeeper-controller on the claims it makes
// for a VM created to receive a decentralized live migration (runStrategy
// WaitAsReceiver): while its value is ReceiverWaiting the claim gets no
// addresses of its own and waits for the source VM's, lent to it when
// KubeVirt synchronised the migration. Any other value is why it gets
// addresses of its own instead (the source is in another cluster, or has
// no claim of the network); the claim is then filled as any other.
const ReceiverAnnotation = "ipkeeper.io/migration-receiver"

// ReceiverWaiting is ReceiverAnnotation's value while the claim waits.
const ReceiverWaiting = "waiting-for-source"

// ReasonWaitingForSource is the IPsAllocated=False reason of a receiver's
// claim waiting for the source's addresses.
const ReasonWaitingForSource = "WaitingForMigrationSource"

// HandedOverAnnotation marks a claim whose part in a decentralized live
// migration is over and that is to be released once no launcher uses it:
// the source VM's, whose addresses passed to the receiver's claim; or the
// receiver's, whose migration failed (it recorded the source's addresses,
// which the source keeps). Its value says which. The VM's claim is then
// made anew.
const HandedOverAnnotation = "ipkeeper.io/handed-over"
