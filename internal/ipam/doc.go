// SPDX-License-Identifier: Apache-2.0

// Package ipam is the one address engine: "give this holder an address
// from this pool", whoever the holder is. A node's agent (its pods) and
// ipkeeper-controller (IPAMClaims and Cluster API IPAddressClaims) each
// make one Engine and call the same Assign and Reserve; what differs is
// the holder's datastore (Datastore: its cache of reservations, a live
// list, its own expiry of released addresses) and its blocks, passed in,
// as Calico's AutoAssign takes the host it assigns for.
//
// The engine owns the pool view (Pool: the parsed ranges, the ranges of
// younger overlapping networks, the cooldown and quota), the search as
// named phases (search.go: own block, borrow, confirm full, reclaim),
// and its memos beside the holder's cache (memo.go: creates in flight,
// creates the cache does not show yet, ranges confirmed full, a
// borrowing request's live list). Block data is package blocks', the
// candidate within a range package allocator's, and the reservation, the
// lock on an address, package reservation's: a memo may be stale, and a
// stale one costs a failed create, never a duplicate.
package ipam
