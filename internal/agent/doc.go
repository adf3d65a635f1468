// SPDX-License-Identifier: Apache-2.0

// Package agent is the ipkeeper node agent: it serves the CNI shim's
// requests on a root-only unix socket and allocates addresses.
//
// Why an agent: a plugin that talks to the API server itself must list a
// network's allocations on every ADD or take a global lock. The agent keeps
// an informer-fed index of every IPReservation (which addresses of which
// network are taken) and of its node's pods, so an ADD costs one write: the
// create of the reservation. The reservation's name is derived from
// (network, IP), so the API server refuses a duplicate with AlreadyExists;
// the index is only a hint for picking candidates and is never trusted for
// uniqueness. On a conflict the agent marks the address taken and tries the
// next candidate. Candidates start at a per-attachment hash offset (see
// package allocator), so agents on many nodes do not race for one address.
//
// Data flows one way: cniproto (socket) -> Agent verbs (add.go, del.go,
// gc.go ...) -> allocator (pure) -> Store (the API server).
package agent
