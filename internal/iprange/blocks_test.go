// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"crypto/sha256"
	"math/big"
	"net/netip"
	"slices"
	"testing"
)

func TestBlockGeometry(t *testing.T) {
	for _, tt := range []struct{ subnet, ip, want, why string }{
		{"10.1.0.0/20", "10.1.3.77", "10.1.3.64/27", "32 IPv4 addresses"},
		{"10.2.0.0/24", "10.2.0.10", "10.2.0.8/30", "a /24 is cut into 64 blocks of 4"},
		{"10.2.0.8/30", "10.2.0.10", "10.2.0.8/30", "a /30 is one block"},
		{"10.2.0.8/31", "10.2.0.9", "10.2.0.8/31", "a subnet smaller than the smallest block is one block"},
		{"fd00::/64", "fd00::1:2", "fd00::1:0/120", "256 IPv6 addresses"},
	} {
		r := MustNew(Spec{Subnet: netip.MustParsePrefix(tt.subnet)})
		if got := r.BlockOf(netip.MustParseAddr(tt.ip)); got != netip.MustParsePrefix(tt.want) {
			t.Errorf("BlockOf(%s, %s) = %s, want %s (%s)", tt.subnet, tt.ip, got, tt.want, tt.why)
		}
	}

	// A range that starts and ends inside blocks, with an exclude and a gateway.
	r := MustNew(Spec{
		Subnet: netip.MustParsePrefix("10.3.0.0/20"), Start: netip.MustParseAddr("10.3.0.10"), End: netip.MustParseAddr("10.3.0.200"),
		Gateway: netip.MustParseAddr("10.3.0.33"), Exclude: []netip.Prefix{netip.MustParsePrefix("10.3.0.64/27")},
	})
	// Of depends only on the subnet: a range whose start or end changed
	// keeps its blocks.
	if got, whole := r.BlockOf(netip.MustParseAddr("10.3.0.77")), MustNew(Spec{Subnet: r.Subnet()}).BlockOf(netip.MustParseAddr("10.3.0.77")); got != whole {
		t.Errorf("BlockOf a range = %s, of its whole subnet = %s: holders would cut it differently", got, whole)
	}
	blocks := slices.Collect(r.Blocks("node-a"))
	if len(blocks) != 7 { // 10.3.0.0/27 .. 10.3.0.192/27
		t.Fatalf("Blocks(10.3.0.10-10.3.0.200) = %v, want the 7 /27s it touches", blocks)
	}
	seen := map[netip.Prefix]bool{}
	for _, b := range blocks {
		if seen[b] || b.Bits() != 27 || !r.Subnet().Contains(b.Addr()) {
			t.Errorf("block %s repeated or not a /27 of the range", b)
		}
		seen[b] = true
	}
	if slices.Collect(r.Blocks("node-b"))[0] == blocks[0] && slices.Collect(r.Blocks("node-c"))[0] == blocks[0] {
		t.Errorf("three holders start at the same block %s: they would race for it", blocks[0])
	}
	if again := slices.Collect(r.Blocks("node-a")); !slices.Equal(again, blocks) {
		t.Errorf("Blocks is not deterministic for one seed: %v, then %v", blocks, again)
	}
	for _, tt := range []struct {
		block      string
		start, end string // "" when the range hands out nothing there
	}{
		{"10.3.0.0/27", "10.3.0.10", "10.3.0.31"},
		{"10.3.0.32/27", "10.3.0.32", "10.3.0.63"},
		{"10.3.0.64/27", "", ""},
		{"10.3.0.192/27", "10.3.0.192", "10.3.0.200"},
		{"10.3.0.224/27", "", ""},
		{"10.4.0.0/27", "", ""},
	} {
		sub, ok := r.BlockPart(netip.MustParsePrefix(tt.block))
		if ok != (tt.start != "") {
			t.Errorf("BlockPart(%s) ok = %v, want %v", tt.block, ok, tt.start != "")
			continue
		}
		if !ok {
			continue
		}
		if sub.Start().String() != tt.start || sub.End().String() != tt.end {
			t.Errorf("BlockPart(%s) = %s-%s, want %s-%s", tt.block, sub.Start(), sub.End(), tt.start, tt.end)
		}
		if sub.Usable(netip.MustParseAddr("10.3.0.33")) == nil {
			t.Errorf("BlockPart(%s) hands out the gateway", tt.block)
		}
	}

	huge := MustNew(Spec{Subnet: netip.MustParsePrefix("fd00::/48")})
	if got := len(slices.Collect(huge.Blocks("node-a"))); got != MaxBlockTries {
		t.Errorf("a /48 yields %d blocks to try, want at most %d", got, MaxBlockTries)
	}
}

// bigBlocks is Blocks as it was computed with math/big before the
// geometry moved onto u128: the cross-check of TestBlocksMatchesBig.
func bigBlocks(r Range, seed string) []netip.Prefix {
	first, last := r.BlockOf(r.Start()), r.BlockOf(r.End())
	size := new(big.Int).Lsh(big.NewInt(1), uint(max(0, first.Addr().BitLen()-first.Bits())))
	base := new(big.Int).SetBytes(first.Addr().AsSlice())
	n := new(big.Int).Sub(new(big.Int).SetBytes(last.Addr().AsSlice()), base)
	n.Div(n, size).Add(n, big.NewInt(1))
	sum := sha256.Sum256([]byte(seed))
	offset := new(big.Int).Mod(new(big.Int).SetBytes(sum[:16]), n)
	tries := MaxBlockTries
	if n.IsInt64() && n.Int64() < int64(tries) {
		tries = int(n.Int64())
	}
	buf := make([]byte, first.Addr().BitLen()/8)
	k := new(big.Int)
	var out []netip.Prefix
	for i := range tries {
		k.Add(offset, big.NewInt(int64(i))).Mod(k, n).Mul(k, size).Add(k, base)
		addr, _ := netip.AddrFromSlice(k.FillBytes(buf))
		out = append(out, netip.PrefixFrom(addr, first.Bits()))
	}
	return out
}

func TestBlocksMatchesBig(t *testing.T) {
	for _, spec := range []Spec{
		{Subnet: netip.MustParsePrefix("10.0.0.0/8")},
		{Subnet: netip.MustParsePrefix("10.2.0.0/24"), Start: netip.MustParseAddr("10.2.0.100"), End: netip.MustParseAddr("10.2.0.130")},
		{Subnet: netip.MustParsePrefix("10.2.0.8/31")},
		{Subnet: netip.MustParsePrefix("10.2.0.9/32")},
		{Subnet: netip.MustParsePrefix("0.0.0.0/0")},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
		{Subnet: netip.MustParsePrefix("fd00::/120")},
		{Subnet: netip.MustParsePrefix("fd00::/126")},
		{Subnet: netip.MustParsePrefix("::/0")},
		{Subnet: netip.MustParsePrefix("fd00::/64"), Start: netip.MustParseAddr("fd00::ffff:fff0"), End: netip.MustParseAddr("fd00::1:0:0:10")},
	} {
		r := MustNew(spec)
		for _, seed := range []string{"", "node-a", "node-b", "ipkeeper-controller"} {
			if got, want := slices.Collect(r.Blocks(seed)), bigBlocks(r, seed); !slices.Equal(got, want) {
				t.Errorf("Blocks(%s, %q) differs from math/big's: %d blocks from %v, want %d from %v", r, seed, len(got), got[:min(3, len(got))], len(want), want[:min(3, len(want))])
			}
		}
	}
}
