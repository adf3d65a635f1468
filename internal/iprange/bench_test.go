// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"crypto/sha256"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// bigRange is the math/big + net/netip alternative to u128 that the
// benchmarks weigh it against: At with the index arithmetic done in
// big.Int, the per-range values precomputed as New does for u128.
type bigRange struct {
	Range
	size   *big.Int
	widths []*big.Int // size of each free span
	los    []*big.Int // first address of each free span
}

func newBigRange(r Range) bigRange {
	b := bigRange{Range: r, size: new(big.Int)}
	for _, s := range r.free {
		lo, hi := addrBig(s.lo), addrBig(s.hi)
		w := new(big.Int).Sub(hi, lo)
		w.Add(w, big.NewInt(1))
		b.widths = append(b.widths, w)
		b.los = append(b.los, lo)
		b.size.Add(b.size, w)
	}
	return b
}

func addrBig(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func (b bigRange) at(h [16]byte) netip.Addr {
	off := new(big.Int).SetBytes(h[:])
	off.Mod(off, b.size)
	k := 0
	for ; k < len(b.widths)-1 && off.Cmp(b.widths[k]) >= 0; k++ {
		off.Sub(off, b.widths[k])
	}
	off.Add(off, b.los[k])
	var buf [16]byte
	off.FillBytes(buf[:])
	if b.Is4() {
		return netip.AddrFrom4([4]byte(buf[12:]))
	}
	return netip.AddrFrom16(buf)
}

// benchRanges are what a large network looks like: a /16 IPv4 and a /64
// IPv6 range, each with a gateway and excludes.
func benchRanges(tb testing.TB) (v4, v6 Range) {
	tb.Helper()
	p := netip.MustParsePrefix
	var err error
	v4, err = New(Spec{Subnet: p("10.10.0.0/16"), Gateway: netip.MustParseAddr("10.10.0.1"),
		Exclude: []netip.Prefix{p("10.10.0.0/24"), p("10.10.200.0/22"), p("10.10.255.0/24")}})
	if err != nil {
		tb.Fatal(err)
	}
	v6, err = New(Spec{Subnet: p("fd00::/64"), Gateway: netip.MustParseAddr("fd00::1"),
		Exclude: []netip.Prefix{p("fd00::/120"), p("fd00::8000:0:0:0/66")}})
	if err != nil {
		tb.Fatal(err)
	}
	return v4, v6
}

// The alternative computes the same addresses: it is a faithful rival,
// and a cross-check of u128.
func TestAtMatchesBig(t *testing.T) {
	v4, v6 := benchRanges(t)
	wide := MustNew(Spec{Subnet: netip.MustParsePrefix("::/0"), Exclude: []netip.Prefix{netip.MustParsePrefix("::ffff:0:0/96")}})
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range []Range{v4, v6, wide} {
		b := newBigRange(r)
		if b.size.Cmp(r.Size()) != 0 {
			t.Fatalf("%v: Size %v, big %v", r, r.Size(), b.size)
		}
		for range 10000 {
			var h [16]byte
			for i := range h {
				h[i] = byte(rng.UintN(256))
			}
			if got, want := r.At(h), b.at(h); got != want {
				t.Fatalf("%v: At(%x) = %v, big %v", r, h, got, want)
			}
		}
	}
}

// BenchmarkPick is the per-ADD choice (allocator.Candidate): hash the
// seed, map it to a usable address, walk up to the first one not taken,
// with half of the /16 or 10k addresses of the /64 taken at random, once
// with u128 and once with math/big index arithmetic.
func BenchmarkPick(b *testing.B) {
	v4, v6 := benchRanges(b)
	rng := rand.New(rand.NewPCG(7, 7))
	taken4 := map[netip.Addr]bool{}
	for a := range v4.Walk(v4.Start()) {
		if rng.IntN(2) == 0 {
			taken4[a] = true
		}
	}
	taken6 := map[netip.Addr]bool{}
	for len(taken6) < 10000 {
		var h [16]byte
		for i := range h {
			h[i] = byte(rng.UintN(256))
		}
		taken6[v6.At(h)] = true
	}
	seeds := make([]string, 1024)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("pod-%d/net1", i)
	}
	for _, c := range []struct {
		name  string
		r     Range
		taken map[netip.Addr]bool
	}{{"v4-/16-50%-taken", v4, taken4}, {"v6-/64-10k-taken", v6, taken6}} {
		br := newBigRange(c.r)
		for _, v := range []struct {
			name string
			at   func([16]byte) netip.Addr
		}{{"u128", c.r.At}, {"big", br.at}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					sum := sha256.Sum256([]byte(seeds[i%len(seeds)]))
					found := false
					for a := range c.r.Walk(v.at([16]byte(sum[:16]))) {
						if !c.taken[a] {
							found = true
							break
						}
					}
					if !found {
						b.Fatal("exhausted")
					}
					i++
				}
			})
		}
	}
}

// BenchmarkAt isolates the index arithmetic that u128 exists for.
func BenchmarkAt(b *testing.B) {
	v4, v6 := benchRanges(b)
	for _, r := range []Range{v4, v6} {
		br := newBigRange(r)
		fam := "v4-/16"
		if !r.Is4() {
			fam = "v6-/64"
		}
		for _, v := range []struct {
			name string
			at   func([16]byte) netip.Addr
		}{{"u128", r.At}, {"big", br.at}} {
			b.Run(fam+"/"+v.name, func(b *testing.B) {
				var h [16]byte
				for b.Loop() {
					h[15]++
					h[3] += 7
					if !v.at(h).IsValid() {
						b.Fatal("no address")
					}
				}
			})
		}
	}
}

// BenchmarkUsable is the static-IP and claim check: no 128-bit arithmetic,
// only address comparisons, so it has no rival.
func BenchmarkUsable(b *testing.B) {
	v4, v6 := benchRanges(b)
	for _, c := range []struct {
		name string
		r    Range
		ip   netip.Addr
	}{
		{"v4-usable", v4, netip.MustParseAddr("10.10.100.7")},
		{"v4-excluded", v4, netip.MustParseAddr("10.10.255.7")},
		{"v6-usable", v6, netip.MustParseAddr("fd00::7:0:1")},
		{"v6-excluded", v6, netip.MustParseAddr("fd00::8000:0:0:7")},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = c.r.Usable(c.ip)
			}
		})
	}
}
