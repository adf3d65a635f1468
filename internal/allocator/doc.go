// SPDX-License-Identifier: Apache-2.0

// Package allocator chooses IP addresses from an iprange.Range. It is
// pure: it holds no state and does no I/O; the caller supplies what is
// taken (from the cluster's allocation records) and commits the result.
//
// # Strategy
//
// Candidate hashes the seed with SHA-256, takes 128 bits, and asks the
// range for the usable address at that index modulo the number of usable
// addresses (iprange.Range.At); that is the first address tried. It then
// scans upward, wrapping around once (iprange.Range.Walk). The node agent
// passes pod UID + interface name as the seed, so agents racing on the
// same network start at different addresses instead of all contending for
// the lowest free one, while a retried ADD for the same pod tends to land
// on the same candidate. Deterministic for a given seed.
//
// # Cost
//
// The range arrives with its free spans computed (see iprange), so an
// excluded prefix of any size is skipped in one step. The scan calls taken
// once per visited address and visits each usable address at most once; it
// returns as soon as a free address is found, so a huge range with few
// taken addresses answers almost immediately.
//
// Whether an address may be requested statically is iprange.Range.Usable.
package allocator
