// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	"encoding/binary"
	"math/big"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// parseRange builds the Range that ipamconfig.Parse makes of an ipam
// object, so tests exercise the allocator on real parser output.
func parseRange(t testing.TB, ipam string) iprange.Range {
	t.Helper()
	cfg, err := ipamconfig.Parse([]byte(`{"name":"test","ipam":` + ipam + `}`))
	if err != nil {
		t.Fatalf("Parse(%s): %v", ipam, err)
	}
	return cfg.Ranges[0]
}

// takenSet builds a predicate from addresses and prefixes ("10.0.0.1",
// "10.0.0.0/30").
func takenSet(t testing.TB, items ...string) func(netip.Addr) bool {
	t.Helper()
	var ps []netip.Prefix
	for _, s := range items {
		if p, err := netip.ParsePrefix(s); err == nil {
			ps = append(ps, p)
			continue
		}
		a := netip.MustParseAddr(s)
		ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
	}
	return func(a netip.Addr) bool {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// u is a hashed seed of value n.
func u(n uint64) [16]byte { return h128(0, n) }

// h128 is a hashed seed of value hi<<64 | lo.
func h128(hi, lo uint64) [16]byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return b
}

// addrInt is a's integer value.
func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

// tryParse is parseRange for fuzzing, where invalid configs are expected.
func tryParse(conf []byte) (iprange.Range, bool) {
	cfg, err := ipamconfig.Parse(conf)
	if err != nil {
		return iprange.Range{}, false
	}
	return cfg.Ranges[0], true
}
