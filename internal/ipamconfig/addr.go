// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"net"
	"net/netip"
	"strings"
)

// parseAddr parses a single IP literal for field. Zones are rejected: an
// allocated or configured address is never link-scoped to one interface
// name. So are IPv4-mapped IPv6 addresses: see mappedBlock.
func parseAddr(field, s string) (netip.Addr, error) {
	a, err := parsePlainAddr(field, s)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Is4In6() {
		return netip.Addr{}, mappedErr(field, s, netip.PrefixFrom(a, a.BitLen()))
	}
	return a, nil
}

// parsePlainAddr is parseAddr without the IPv4-mapped check, for callers
// that explain a mapped address better themselves.
func parsePlainAddr(field, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fieldErr(field, ": invalid IP %q%s", s, zoneNote(s))
	}
	if a.Zone() != "" {
		return netip.Addr{}, fieldErr(field, ": invalid IP %q%s", s, zoneNote(s))
	}
	return a, nil
}

// zoneNote explains why a literal with a zone ("fe80::1%eth0") is invalid.
func zoneNote(s string) string {
	if strings.Contains(s, "%") {
		return " (IPv6 zones are not allowed)"
	}
	return ""
}

// parsePrefixOrAddr accepts "a/n" or a bare address (as a single-address
// prefix). The prefix keeps the address as written; callers mask if needed.
func parsePrefixOrAddr(s string) (p netip.Prefix, hadBits bool, ok bool) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p, true, err == nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false, false
	}
	return netip.PrefixFrom(a, a.BitLen()), false, true
}

// mappedBlock is ::ffff:0:0/96, the IPv4-mapped IPv6 addresses. The API
// server refuses them as an IPReservation's spec.ip (see
// v1alpha1.ValidateIP), so a range must not hand them out and a literal
// written in that form is refused with a hint to write it as IPv4.
var mappedBlock = netip.MustParsePrefix(mappedBlockText)

// mappedBlockText is mappedBlock as people write it (netip would print
// ::ffff:0.0.0.0/96).
const mappedBlockText = "::ffff:0:0/96"

// mappedErr refuses the IPv4-mapped literal s (p as parsed), suggesting
// the IPv4 form when p is a whole mapped address or prefix.
func mappedErr(field, s string, p netip.Prefix) error {
	what := "address"
	if p.Bits() < p.Addr().BitLen() {
		what = "prefix, whose addresses an IPReservation cannot hold;"
	} else {
		what += ";"
	}
	if p.Bits() < 96 {
		return fieldErr(field, " %q is an IPv4-mapped IPv6 %s write it as IPv4", s, what)
	}
	v4 := p.Addr().Unmap().String()
	if p.Bits() < p.Addr().BitLen() {
		v4 = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).String()
	}
	return fieldErr(field, " %q is an IPv4-mapped IPv6 %s write it as IPv4 %q", s, what, v4)
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func sameFamily(a, b netip.Addr) bool { return a.Is4() == b.Is4() }

// toIPNet converts a prefix to the net.IPNet the CNI types use.
func toIPNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
