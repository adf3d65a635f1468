// SPDX-License-Identifier: Apache-2.0

// Package naming is ipkeeper's one naming scheme: the object names and
// label values it derives from user input.
//
//   - Reservation: the IPReservation name for (network, IP). The name is the
//     allocation lock (a create fails with AlreadyExists for an address
//     already held), so it must be deterministic, injective and a valid
//     DNS-1123 subdomain for any network name, IPv4 and IPv6 alike.
//   - Claim: the IPAMClaim name for (VM, network), `<vm>.<network>` where
//     that is unambiguous; SwappedClaim and ClaimFor: the name for a VM
//     whose network was moved to a NAD of another CNI network (live NAD swap).
//   - NetworkLabelValue and the label keys select a network's reservations.
//
// Every name has two forms told apart by the number of dot-separated
// labels: the readable one when the inputs already are DNS labels, and a
// lossy hint plus a SHA-256 hash otherwise, so distinct inputs never share
// a name.
package naming
