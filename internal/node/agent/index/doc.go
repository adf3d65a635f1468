// SPDX-License-Identifier: Apache-2.0

// Package index is the node agent's cache of IPReservations: what answers
// "is this address taken" and "what does this attachment hold" on an ADD,
// DEL, CHECK or GC without an API call.
//
// It is scoped, not a copy of every reservation: Watch runs one
// reflector whose label selector (naming.AgentReservationSelector) takes
// the reservations labelled with the agent's node (its pods' in its own
// address blocks) and those of no block's holder (borrowed addresses,
// static ones, other writers'); other nodes' and IPAMClaims' blocks are
// not watched at all. The reflector writes straight into the Cache (no
// informer store beside it), its watch is decoded in one pass by a
// decoder that keeps only what an Entry reads, and of any reservation but
// this node's pods' the Cache keeps only the address, the object's
// identity and version and the owner's kind.
//
// The agent's own writes and live reads reach the Cache ahead of the watch
// (Wrote, Deleted); watch events (Watched, WatchedDeletion) never take it
// back to an older version nor bring back what the agent deleted. The
// Cache errs towards "taken" (an address a create found held counts as
// taken until the watch shows its holder: MarkConflict) and is never
// trusted for uniqueness: the reservation's name, refused by the API
// server as AlreadyExists, is.
// The allocation search's memos (exhaustion, creates in flight) are the
// address engine's (package ipam), beside it.
package index
