package reservation

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// Name returns the IPReservation name for (network, ip).
//
// Two forms, told apart by their number of dot-separated labels, so they can
// never produce the same name:
//
//	<network>.<ip>            2 labels: the network name is already a DNS label
//	                          (lowercase alphanumerics and '-', at most 63 chars)
//	<prefix>.<sha256>.<ip>    3 labels: any other network name; prefix is a
//	                          readable, lossy hint and the hash makes it unique
//
// The IP label encodes IPv4 as four decimal groups (10-0-0-1) and IPv6 as
// eight fully expanded hex groups (fd00-0000-...-0001), so families cannot
// collide either. IPv4-mapped IPv6 addresses are unmapped and zones dropped:
// they name the same address.
func Name(network string, ip netip.Addr) string {
	ipLabel := ipLabel(ip)
	if isDNSLabel(network) {
		return network + "." + ipLabel
	}
	sum := sha256.Sum256([]byte(network))
	return readablePrefix(network) + "." + hex.EncodeToString(sum[:16]) + "." + ipLabel
}

func ipLabel(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		b := ip.As4()
		return fmt.Sprintf("%d-%d-%d-%d", b[0], b[1], b[2], b[3])
	}
	b := ip.As16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(groups, "-")
}

// isDNSLabel reports whether s is an RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 chars.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// readablePrefix keeps up to 20 characters of the network name that survive
// as a DNS label, so `kubectl get ipreservations` still hints at the network.
func readablePrefix(network string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(network) {
		if b.Len() >= 20 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	p := strings.Trim(b.String(), "-")
	if p == "" {
		return "net"
	}
	return p
}
