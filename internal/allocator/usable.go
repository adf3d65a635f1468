package allocator

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// ErrNotUsable is wrapped by Usable; the wrapping error says why.
var ErrNotUsable = errors.New("address not usable")

// Usable reports whether ip may be handed out from r (for static requests):
// nil, or an error wrapping ErrNotUsable that says why — outside the range,
// the network or broadcast address, the gateway, or excluded.
// Whether ip is already taken is the caller's business.
func Usable(r ipamconfig.Range, ip netip.Addr) error {
	if err := checkRange(r); err != nil {
		return err
	}
	if !ip.IsValid() {
		return fmt.Errorf("%w: no address given", ErrNotUsable)
	}
	if ip.Zone() != "" {
		return fmt.Errorf("%w: %s has a zone", ErrNotUsable, ip)
	}
	if ip.Is4() != r.Start.Is4() || (r.Subnet.IsValid() && !r.Subnet.Contains(ip)) {
		return fmt.Errorf("%w: %s is outside range %s", ErrNotUsable, ip, r)
	}
	if ip.Less(r.Start) || r.End.Less(ip) {
		// Name the two addresses Parse keeps out of every range.
		if r.Subnet.IsValid() {
			if ip == r.Subnet.Masked().Addr() {
				what := "network address"
				if !ip.Is4() {
					what = "subnet-router anycast address"
				}
				return fmt.Errorf("%w: %s is the %s of range %s", ErrNotUsable, ip, what, r)
			}
			if ip.Is4() && ip == lastAddr(r.Subnet) {
				return fmt.Errorf("%w: %s is the broadcast address of range %s", ErrNotUsable, ip, r)
			}
		}
		return fmt.Errorf("%w: %s is outside %s-%s of range %s", ErrNotUsable, ip, r.Start, r.End, r)
	}
	if r.Gateway.IsValid() && ip == r.Gateway.WithZone("") {
		return fmt.Errorf("%w: %s is the gateway of range %s", ErrNotUsable, ip, r)
	}
	for _, p := range r.Exclude {
		if p.IsValid() && p.Contains(ip) {
			return fmt.Errorf("%w: %s is excluded by %s in range %s", ErrNotUsable, ip, p, r)
		}
	}
	return nil
}
