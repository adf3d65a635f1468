// SPDX-License-Identifier: Apache-2.0

// Package iprange is the one home of address-range arithmetic. A Range
// owns its bounds (Start..End inside a subnet, never the network or IPv4
// broadcast address), its free spans (the bounds minus the gateway and the
// excludes), the "may this address be handed out" check (Usable), its size
// and the mapping between indexes and usable addresses (At, Walk), and
// how it is cut into address blocks (BlockOf, BlockPart, Blocks; package
// blocks keeps who holds which).
//
// A Range is made only by New from a Spec, so it always holds the
// invariants New checks: ipamconfig builds Ranges from a network
// configuration (naming the JSON field at fault first), and the allocator
// picks addresses from them without validating them again. Like the
// allocator it is pure: no state, no I/O.
//
// # Cost
//
// Arithmetic is exact 128-bit, so IPv6 /64 and wider ranges work. New
// reduces the range to its free spans once, at most len(Exclude)+2 of
// them, so At and Walk step over an excluded prefix of any size at once,
// and picking an address allocates nothing.
package iprange
