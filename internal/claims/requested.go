// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// The decisions about a VM's requested addresses that need no API: reading
// the request, and whether the network's ranges hand the addresses out.
// requested_reserve.go reserves and records them.

// request is what an owner asks for on one network.
type request struct {
	// raw are the addresses as written in the annotation.
	raw []string
	// err is set when the annotation as a whole cannot be read: then no
	// network's request is known, and every claim of the owner waits.
	err error
}

// claimValue is the request as recorded on the claim
// (claimstatus.RequestedAnnotation).
func (r *request) claimValue() string {
	if r.err != nil {
		return "invalid"
	}
	b, _ := json.Marshal(r.raw) // a []string always encodes
	return string(b)
}

// parseRequests reads RequestedAddressesAnnotation: the addresses per
// KubeVirt network name; nil without the annotation.
func parseRequests(annotations map[string]string) (map[string][]string, error) {
	v, ok := annotations[RequestedAddressesAnnotation]
	if !ok {
		return nil, nil
	}
	var out map[string][]string
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("annotation %s %q is not a JSON object from network name to a list of addresses: %w",
			RequestedAddressesAnnotation, truncate(v, 200), err)
	}
	return out, nil
}

// withRequests sets each wanted claim's request from the owner's annotations.
func withRequests(want []Desired, annotations map[string]string) []Desired {
	reqs, err := parseRequests(annotations)
	for i := range want {
		switch raw, ok := reqs[want[i].LogicalNetwork]; {
		case err != nil:
			want[i].Request = &request{err: err}
		case ok:
			want[i].Request = &request{raw: raw}
		}
	}
	return want
}

// parseRequested reads one network's requested addresses: one or two (one
// per family), each an address or an address with a prefix length (the
// length is the range's, whatever is written).
func parseRequested(raw []string) ([]netip.Addr, error) {
	if len(raw) == 0 || len(raw) > 2 {
		return nil, fmt.Errorf("%d addresses requested (%s); give one or two, one per IP family", len(raw), strings.Join(raw, ", "))
	}
	out := make([]netip.Addr, 0, len(raw))
	for _, s := range raw {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			p, perr := netip.ParsePrefix(s)
			if perr != nil {
				return nil, fmt.Errorf("%q is not an IP address (or address/prefix length)", s)
			}
			ip = p.Addr()
		}
		if ip.Zone() != "" || ip.Is4In6() {
			return nil, fmt.Errorf("%q: write the address without a zone, and an IPv4 address as IPv4", s)
		}
		for _, prev := range out {
			if prev.Is4() == ip.Is4() {
				return nil, fmt.Errorf("%s and %s are of the same IP family; a network gets one address per family", prev, ip)
			}
		}
		out = append(out, ip)
	}
	return out, nil
}

// placed is a requested address and the range that hands it out.
type placed struct {
	ip  netip.Addr
	rng iprange.Range
}

// prefix is the address with its range's prefix length, as recorded in
// the claim's status.
func (p placed) prefix() netip.Prefix { return netip.PrefixFrom(p.ip, p.rng.Subnet().Bits()) }

// placeRequested finds, for each address, a range of the network that
// hands it out, or says why none does (pool names the network's IPPool in
// the message).
func placeRequested(ranges []iprange.Range, pool string, ips []netip.Addr) ([]placed, error) {
	out := make([]placed, 0, len(ips))
	for _, ip := range ips {
		var why error
		found := false
		for _, r := range ranges {
			if !r.Contains(ip) {
				continue
			}
			if why = r.Usable(ip); why == nil {
				out, found = append(out, placed{ip: ip, rng: r}), true
				break
			}
		}
		if found {
			continue
		}
		if why == nil {
			why = fmt.Errorf("%s is outside every range of IPPool %q (%s)", ip, pool, rangeList(ranges))
		}
		return nil, why
	}
	return out, nil
}

// missingFamilies returns, per IP family the network has and the request
// does not cover, that family's ranges (in configuration order): the
// network is dual-stack and the VM asked for one family only.
func missingFamilies(ranges []iprange.Range, got []placed) [][]iprange.Range {
	var v4, v6 []iprange.Range
	for _, r := range ranges {
		if r.Is4() {
			v4 = append(v4, r)
		} else {
			v6 = append(v6, r)
		}
	}
	covered := func(is4 bool) bool {
		for _, p := range got {
			if p.ip.Is4() == is4 {
				return true
			}
		}
		return false
	}
	var out [][]iprange.Range
	if len(v4) > 0 && !covered(true) {
		out = append(out, v4)
	}
	if len(v6) > 0 && !covered(false) {
		out = append(out, v6)
	}
	return out
}

func rangeList(ranges []iprange.Range) string {
	s := make([]string, len(ranges))
	for i, r := range ranges {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
