// SPDX-License-Identifier: Apache-2.0

package blocks

import (
	"crypto/sha256"
	"iter"
	"math/big"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

const (
	// hostBits4 and hostBits6 bound a block's host bits by family: 32 IPv4
	// addresses, 256 IPv6 ones; smaller subnets have smaller blocks (see Of).
	// The IPBlock CRD refuses larger blocks (its spec.cidr rule).
	hostBits4 = 5
	hostBits6 = 8
	// perSubnetBits says how many blocks a small subnet is cut into (64),
	// so that a /24 shared by dozens of holders gives each a block of its
	// own rather than a few of them all of it; minHostBits keeps a block
	// at four addresses or more.
	perSubnetBits = 6
	minHostBits   = 2
	// MaxTries bounds the blocks a holder looks at when it needs a new one
	// (an IPv6 range has too many to look at all); past that, or when
	// every block is held, it borrows.
	MaxTries = 4096
)

// Of returns the block of r that ip lies in. A block's size depends only
// on r's subnet, so every holder cuts a range the same way, and a change of
// its start or end keeps the blocks.
func Of(r iprange.Range, ip netip.Addr) netip.Prefix {
	subnet := r.Subnet()
	limit := hostBits4
	if !r.Is4() {
		limit = hostBits6
	}
	hostBits := subnet.Addr().BitLen() - subnet.Bits()
	host := min(limit, max(minHostBits, hostBits-perSubnetBits), hostBits)
	return netip.PrefixFrom(ip, subnet.Addr().BitLen()-host).Masked()
}

// Part returns the part of r that block b covers, or false when r hands
// out none of b's addresses.
func Part(r iprange.Range, b netip.Prefix) (iprange.Range, bool) {
	if !r.Subnet().Contains(b.Addr()) {
		return iprange.Range{}, false
	}
	start, end := b.Addr(), iprange.LastAddr(b)
	if start.Less(r.Start()) {
		start = r.Start()
	}
	if r.End().Less(end) {
		end = r.End()
	}
	if end.Less(start) {
		return iprange.Range{}, false
	}
	sub, err := iprange.New(iprange.Spec{Subnet: r.Subnet(), Start: start, End: end, Gateway: r.Gateway(), Exclude: r.Excludes()})
	return sub, err == nil
}

// From yields up to MaxTries blocks of r, starting at one derived from
// seed (the holder) so that holders taking their first blocks at once do
// not all race for the same one, and wrapping around.
func From(r iprange.Range, seed string) iter.Seq[netip.Prefix] {
	return func(yield func(netip.Prefix) bool) {
		first, last := Of(r, r.Start()), Of(r, r.End())
		size := new(big.Int).Lsh(big.NewInt(1), uint(max(0, first.Addr().BitLen()-first.Bits()))) //nolint:gosec // 0 to 128
		base := new(big.Int).SetBytes(first.Addr().AsSlice())
		n := new(big.Int).Sub(new(big.Int).SetBytes(last.Addr().AsSlice()), base)
		n.Div(n, size).Add(n, big.NewInt(1))
		sum := sha256.Sum256([]byte(seed))
		offset := new(big.Int).Mod(new(big.Int).SetBytes(sum[:16]), n)
		tries := MaxTries
		if n.IsInt64() && n.Int64() < int64(tries) {
			tries = int(n.Int64())
		}
		buf := make([]byte, first.Addr().BitLen()/8)
		k := new(big.Int)
		for i := range tries {
			k.Add(offset, big.NewInt(int64(i))).Mod(k, n).Mul(k, size).Add(k, base)
			addr, _ := netip.AddrFromSlice(k.FillBytes(buf))
			if !yield(netip.PrefixFrom(addr, first.Bits())) {
				return
			}
		}
	}
}
