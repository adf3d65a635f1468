package ipamconfig

import (
	"net"
	"net/netip"
	"strings"
)

// parseAddr parses a single IP literal. Zones are rejected: an allocated or
// configured address is never link-scoped to one interface name.
func parseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a, true
}

// parsePrefixOrAddr accepts "a/n" or a bare address (as a single-address
// prefix). The prefix keeps the address as written; callers mask if needed.
func parsePrefixOrAddr(s string) (p netip.Prefix, hadBits bool, ok bool) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p, true, err == nil
	}
	a, ok := parseAddr(s)
	if !ok {
		return netip.Prefix{}, false, false
	}
	return netip.PrefixFrom(a, a.BitLen()), false, true
}

// lastAddr returns the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// usableBounds returns the first and last assignable address of p: the
// network address (IPv6: subnet-router anycast) and the IPv4 broadcast
// address are dropped, except on point-to-point prefixes (IPv4 /31 per
// RFC 3021, IPv6 /127 per RFC 6164) and single-address prefixes.
func usableBounds(p netip.Prefix) (first, last netip.Addr) {
	first, last = p.Masked().Addr(), lastAddr(p)
	if p.Addr().BitLen()-p.Bits() <= 1 {
		return first, last
	}
	first = first.Next()
	if p.Addr().Is4() {
		last = last.Prev()
	}
	return first, last
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
