// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

func parseRoutes(raw []rawRoute) ([]*types.Route, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	routes := make([]*types.Route, 0, len(raw))
	for i, rr := range raw {
		f := indexed("ipam.routes", i)
		if rr.Dst == "" {
			return nil, fieldErr(f+".dst", ": required")
		}
		dst, err := netip.ParsePrefix(rr.Dst)
		if err != nil {
			return nil, fieldErr(f+".dst", ": invalid CIDR %q", rr.Dst)
		}
		// Host bits in a route destination are rejected by the kernel.
		dst = dst.Masked()
		r := &types.Route{
			Dst:      toIPNet(dst),
			MTU:      rr.MTU,
			AdvMSS:   rr.AdvMSS,
			Priority: rr.Priority,
			Table:    rr.Table,
			Scope:    rr.Scope,
		}
		if rr.GW != "" {
			gw, err := parseAddr(f+".gw", rr.GW)
			if err != nil {
				return nil, err
			}
			if !sameFamily(gw, dst.Addr()) {
				return nil, fieldErr(f+".gw", " %q is %s but dst %q is %s", rr.GW, family(gw), rr.Dst, family(dst.Addr()))
			}
			r.GW = net.IP(gw.AsSlice())
		}
		routes = append(routes, r)
	}
	return routes, nil
}

func parseDNS(d types.DNS) (types.DNS, error) {
	for i, ns := range d.Nameservers {
		// Zones are fine here: resolv.conf accepts fe80::1%eth0.
		if _, err := netip.ParseAddr(ns); err != nil {
			return types.DNS{}, fieldErr(indexed("ipam.dns.nameservers", i), ": invalid IP %q", ns)
		}
	}
	return d, nil
}

// parseStaticIPs reads runtimeConfig.ips (the CNI "ips" capability Multus
// fills) and args.cni.ips. Each must fall inside a configured range, with
// that range's prefix length if one is given; at most one per family.
func parseStaticIPs(ranges []iprange.Range, rc *rawConf) ([]netip.Prefix, error) {
	type source struct {
		field string
		ips   []string
	}
	var out []netip.Prefix
	var from []string // field each entry of out came from
	for _, src := range []source{{"runtimeConfig.ips", rc.RuntimeConfig.IPs}, {"args.cni.ips", rc.Args.CNI.IPs}} {
		for i, s := range src.ips {
			f := indexed(src.field, i)
			p, hadBits, ok := parsePrefixOrAddr(s)
			if !ok {
				return nil, fieldErr(f, ": invalid IP or CIDR %q%s", s, zoneNote(s))
			}
			if p.Addr().Is4In6() {
				return nil, mappedErr(f, s, p)
			}
			ip := p.Addr()
			r, found := rangeContaining(ranges, ip)
			if !found {
				return nil, fieldErr(f, " %q is outside every configured range (%s)", s, rangeList(ranges))
			}
			if hadBits && p.Bits() != r.Subnet().Bits() {
				return nil, fieldErr(f, " %q: prefix length /%d does not match range %q", s, p.Bits(), r.Subnet().String())
			}
			sp := netip.PrefixFrom(ip, r.Subnet().Bits())
			dup := false
			for j, prev := range out {
				if prev.Addr() == ip {
					dup = true // the same request through both channels
					break
				}
				if sameFamily(prev.Addr(), ip) {
					return nil, fieldErr(f, " %q: a second %s address (%s already requested by %s); one static IP per family", s, family(ip), prev.Addr(), from[j])
				}
			}
			if !dup {
				out = append(out, sp)
				from = append(from, f)
			}
		}
	}
	return out, nil
}

func rangeContaining(ranges []iprange.Range, ip netip.Addr) (iprange.Range, bool) {
	c := Config{Ranges: ranges}
	return c.RangeFor(ip)
}

func rangeList(ranges []iprange.Range) string {
	s := ""
	for i, r := range ranges {
		if i > 0 {
			s += ", "
		}
		s += r.Subnet().String()
	}
	return s
}
