// SPDX-License-Identifier: Apache-2.0

// Package claimalloc is ipkeeper-controller's one way to hold addresses
// for claims: IPAMClaims (a VM's addresses, which move between nodes with
// the VM) and Cluster API IPAddressClaims. Every controller writer of a
// claim's reservation calls it; it chooses the candidates (through the
// engine, package ipam), and package
// reservation builds, creates (its one bounded create-as-lock loop, Hunt)
// and describes the holders of the reservations.
//
// Why the controller, and why blocks: a claim's addresses are chosen once,
// when the claim exists, by one leader-elected writer, so the launchers
// of a migration never race for them on two nodes. They come from address
// blocks ipkeeper-controller holds for claims (IPBlock holder IPAMClaims;
// package blocks), labelled naming.ClaimsBlockLabel, so that no agent
// hands out, or needs to watch, a claim's address: an agent's memory and
// watch traffic do not grow with the number of VMs. When no block is left
// to take, an address is borrowed from anywhere in the range, labelled shared,
// so the node whose block it lies in sees it.
//
// The search is package ipam's, the engine an agent runs too: its phases
// here are the claims' blocks, a new block, then borrowing from the
// controller's one cache of reservations (reservationindex.Addresses),
// which shows every pool whole, plus the creates of its own it has not
// seen come back yet (the engine's memo). The IPReservation's name is
// still the lock, so a stale cache costs a failed create, never a
// duplicate. What is the controller's own here: the claims' holder (a
// claim's network, interface and aliases), the per-namespace quota, and
// taking back what a claim's name kept.
package claimalloc
