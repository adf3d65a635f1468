// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"fmt"
	"net/netip"
)

// ValidateIP reports why ip cannot be an IPReservation's spec.ip, or nil.
// It is the Go side of the CRD's rule `isIP(self) && ip.isCanonical(self)`
// for an address written with ip.String(): Kubernetes' isIP refuses zones
// and IPv4-mapped IPv6 addresses, and netip already writes the canonical
// form. Code that builds reservations checks with it so that what the API
// server would refuse fails early, as a configuration error.
func ValidateIP(ip netip.Addr) error {
	switch {
	case !ip.IsValid():
		return fmt.Errorf("not an IP address")
	case ip.Zone() != "":
		return fmt.Errorf("%s has an IPv6 zone", ip)
	case ip.Is4In6():
		return fmt.Errorf("%s is an IPv4-mapped IPv6 address", ip)
	case len(ip.String()) > IPMaxLength:
		return fmt.Errorf("%s is longer than %d characters", ip, IPMaxLength)
	}
	return nil
}
