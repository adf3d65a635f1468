// SPDX-License-Identifier: Apache-2.0

package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// Reservation returns the IPReservation name for (network, ip).
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
func Reservation(network string, ip netip.Addr) string {
	ipLabel := ipLabel(ip)
	if isLabel(network) {
		return network + "." + ipLabel
	}
	sum := sha256.Sum256([]byte(network))
	return hint(network, 20, "net") + "." + hex.EncodeToString(sum[:16]) + "." + ipLabel
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

// Block returns the IPBlock name of block (an aligned prefix) of the pool
// whose reservations are named from poolKey (IPPool.LockKey): the name of
// the reservation of its first address, and its prefix length.
func Block(poolKey string, block netip.Prefix) string {
	return fmt.Sprintf("%s.%d", Reservation(poolKey, block.Masked().Addr()), block.Bits())
}
