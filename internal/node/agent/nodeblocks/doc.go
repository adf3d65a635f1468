// SPDX-License-Identifier: Apache-2.0

// Package nodeblocks is a node agent's address blocks: which IPBlocks its node
// holds (a watch of its own node's blocks only), and taking a new one when
// those are full, owned by the node's Node object so that the garbage
// collector gives a deleted node's blocks back.
//
// Each agent hands out its pods' addresses from aligned blocks of the
// pool's ranges that its node holds, and labels those pods' reservations
// with its node (naming.NodeLabel). So it watches only its own node's
// reservations plus the shared ones, in one watch (package index),
// instead of every reservation of the cluster: the watch fan-out that grew
// with the number of nodes. IPAMClaims' addresses lie in blocks
// ipkeeper-controller holds, which no agent hands out.
//
// A block is a hint, not a lock: the reservation's name still decides who
// holds an address. A labelled reservation another agent cannot see (left
// in a block whose node went away) only costs it a failed create, which it
// remembers as a conflict.
//
// What every holder shares (the Set of blocks a holder knows of, the Taker
// and its Store) is package internal/blocks; how a range is cut into
// blocks is iprange's. This package adds what is the agent's own: the
// watch, the Node as owner, and one Node value the agent asks for a
// candidate.
package nodeblocks
