// Package reservation builds the identity of IPReservation objects: the
// object name derived from (network, IP) and the labels used to select a
// network's reservations.
//
// The name is the allocation lock (create fails with AlreadyExists for an
// address already held), so it must be deterministic, injective and a valid
// DNS-1123 subdomain for any network name and for IPv4 and IPv6 alike.
package reservation
