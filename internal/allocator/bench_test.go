package allocator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

func BenchmarkCandidate(b *testing.B) {
	v4 := parseRange(b, `{"range":"10.10.0.0/16"}`)
	v6 := parseRange(b, `{"range":"fd00::/64"}`)
	rng := rand.New(rand.NewPCG(7, 7))

	randomHalf := map[netip.Addr]bool{}
	for a := v4.Start; ; a = a.Next() {
		if rng.IntN(2) == 0 {
			randomHalf[a] = true
		}
		if a == v4.End {
			break
		}
	}
	// The lower half taken as one block: seeds landing in it scan up to
	// 32k addresses, the worst realistic case for a /16.
	lowerHalf := netip.MustParsePrefix("10.10.0.0/17")

	tenK := map[netip.Addr]bool{}
	for len(tenK) < 10000 {
		v, _ := toU128(v6.Start).add(u128{0, rng.Uint64() >> 1})
		tenK[toAddr(v, v6.Start)] = true
	}
	// 10k taken as one block from the start of the /64.
	block := map[netip.Addr]bool{}
	for a, i := v6.Start, 0; i < 10000; a, i = a.Next(), i+1 {
		block[a] = true
	}

	cases := []struct {
		name  string
		r     ipamconfig.Range
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
