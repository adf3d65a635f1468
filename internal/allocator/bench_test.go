// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// BenchmarkCandidate is what the agent does per ADD on a large network:
// pick a candidate of a /16 IPv4 or /64 IPv6 range with a gateway and
// excludes, half (or 10k) of its addresses taken. The arithmetic is
// compared against math/big in iprange's BenchmarkAt.
func BenchmarkCandidate(b *testing.B) {
	v4 := parseRange(b, `{"range":"10.10.0.0/16","gateway":"10.10.0.1","exclude":["10.10.0.0/24","10.10.200.0/22","10.10.255.0/24"]}`)
	v6 := parseRange(b, `{"range":"fd00::/64","gateway":"fd00::1","exclude":["fd00::/120","fd00::8000:0:0:0/66"]}`)
	rng := rand.New(rand.NewPCG(7, 7))

	randomHalf := map[netip.Addr]bool{}
	for a := range v4.Walk(v4.Start()) {
		if rng.IntN(2) == 0 {
			randomHalf[a] = true
		}
	}
	// The lower half taken as one block: seeds landing in it scan up to
	// 32k addresses, the worst realistic case for a /16.
	lowerHalf := netip.MustParsePrefix("10.10.0.0/17")

	tenK := map[netip.Addr]bool{}
	for len(tenK) < 10000 {
		var h [16]byte
		for i := range h {
			h[i] = byte(rng.UintN(256))
		}
		tenK[v6.At(h)] = true
	}
	// 10k taken as one block from the start of the /64.
	block := map[netip.Addr]bool{}
	for a := range v6.Walk(v6.Start()) {
		if len(block) == 10000 {
			break
		}
		block[a] = true
	}

	cases := []struct {
		name  string
		r     iprange.Range
		taken func(netip.Addr) bool
	}{
		{"v4-/16-50%-random", v4, func(a netip.Addr) bool { return randomHalf[a] }},
		{"v4-/16-50%-lower-half", v4, lowerHalf.Contains},
		{"v6-/64-10k-random", v6, func(a netip.Addr) bool { return tenK[a] }},
		{"v6-/64-10k-block", v6, func(a netip.Addr) bool { return block[a] }},
	}
	seeds := make([]string, 1024)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("pod-%d/net1", i)
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := Candidate(c.r, c.taken, seeds[i%len(seeds)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
