// SPDX-License-Identifier: Apache-2.0

// Package macaddr is the MAC address of an IPAMClaim's interface: derived
// from the claim's address, so that it lives exactly as long as the
// address and follows it wherever ipkeeper keeps the address (stop/start,
// live migration, NAD swap on one network, retention, restore, a move to
// another namespace), with no object or write of its own.
//
// Why derived and not allocated: an allocated MAC would need its own lock
// object and its own copy of every rule that keeps, lends, retains, passes
// and frees an address. Derived, it is unique wherever the address is: two
// claims on one network never hold one IPv4 address, so never one MAC. Two
// isolated networks with overlapping ranges can derive the same MAC for the
// same address, as harmless there as the address itself.
//
// The derivation is OVN-Kubernetes' for IPv4 (0a:58 and the four bytes of
// the address), so a VM moved between an OVN-Kubernetes layer2 network and
// an ipkeeper network with the same address keeps its MAC. A claim with an
// IPv4 address uses its first one; an IPv6-only claim uses the last four
// bytes of its first IPv6 address under another prefix (0e:58), so that no
// IPv6-derived MAC equals an IPv4-derived one. That is unique within a
// range of at most 2^32 addresses (a /96); in a larger IPv6 range two
// addresses that end in the same four bytes derive one MAC.
package macaddr

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
)

// Label records the MAC of a claim's interface on the IPAMClaim, as
// LabelValue writes it: `kubectl get ipamclaims -L ipkeeper.io/mac` shows
// it and `-l ipkeeper.io/mac=0a-58-0a-00-00-05` finds its claim.
const Label = "ipkeeper.io/mac"

// Prefixes of derived MACs: locally administered, unicast.
var (
	prefixIPv4 = [2]byte{0x0a, 0x58}
	prefixIPv6 = [2]byte{0x0e, 0x58}
)

// For derives the MAC of an interface holding ips: from the first IPv4
// address, else from the first IPv6 one; false when ips has no valid
// address.
func For(ips []netip.Addr) (net.HardwareAddr, bool) {
	for _, ip := range ips {
		if ip.Is4() || ip.Is4In6() {
			b := ip.Unmap().As4()
			return net.HardwareAddr{prefixIPv4[0], prefixIPv4[1], b[0], b[1], b[2], b[3]}, true
		}
	}
	for _, ip := range ips {
		if ip.Is6() {
			b := ip.As16()
			return net.HardwareAddr{prefixIPv6[0], prefixIPv6[1], b[12], b[13], b[14], b[15]}, true
		}
	}
	return nil, false
}

// OwnAnnotation records on a VM's claim the MAC its interface sets
// itself (KubeVirt's interfaces[].macAddress), written by
// ipkeeper-controller's claims controller: then that MAC is the
// interface's, and the claim's label shows it.
const OwnAnnotation = "ipkeeper.io/interface-mac"

// OfClaim is the MAC of the claim's interface: its owner's own
// (OwnAnnotation; own is true), else derived from the addresses its
// status records; ok is false while it has neither.
func OfClaim(claim *ipamclaimsv1alpha1.IPAMClaim) (mac net.HardwareAddr, own, ok bool) {
	if mac, err := net.ParseMAC(claim.Annotations[OwnAnnotation]); err == nil && len(mac) == 6 {
		return mac, true, true
	}
	mac, ok = For(claimstatus.Addresses(claim))
	return mac, false, ok
}

// LabelValue is mac as a label value (a label cannot hold a colon):
// 0a-58-0a-00-00-05.
func LabelValue(mac net.HardwareAddr) string {
	return strings.ReplaceAll(mac.String(), ":", "-")
}

// FromLabel reads a LabelValue.
func FromLabel(v string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(strings.ReplaceAll(v, "-", ":"))
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("label %s: %q is not a MAC address written as 0a-58-0a-00-00-05", Label, v)
	}
	return mac, nil
}
