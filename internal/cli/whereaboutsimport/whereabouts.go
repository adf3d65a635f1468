// SPDX-License-Identifier: Apache-2.0

package whereaboutsimport

import (
	"fmt"
	"math/big"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// PluginType is ipam.type of the networks whereabouts serves.
const PluginType = "whereabouts"

// Version is the whereabouts release whose object format this package reads.
const Version = "v0.9.4"

// Pool is a whereabouts IPPool (whereabouts.cni.cncf.io/v1alpha1): one per
// (network_name, range), named networkName-range with ':' and '/' as '-'.
type Pool struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Range is spec.range, a CIDR; allocation offsets count from its address.
	Range string `json:"range"`
	// Allocations is spec.allocations: decimal offset -> holder.
	Allocations map[string]Allocation `json:"allocations"`
}

// Allocation is one spec.allocations value.
type Allocation struct {
	ContainerID string `json:"id"`
	PodRef      string `json:"podref"`
	IfName      string `json:"ifname,omitempty"`
}

// Overlapping is a whereabouts OverlappingRangeIPReservation: the
// cluster-wide record of one address, named NormalizedName(ip, network_name).
type Overlapping struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	ContainerID string `json:"containerid,omitempty"`
	PodRef      string `json:"podref"`
	IfName      string `json:"ifname,omitempty"`
}

// Address is one address whereabouts allocated.
type Address struct {
	// Pool is the whereabouts IPPool, "namespace/name".
	Pool string
	// NetworkName is the pool's ipam.network_name ("" for none).
	NetworkName string
	// Subnet is the pool's range, masked.
	Subnet       netip.Prefix
	IP           netip.Addr
	ContainerID  string
	PodNamespace string
	PodName      string
	IfName       string
}

// Addresses lists a pool's allocations, sorted by address. An allocation
// that cannot be read (a bad offset, a podref that is not "ns/name") is
// returned as an error naming the pool, the key and the value; the others
// are still listed.
func Addresses(p Pool) ([]Address, []error) {
	where := p.Namespace + "/" + p.Name
	first, err := netip.ParsePrefix(strings.TrimSpace(p.Range))
	if err != nil {
		return nil, []error{fmt.Errorf("whereabouts IPPool %s: spec.range %q: not a CIDR: %w", where, p.Range, err)}
	}
	network, ok := NetworkName(p.Name, p.Range)
	if !ok {
		return nil, []error{fmt.Errorf("whereabouts IPPool %s: the name does not end in its spec.range %q as whereabouts %s names pools ([network_name-]range); a node-slice pool?", where, p.Range, Version)}
	}
	var out []Address
	var errs []error
	for key, a := range p.Allocations {
		off, err := strconv.ParseUint(key, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("whereabouts IPPool %s: spec.allocations key %q: not a decimal offset", where, key))
			continue
		}
		ip, ok := addOffset(first.Addr(), off)
		if !ok || !first.Masked().Contains(ip) {
			errs = append(errs, fmt.Errorf("whereabouts IPPool %s: spec.allocations key %q: offset outside spec.range %s", where, key, p.Range))
			continue
		}
		ns, name, ok := strings.Cut(a.PodRef, "/")
		if !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Errorf("whereabouts IPPool %s: spec.allocations[%s].podref %q: want namespace/name", where, key, a.PodRef))
			continue
		}
		out = append(out, Address{
			Pool: where, NetworkName: network, Subnet: first.Masked(), IP: ip,
			ContainerID: a.ContainerID, PodNamespace: ns, PodName: name, IfName: a.IfName,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IP.Less(out[j].IP) })
	return out, errs
}

// addOffset is whereabouts' iphelpers.IPAddOffset: the range's address plus
// the offset, false past the end of the family.
func addOffset(ip netip.Addr, off uint64) (netip.Addr, bool) {
	n := new(big.Int).SetBytes(ip.AsSlice())
	n.Add(n, new(big.Int).SetUint64(off))
	b := n.Bytes()
	size := ip.BitLen() / 8
	if len(b) > size {
		return netip.Addr{}, false
	}
	buf := make([]byte, size)
	copy(buf[size-len(b):], b)
	out, ok := netip.AddrFromSlice(buf)
	return out, ok
}

// normalizeRange is whereabouts' normalizeRange (pkg/storage/kubernetes):
// the range as it appears in pool names.
func normalizeRange(r string) string {
	if strings.HasSuffix(r, ":") {
		r += "0"
	}
	return strings.ReplaceAll(strings.ReplaceAll(r, ":", "-"), "/", "-")
}

// NetworkName returns the ipam.network_name a pool belongs to, read back
// from its name (whereabouts' IPPoolName: "network_name-range", or the
// range alone for no network name). ok is false for a name that does not
// end in the range (node-slice pools, which also carry a node name).
func NetworkName(poolName, rng string) (string, bool) {
	norm := normalizeRange(rng)
	if poolName == norm {
		return "", true
	}
	network, ok := strings.CutSuffix(poolName, "-"+norm)
	return network, ok && network != ""
}

// NormalizedName is whereabouts' NormalizeIP: the name of the
// OverlappingRangeIPReservation of ip on a network_name.
func NormalizedName(ip netip.Addr, networkName string) string {
	s := ip.String()
	if strings.HasSuffix(s, ":") {
		s += "0"
	}
	s = strings.ReplaceAll(s, ":", "-")
	if networkName != "" {
		s = networkName + "-" + s
	}
	return s
}

// Network is a NetworkAttachmentDefinition that delegates IPAM to
// whereabouts or (already switched) to ipkeeper, with its IPAM section
// parsed as ipkeeper will read it.
type Network struct {
	// NAD is "namespace/name".
	NAD    string
	Config *ipamconfig.Config
}

// Networks returns the networks an address's pool serves: those whose
// ipam.network_name is the pool's and one of whose ranges has the pool's
// subnet (whereabouts keys its pools by exactly these two).
func Networks(a Address, nets []Network) []Network {
	var out []Network
	for _, n := range nets {
		if n.Config.NetworkName != a.NetworkName {
			continue
		}
		for _, r := range n.Config.Ranges {
			if r.Subnet() == a.Subnet {
				out = append(out, n)
				break
			}
		}
	}
	return out
}
