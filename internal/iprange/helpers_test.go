// SPDX-License-Identifier: Apache-2.0

package iprange_test

import (
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// parseRange builds the Range that ipamconfig.Parse makes of an ipam
// object, so tests exercise ranges as configured.
func parseRange(t testing.TB, ipam string) iprange.Range {
	t.Helper()
	cfg, err := ipamconfig.Parse([]byte(`{"name":"test","ipam":` + ipam + `}`))
	if err != nil {
		t.Fatalf("Parse(%s): %v", ipam, err)
	}
	return cfg.Ranges[0]
}

func mustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("bad test address %q: %v", s, err)
	}
	return a
}

func mustPrefix(t testing.TB, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatalf("bad test prefix %q: %v", s, err)
	}
	return p
}
