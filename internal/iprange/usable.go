// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrNotUsable is wrapped by Usable; the wrapping error says why.
var ErrNotUsable = errors.New("address not usable")

// Usable reports whether ip may be handed out from r (for static requests):
// nil, or an error wrapping ErrNotUsable that says why — outside the range,
// the network or broadcast address, the gateway, or excluded.
// Whether ip is already taken is the caller's business.
func (r Range) Usable(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: no address given", ErrNotUsable)
	}
	if ip.Zone() != "" {
		return fmt.Errorf("%w: %s has a zone", ErrNotUsable, ip)
	}
	if !r.subnet.Contains(ip) {
		return fmt.Errorf("%w: %s is outside range %s", ErrNotUsable, ip, r)
	}
	if ip.Less(r.start) || r.end.Less(ip) {
		// Name the two addresses New keeps out of every range.
		if ip == r.subnet.Addr() {
			what := "network address"
			if !ip.Is4() {
				what = "subnet-router anycast address"
			}
			return fmt.Errorf("%w: %s is the %s of range %s", ErrNotUsable, ip, what, r)
		}
		if ip.Is4() && ip == LastAddr(r.subnet) {
			return fmt.Errorf("%w: %s is the broadcast address of range %s", ErrNotUsable, ip, r)
		}
		return fmt.Errorf("%w: %s is outside %s-%s of range %s", ErrNotUsable, ip, r.start, r.end, r)
	}
	if ip == r.gateway {
		return fmt.Errorf("%w: %s is the gateway of range %s", ErrNotUsable, ip, r)
	}
	for _, p := range r.exclude {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is excluded by %s in range %s", ErrNotUsable, ip, p, r)
		}
	}
	return nil
}

// UsableIn reports whether some range of a pool may hand out ip: nil, or
// why not — the reason of the range whose subnet contains ip, else that it
// is outside every range (pool names the pool in that message).
func UsableIn(ranges []Range, ip netip.Addr, pool string) error {
	var why error
	for _, r := range ranges {
		err := r.Usable(ip)
		if err == nil {
			return nil
		}
		if r.Contains(ip) {
			why = err
		}
	}
	if why == nil {
		why = fmt.Errorf("%w: %s is outside every range of IPPool %q", ErrNotUsable, ip, pool)
	}
	return why
}
