// SPDX-License-Identifier: Apache-2.0

// Package agent is the ipkeeper node agent: it serves the CNI shim's
// requests on a root-only unix socket and allocates its node's pods'
// addresses.
//
// Why an agent: a plugin that talks to the API server itself must list a
// network's allocations on every ADD or take a global lock. The agent keeps
// a scoped cache of reservations (package index: its node's pods' and
// those of no block's holder, fed by its own reflectors and watch decoder,
// not an informer of every reservation) and an informer of its node's
// pods, so an ADD costs one write: the create of the reservation. It hands
// out addresses from the blocks its node holds (package nodeblocks),
// borrowing from the whole range when it can take none. The reservation's
// name is derived from (pool, IP), so the API server refuses a duplicate
// with AlreadyExists; the cache and the search's memos beside it (package
// ipam, the address engine the controller runs too, over the agent's
// datastore: search.go) only steer the choice of candidates and are never
// trusted for uniqueness. On a conflict the agent marks the address taken
// and tries the next candidate.
//
// One writer per object: an agent writes its own node's pods'
// reservations and its own node's address blocks, nothing else. A
// claim-backed attachment (a VM's launcher) gets the addresses its
// IPAMClaim records, which ipkeeper-controller chose when the claim
// appeared: the agent only reads them (claims.go). Pools are made by the
// controller and the administrator (pools.go waits for an inline
// network's).
//
// Data flows one way: cniproto (socket) -> Agent verbs (add.go, del.go,
// gc.go ...) -> ipam (the search) -> allocator (pure) -> Store (the API
// server).
package agent
