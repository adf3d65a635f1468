// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// PluginType is ipam.type of the networks ipkeeper serves (the name the
// agent installs its plugin binary under).
const PluginType = "ipkeeper"

// Config is a parsed and validated ipkeeper network configuration.
type Config struct {
	// Name is the top-level network name, the identity of the address pool.
	Name string
	// CNIVersion is passed through unchecked; the CNI library validates it.
	CNIVersion string
	// IPAMType is ipam.type as given (normally "ipkeeper"); not checked here.
	IPAMType string
	// Pool is ipam.pool: the IPPool the network draws from. "" when the
	// ranges are inline; the network's pool is then its inline pool.
	Pool string
	// NetworkName is ipam.network_name (whereabouts' key): inline networks
	// overlap only if they declare different ones, saying they are
	// separate L2 networks that may reuse addresses.
	NetworkName string
	// StickyMAC is ipam.sticky_mac: an attachment presenting a MAC
	// (MAC, else RuntimeMAC) gets back the address a pod of its namespace
	// released with that MAC while it still cools down (its pool's
	// reuseCooldown), on whichever node it starts.
	StickyMAC bool
	// RuntimeMAC is runtimeConfig.mac (the CNI "mac" capability) on a
	// StickyMAC network; nil when not given, and elsewhere.
	RuntimeMAC net.HardwareAddr
	// ClaimReference is args.cni.ipam-claim-reference, the IPAMClaim an
	// attachment uses in setups where no webhook writes it into the pod's
	// networks annotation; "" when not given.
	ClaimReference string
	// AllowPersistentIPs is the top-level allowPersistentIPs flag.
	AllowPersistentIPs bool
	// Ranges holds the inline ranges, one per IP family (so at most two),
	// in configuration order: ipam.range first, then ipam.ipRanges. Empty
	// when Pool is set: the pool's ranges are read from the API.
	Ranges []iprange.Range
	// Routes are ipam.routes with masked destinations.
	Routes []*types.Route
	// DNS is ipam.dns with validated nameservers.
	DNS types.DNS
	// StaticIPs are the addresses requested through runtimeConfig.ips and
	// args.cni.ips, at most one per family. Addr is the requested address
	// (not masked); Bits is the prefix length of the range that contains
	// it, or, with a pool, as written (the address's length when bare).
	StaticIPs []netip.Prefix
	// IgnoredKeys are the whereabouts-only ipam keys the configuration
	// sets ("ipam.log_file", "ipam.kubernetes.kubeconfig" ...), sorted:
	// left from whereabouts, they do nothing here.
	IgnoredKeys []string
	// UnknownKeys are the keys of the ipam section (its ipRanges entries,
	// routes and dns included) that neither ipkeeper nor whereabouts
	// reads, sorted, each with the known key it is closest to: ignored,
	// and told (the agent's log, an Event on the NAD, kubectl ipkeeper
	// why). A misspelt key that keeps addresses from being handed out is
	// refused by Parse instead.
	UnknownKeys []UnknownKey
}

// PoolName returns the IPPool the network's addresses belong to: ipam.pool,
// else the network's inline pool.
func (c *Config) PoolName() string {
	if c.Pool != "" {
		return c.Pool
	}
	return naming.InlinePool(c.Name)
}

// RangeFor returns the configured range whose subnet contains ip.
func (c *Config) RangeFor(ip netip.Addr) (iprange.Range, bool) {
	for _, r := range c.Ranges {
		if r.Contains(ip) {
			return r, true
		}
	}
	return iprange.Range{}, false
}
