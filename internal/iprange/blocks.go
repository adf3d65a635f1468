// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"crypto/sha256"
	"iter"
	"net/netip"
)

// Address blocks are aligned prefixes of a range's subnet that one holder
// hands out (IPBlock objects; package blocks keeps who holds which). Their
// geometry lives here, on the range's own arithmetic, so that every
// holder cuts a range the same way.
const (
	// blockHostBits4 and blockHostBits6 bound a block's host bits by
	// family: 32 IPv4 addresses, 256 IPv6 ones; smaller subnets have
	// smaller blocks (see BlockOf). The IPBlock CRD refuses larger blocks
	// (its spec.cidr rule).
	blockHostBits4 = 5
	blockHostBits6 = 8
	// blocksPerSubnetBits says how many blocks a small subnet is cut into
	// (64), so that a /24 shared by dozens of holders gives each a block
	// of its own rather than a few of them all of it; blockMinHostBits
	// keeps a block at four addresses or more.
	blocksPerSubnetBits = 6
	blockMinHostBits    = 2
	// MaxBlockTries bounds the blocks a holder looks at when it needs a
	// new one (an IPv6 range has too many to look at all); past that, or
	// when every block is held, it borrows.
	MaxBlockTries = 4096
)

// BlockOf returns the block of r that ip lies in. A block's size depends
// only on r's subnet, so every holder cuts a range the same way, and a
// change of its start or end keeps the blocks.
func (r Range) BlockOf(ip netip.Addr) netip.Prefix {
	return netip.PrefixFrom(ip, r.subnet.Addr().BitLen()-r.blockHostBits()).Masked()
}

func (r Range) blockHostBits() int {
	limit := blockHostBits4
	if !r.Is4() {
		limit = blockHostBits6
	}
	hostBits := r.subnet.Addr().BitLen() - r.subnet.Bits()
	return min(limit, max(blockMinHostBits, hostBits-blocksPerSubnetBits), hostBits)
}

// BlockPart returns the part of r that block b covers, or false when r
// hands out none of b's addresses.
func (r Range) BlockPart(b netip.Prefix) (Range, bool) {
	if !r.subnet.Contains(b.Addr()) {
		return Range{}, false
	}
	start, end := b.Addr(), LastAddr(b)
	if start.Less(r.start) {
		start = r.start
	}
	if r.end.Less(end) {
		end = r.end
	}
	if end.Less(start) {
		return Range{}, false
	}
	sub, err := New(Spec{Subnet: r.subnet, Start: start, End: end, Gateway: r.gateway, Exclude: r.exclude})
	return sub, err == nil
}

// Blocks yields up to MaxBlockTries blocks of r, starting at one derived
// from seed (the holder) so that holders taking their first blocks at once
// do not all race for the same one, and wrapping around.
func (r Range) Blocks(seed string) iter.Seq[netip.Prefix] {
	return func(yield func(netip.Prefix) bool) {
		first, last := r.BlockOf(r.start), r.BlockOf(r.end)
		host := uint(r.blockHostBits()) //nolint:gosec // 0 to 8
		base := toU128(first.Addr())
		// n blocks, numbered from base: at most 2^128 / 4, so offset+i
		// below never overflows.
		n := toU128(last.Addr()).sub(base).shr(host).inc()
		sum := sha256.Sum256([]byte(seed))
		offset := fromBytes([16]byte(sum[:16])).mod(n)
		tries := uint64(MaxBlockTries)
		if n.hi == 0 && n.lo < tries {
			tries = n.lo
		}
		for i := range tries {
			k, _ := offset.add(u128{0, i})
			k, _ = k.mod(n).shl(host).add(base)
			if !yield(netip.PrefixFrom(toAddr(k, first.Addr()), first.Bits())) {
				return
			}
		}
	}
}
