package ipamconfig

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
)

// Config is a parsed and validated ipkeeper network configuration.
type Config struct {
	// Name is the top-level network name, the identity of the address pool.
	Name string
	// CNIVersion is passed through unchecked; the CNI library validates it.
	CNIVersion string
	// IPAMType is ipam.type as given (normally "ipkeeper"); not checked here.
	IPAMType string
	// ClaimReference is args.cni.ipam-claim-reference, the IPAMClaim an
	// attachment uses in setups where no webhook writes it into the pod's
	// networks annotation; "" when not given.
	ClaimReference string
	// AllowPersistentIPs is the top-level allowPersistentIPs flag.
	AllowPersistentIPs bool
	// Ranges holds one range per IP family (so at most two), in
	// configuration order: ipam.range first, then ipam.ipRanges.
	Ranges []Range
	// Routes are ipam.routes with masked destinations.
	Routes []*types.Route
	// DNS is ipam.dns with validated nameservers.
	DNS types.DNS
	// StaticIPs are the addresses requested through runtimeConfig.ips and
	// args.cni.ips, at most one per family. Addr is the requested address
	// (not masked); Bits is the prefix length of the range that contains it.
	StaticIPs []netip.Prefix
}

// Range is one validated address range. Addresses handed out are
// Start..End (inclusive) minus Gateway and Exclude; Start and End already
// keep the network (and IPv4 broadcast) address out.
type Range struct {
	// Subnet is the masked CIDR the range lives in.
	Subnet netip.Prefix
	// Start and End are the inclusive usable bounds, same family as Subnet,
	// Start <= End, both inside Subnet.
	Start, End netip.Addr
	// Exclude lists masked prefixes of Subnet's family, each overlapping
	// Subnet. They may overlap each other and reach outside Start..End.
	Exclude []netip.Prefix
	// Gateway is inside Subnet, or the zero Addr when none is configured.
	Gateway netip.Addr
}

// String renders the range as "subnet (start-end)", the form used in errors.
func (r Range) String() string {
	return r.Subnet.String() + " (" + r.Start.String() + "-" + r.End.String() + ")"
}

// Is4 reports whether r is an IPv4 range.
func (r Range) Is4() bool { return r.Subnet.Addr().Is4() }

// RangeFor returns the configured range whose Subnet contains ip.
func (c *Config) RangeFor(ip netip.Addr) (Range, bool) {
	for _, r := range c.Ranges {
		if r.Subnet.Contains(ip) {
			return r, true
		}
	}
	return Range{}, false
}
