// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Parse parses and validates a CNI network configuration (the bytes a CNI
// plugin reads on stdin). Errors are *FieldError values naming the key and
// the value at fault. Parse does no I/O and never panics.
func Parse(data []byte) (*Config, error) {
	rc, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := checkNetworkName(rc.Name); err != nil {
		return nil, err
	}
	if rc.IPAM == nil {
		return nil, fieldErr("ipam", ": required")
	}
	ipam := rc.IPAM
	keys := ipamObject(data)
	unknown, err := unknownKeys(keys)
	if err != nil {
		return nil, err
	}

	var ranges []iprange.Range
	if ipam.Pool != "" {
		if err := checkPoolRef(ipam); err != nil {
			return nil, err
		}
	} else if ranges, err = parseRanges(ipam); err != nil {
		return nil, err
	}
	cfg := &Config{
		Name:               rc.Name,
		CNIVersion:         rc.CNIVersion,
		ClaimReference:     rc.Args.CNI.ClaimReference,
		IPAMType:           ipam.Type,
		Pool:               ipam.Pool,
		NetworkName:        ipam.NetworkName,
		StickyMAC:          ipam.StickyMAC,
		AllowPersistentIPs: rc.AllowPersistentIPs,
		Ranges:             ranges,
		IgnoredKeys:        ignoredKeys(keys),
		UnknownKeys:        unknown,
	}
	if cfg.Routes, err = parseRoutes(ipam.Routes); err != nil {
		return nil, err
	}
	if cfg.DNS, err = parseDNS(ipam.DNS); err != nil {
		return nil, err
	}
	if cfg.StaticIPs, err = parseStaticIPs(ranges, rc); err != nil {
		return nil, err
	}
	// Only a sticky_mac network reads the MAC; elsewhere it is the main
	// plugin's business alone.
	if cfg.StickyMAC {
		if cfg.RuntimeMAC, err = ParseMAC("runtimeConfig.mac", rc.RuntimeConfig.MAC); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// checkNetworkName applies the CNI specification's rule for network names
// (what the CNI library's skel enforces in the shim) and the API server's
// length limit for IPReservation spec.network, so a name that could never
// be stored fails as a configuration error rather than on every ADD.
func checkNetworkName(name string) error {
	if strings.TrimSpace(name) == "" {
		return fieldErr("name", ": required")
	}
	if utils.ValidateNetworkName(name) != nil {
		return fieldErr("name", " %q: invalid characters; a network name is a letter or digit followed by letters, digits, '_', '.' and '-' (CNI specification)", name)
	}
	// ASCII from here on, so characters are the bytes the API server counts.
	if len(name) > v1alpha1.NetworkMaxLength {
		return fieldErr("name", " %q is %d characters long; at most %d are allowed (IPReservation spec.network)",
			name, len(name), v1alpha1.NetworkMaxLength)
	}
	return nil
}

// parseRanges builds the range list from ipam.range (plus its top-level
// range_start/range_end/exclude, as whereabouts does) and ipam.ipRanges.
func parseRanges(ipam *rawIPAM) ([]iprange.Range, error) {
	var rbs []*rangeBuilder
	if strings.TrimSpace(ipam.Range) != "" {
		rb, err := parseRange("ipam", rawRange{
			Range:      ipam.Range,
			RangeStart: ipam.RangeStart,
			RangeEnd:   ipam.RangeEnd,
			Exclude:    ipam.Exclude,
		})
		if err != nil {
			return nil, err
		}
		rbs = append(rbs, rb)
	} else {
		// Without ipam.range these would silently do nothing.
		if ipam.RangeStart != "" {
			return nil, fieldErr("ipam.range_start", " %q requires ipam.range", ipam.RangeStart)
		}
		if ipam.RangeEnd != "" {
			return nil, fieldErr("ipam.range_end", " %q requires ipam.range", ipam.RangeEnd)
		}
	}
	for i, rr := range ipam.IPRanges {
		rb, err := parseRange(indexed("ipam.ipRanges", i), rr)
		if err != nil {
			return nil, err
		}
		rbs = append(rbs, rb)
	}
	if len(rbs) == 0 {
		return nil, fieldErr("ipam.range", ": required (or ipam.ipRanges)")
	}

	// One range per family: the result carries one IP per family.
	for i := range rbs {
		for j := range i {
			if sameFamily(rbs[i].Subnet.Addr(), rbs[j].Subnet.Addr()) {
				return nil, fieldErr("ipam.ipRanges", ": two ranges of family %s (%s and %s); configure one range per IP family",
					family(rbs[i].Subnet.Addr()), rbs[j].Subnet, rbs[i].Subnet)
			}
		}
	}

	// Without ipam.range, whereabouts drops a top-level exclude; applying it
	// to the ranges it overlaps is what the user meant.
	if strings.TrimSpace(ipam.Range) == "" {
		for i, s := range ipam.Exclude {
			if err := distributeExclude(rbs, i, s); err != nil {
				return nil, err
			}
		}
	}

	if ipam.Gateway != "" {
		if err := assignGateway(rbs, ipam.Gateway); err != nil {
			return nil, err
		}
	}

	ranges := make([]iprange.Range, len(rbs))
	for i, rb := range rbs {
		if err := rb.checkReservable(); err != nil {
			return nil, err
		}
		r, err := rb.build()
		if err != nil {
			return nil, err
		}
		ranges[i] = r
	}
	return ranges, nil
}

func distributeExclude(rbs []*rangeBuilder, i int, s string) error {
	f := indexed("ipam.exclude", i)
	p, _, ok := parsePrefixOrAddr(s)
	if !ok {
		return fieldErr(f, ": invalid CIDR %q", s)
	}
	used := false
	for _, rb := range rbs {
		if sameFamily(p.Addr(), rb.Subnet.Addr()) && p.Masked().Overlaps(rb.Subnet) {
			if err := rb.addExclude("ipam.exclude", i, s); err != nil {
				return err
			}
			used = true
		}
	}
	if !used {
		return fieldErr(f, " %q does not overlap any range (%s)", s, subnetList(rbs))
	}
	return nil
}

// assignGateway gives the top-level gateway to the range of its family.
func assignGateway(rbs []*rangeBuilder, s string) error {
	gw, err := parseAddr("ipam.gateway", s)
	if err != nil {
		return err
	}
	for _, rb := range rbs {
		if sameFamily(gw, rb.Subnet.Addr()) {
			return rb.setGateway("ipam.gateway", s)
		}
	}
	return fieldErr("ipam.gateway", " %q is %s but no %s range is configured (%s)", s, family(gw), family(gw), subnetList(rbs))
}

func subnetList(rbs []*rangeBuilder) string {
	names := make([]string, len(rbs))
	for i, rb := range rbs {
		names[i] = rb.Subnet.String()
	}
	return strings.Join(names, ", ")
}

// ParseMAC reads a MAC address an attachment presents (field names where
// it came from: runtimeConfig.mac, CNI_ARGS MAC): an Ethernet address, as
// the plugins that set it on the interface take it. nil for "".
func ParseMAC(field, s string) (net.HardwareAddr, error) {
	if s == "" {
		return nil, nil
	}
	mac, err := net.ParseMAC(s)
	if err != nil || len(mac) != 6 {
		return nil, fieldErr(field, " %.64q is not an Ethernet MAC address such as \"02:00:00:0a:00:01\"", s)
	}
	return mac, nil
}
