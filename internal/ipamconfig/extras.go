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
			if ranges == nil {
				// A pool's ranges are checked by the agent, which reads them.
				if !hadBits {
					p = netip.PrefixFrom(ip, ip.BitLen())
				}
				if err := addStatic(&out, &from, f, s, p); err != nil {
					return nil, err
				}
				continue
			}
			r, found := rangeContaining(ranges, ip)
			if !found {
				return nil, fieldErr(f, " %q is outside every configured range (%s)", s, rangeList(ranges))
			}
			if hadBits && p.Bits() != r.Subnet().Bits() {
				return nil, fieldErr(f, " %q: prefix length /%d does not match range %q", s, p.Bits(), r.Subnet().String())
			}
			if err := addStatic(&out, &from, f, s, netip.PrefixFrom(ip, r.Subnet().Bits())); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// addStatic appends static address sp (written s at field f) unless the
// other channel asked for it already; a second address of a family fails.
func addStatic(out *[]netip.Prefix, from *[]string, f, s string, sp netip.Prefix) error {
	ip := sp.Addr()
	for j, prev := range *out {
		if prev.Addr() == ip {
			return nil // the same request through both channels
		}
		if sameFamily(prev.Addr(), ip) {
			return fieldErr(f, " %q: a second %s address (%s already requested by %s); one static IP per family", s, family(ip), prev.Addr(), (*from)[j])
		}
	}
	*out = append(*out, sp)
	*from = append(*from, f)
	return nil
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
