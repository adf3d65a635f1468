// SPDX-License-Identifier: Apache-2.0

// Package blockgc gives back address blocks nobody needs: the blocks of a
// deleted pool, those that no longer fit their pool (cut by the geometry
// of ranges since edited, they overlap every new block, so their part of
// the range could only be borrowed), and those empty for a grace period
// (a node whose pods left keeps no part of the pool). ipkeeper-controller
// runs it on the leader, one pool per request.
//
// A block is a hint, not a lock (each address is locked by its
// reservation's name): giving one back a moment before its holder hands
// out an address there costs that holder another take, never an address
// held twice. Reservations in a given-back block stay as they are.
package blockgc
