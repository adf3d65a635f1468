// SPDX-License-Identifier: Apache-2.0

// Package blocks is address blocks: aligned prefixes of a pool's ranges
// that one holder hands out (IPBlock objects). A node's agent holds blocks
// for its pods, ipkeeper-controller holds blocks for IPAMClaims' addresses,
// so that each reservation is watched only by its block's holder, not by
// every agent of the cluster. A block is a hint, not a lock: an address is
// still locked by its IPReservation's name.
//
// This package is what every holder shares: the Set of blocks a holder
// knows of, and the Taker, which finds a free address in the holder's
// blocks and takes a new block when they are full, through a narrow Store
// (KubeStore on the API server). How a range is cut into blocks is
// iprange's (Range.BlockOf, BlockPart, Blocks); an agent's watch of its
// node's blocks and the Node that owns them are package nodeblocks'.
package blocks
