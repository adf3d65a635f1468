// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func checkMod(t testing.TB, x, m u128) {
	t.Helper()
	if m == (u128{}) {
		return
	}
	want := new(big.Int).Mod(x.big(), m.big())
	if got := x.mod(m); got.big().Cmp(want) != 0 {
		t.Fatalf("%v mod %v = %v, want %v", x.big(), m.big(), got.big(), want)
	}
}

func TestU128Mod(t *testing.T) {
	edges := []u128{{0, 1}, {0, 2}, {0, 3}, {0, 1<<63 + 1}, {0, ^uint64(0)}, {1, 0}, {1, 1}, {1 << 63, 0}, {1 << 63, 1}, {^uint64(0), 0}, maxU128, {0xdead, 0xbeef}}
	for _, x := range append(edges, u128{}) {
		for _, m := range edges {
			checkMod(t, x, m)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		x := u128{rng.Uint64(), rng.Uint64()}
		m := u128{rng.Uint64() >> rng.IntN(64), rng.Uint64()}
		if rng.IntN(2) == 0 {
			m.hi = 0
		}
		checkMod(t, x, m)
	}
}

func FuzzU128Mod(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint64(0), uint64(3))
	f.Add(^uint64(0), ^uint64(0), uint64(1)<<63, uint64(1))
	f.Fuzz(func(t *testing.T, xh, xl, mh, ml uint64) {
		checkMod(t, u128{xh, xl}, u128{mh, ml})
	})
}

func TestU128AddSub(t *testing.T) {
	sum, c := maxU128.add(u128{0, 1})
	if sum != (u128{}) || !c {
		t.Errorf("max+1 = %v, carry %v", sum, c)
	}
	sum, c = (u128{0, ^uint64(0)}).add(u128{0, 1})
	if sum != (u128{1, 0}) || c {
		t.Errorf("lo carry: %v, %v", sum, c)
	}
	if d := (u128{1, 0}).sub(u128{0, 1}); d != (u128{0, ^uint64(0)}) {
		t.Errorf("borrow: %v", d)
	}
	if (u128{1, 0}).cmp(u128{0, ^uint64(0)}) != 1 || (u128{0, 1}).cmp(u128{0, 1}) != 0 || (u128{0, 1}).cmp(u128{1, 0}) != -1 {
		t.Errorf("cmp wrong")
	}
}

func TestU128AddrRoundTrip(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "10.1.2.3", "255.255.255.255", "::", "fd00::1", "::ffff:10.0.0.1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		a := netip.MustParseAddr(s)
		if got := toAddr(toU128(a), a); got != a {
			t.Errorf("round trip %v = %v", a, got)
		}
	}
	if v := toU128(netip.MustParseAddr("0.0.1.0")); v != (u128{0, 256}) {
		t.Errorf("toU128(0.0.1.0) = %v", v)
	}
	if v := toU128(netip.MustParseAddr("::1:0:0:0:0")); v != (u128{1, 0}) {
		t.Errorf("toU128(::1:0:0:0:0) = %v", v)
	}
}
