// SPDX-License-Identifier: Apache-2.0

// Package claimaddrs is ipkeeper-controller's IPAMClaim address
// controller: it chooses and reserves every IPAMClaim's addresses on a
// network ipkeeper serves (the claims it makes for VMs, and claims made by
// another controller or by hand) and records them in the claim's status,
// with the IPsAllocated condition, before any launcher pod needs them.
//
// Why the controller and not the agent: a claim is used by pods on any
// node (the two launchers of a live migration at once). Chosen at a
// launcher's ADD, the first addresses were raced for by two nodes, and
// converging needed agents with rights over other nodes' reservations.
// Chosen here, by one leader-elected writer, when the claim exists, both
// launchers read one status, and agents need no write on any claim or
// claim reservation: the admission policies can say so.
//
// A claim goes through the one lifecycle of claims (package claimlife),
// which the Cluster API provider's IPAddressClaims share; this package
// gives the IPAMClaim kind's steps. What its Ensure does, for one claim:
//   - resolve its network (the NAD recorded on the claim, else the NADs of
//     its spec.network) and the network's IPPool; a claim of a network
//     ipkeeper does not serve is left alone;
//   - with no status.ips: reuse the claim's own reservations (a write that
//     failed half-way), reserve requested addresses (RequestedAnnotation),
//     else assign one address per IP family (package claimalloc), then
//     write status.ips and IPsAllocated=True;
//   - with status.ips: make sure each recorded address is reserved for the
//     claim (an address an administrator wrote), and release the claim's
//     reservations that it no longer records;
//   - keep status.ownerPod: the newest pod that references the claim.
//
// Failures are conditions with OVN-Kubernetes' reasons (SubnetExhausted,
// IPAddressConflict) or the reason of the mistake (OutsidePool, Invalid,
// PoolNotFound, NADInvalid, ...: claimstatus), events on the claim, and
// retries.
package claimaddrs
