// SPDX-License-Identifier: Apache-2.0

// Package reservation is the one way to write an IPReservation: build
// one (New), create it or adopt the holder's own (CreateOrAdopt), try
// candidates until one is created (Hunt), say who holds an address
// (DescribeHolder), and let one go (Release, ReleaseAt, Discard), deleted
// at once or, in a pool with spec.reuseCooldown, retired (spec.reuseAfter
// set) so the address is handed to nobody until the cooldown is over.
// The agent (pods' addresses), ipkeeper-controller's claim allocator
// (IPAMClaims and Cluster API IPAddressClaims), its garbage collector and
// claims controllers, and `kubectl ipkeeper import` all call it; nobody
// else builds, creates or deletes a reservation, and both searches (the
// agent's and the claim allocator's) bound their candidates with Hunt.
//
// The IPReservation's name is the allocation lock: a create either makes
// the address the holder's or fails with AlreadyExists, whatever anyone's
// cache showed. A release is recorded on the reservation itself, so a
// cooldown holds across restarts of every component, and every release
// is made at the version it was decided on (UID and resourceVersion
// preconditions), so a reservation that changed meanwhile is not let go
// by mistake.
//
// Building an object and describing a holder are pure; the datastore
// steps go through Store, whose errors are the package's contract:
// ErrTaken, ErrGone and ErrChanged (wrapped). KubeStore is the Store of a
// controller-runtime client; the agent wraps it to count its API calls,
// and its unit tests use a fake.
package reservation
