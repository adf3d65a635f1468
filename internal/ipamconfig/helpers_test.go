// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"net/netip"
	"testing"
)

// netconf wraps an ipam object in a typical Multus macvlan network config.
func netconf(ipam string) string {
	return `{"cniVersion":"1.0.0","name":"net1","type":"macvlan","master":"eth0","mode":"bridge","ipam":` + ipam + `}`
}

func addr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("bad test address %q: %v", s, err)
	}
	return a
}

func prefix(t testing.TB, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatalf("bad test prefix %q: %v", s, err)
	}
	return p
}
