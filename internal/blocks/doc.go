// SPDX-License-Identifier: Apache-2.0

// Package blocks is address blocks: aligned prefixes of a pool's ranges
// that one holder hands out (IPBlock objects). A node's agent holds blocks
// for its pods, ipkeeper-controller holds blocks for IPAMClaims' addresses,
// so that each reservation is watched only by its block's holder, not by
// every agent of the cluster. A block is a hint, not a lock: an address is
// still locked by its IPReservation's name.
//
// The package has three parts: the geometry every holder cuts ranges by
// (pure), the Set of blocks a holder knows of, and the Taker, which finds a
// free address in the holder's blocks and takes a new block when they are
// full, through a narrow Store.
package blocks
