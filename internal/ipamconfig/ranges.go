// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// rangeBuilder is a range under construction (the Spec that build hands
// to iprange.New) plus the JSON paths of its parts, so checks can name the
// field that caused a problem.
type rangeBuilder struct {
	iprange.Spec
	field        string   // "ipam" or "ipam.ipRanges[i]"
	text         string   // the range as written
	startField   string   // where an explicit start came from, else ""
	endField     string   // where an explicit end came from, else ""
	excludeField []string // parallel to Spec.Exclude
	gatewayField string
}

// parseRange validates one range object. field is the JSON path of the
// object holding the range keys.
func parseRange(field string, rr rawRange) (*rangeBuilder, error) {
	rf := field + ".range"
	text := strings.TrimSpace(rr.Range)
	if text == "" {
		return nil, fieldErr(rf, ": required")
	}

	var subnet netip.Prefix
	var start, end netip.Addr // explicit bounds; invalid when not given
	if a, b, isAB := strings.Cut(text, "-"); isAB {
		// whereabouts' "A-B/prefix": A is range_start, B range_end, and
		// B/prefix names the subnet.
		first, err := netip.ParseAddr(strings.TrimSpace(a))
		if err != nil || first.Zone() != "" {
			return nil, fieldErr(rf, ": invalid start address %q in %q (want CIDR or A-B/prefix)%s", a, rr.Range, zoneNote(a))
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(b))
		if err != nil {
			return nil, fieldErr(rf, ": invalid CIDR %q in %q (want CIDR or A-B/prefix)", b, rr.Range)
		}
		subnet, start, end = p.Masked(), first, p.Addr()
		if subnet.Addr().Is4In6() && first.Is4In6() {
			v4 := first.Unmap().String() + "-" + netip.PrefixFrom(end.Unmap(), p.Bits()-96).String()
			return nil, fieldErr(rf, " %q is an IPv4-mapped IPv6 range, whose addresses an IPReservation cannot hold; write it as IPv4 %q", rr.Range, v4)
		}
		if !subnet.Contains(start) {
			return nil, fieldErr(rf, " %q: start %s is outside %s", rr.Range, start, subnet)
		}
		if end.Less(start) {
			return nil, fieldErr(rf, " %q: start %s is after end %s", rr.Range, start, end)
		}
	} else {
		p, err := netip.ParsePrefix(text)
		if err != nil {
			return nil, fieldErr(rf, ": invalid CIDR %q%s", rr.Range, zoneNote(rr.Range))
		}
		subnet = p.Masked()
		if subnet.Addr().Is4In6() {
			return nil, mappedErr(rf, rr.Range, p)
		}
	}

	var err error
	if start, err = explicitBound(field+".range_start", rr.RangeStart, start, subnet, rr.Range); err != nil {
		return nil, err
	}
	if end, err = explicitBound(field+".range_end", rr.RangeEnd, end, subnet, rr.Range); err != nil {
		return nil, err
	}
	if start.IsValid() && end.IsValid() && end.Less(start) {
		return nil, fieldErr(field+".range_start", " %q is after range_end %q", start.String(), end.String())
	}

	rb := &rangeBuilder{field: field, text: rr.Range, Spec: iprange.Spec{Subnet: subnet}}
	if start.IsValid() {
		rb.startField = rf
		if strings.TrimSpace(rr.RangeStart) != "" {
			rb.startField = field + ".range_start"
		}
	}
	if end.IsValid() {
		rb.endField = rf
		if strings.TrimSpace(rr.RangeEnd) != "" {
			rb.endField = field + ".range_end"
		}
	}
	if err := rb.setBounds(start, end); err != nil {
		return nil, err
	}
	for i, s := range rr.Exclude {
		if err := rb.addExclude(field+".exclude", i, s); err != nil {
			return nil, err
		}
	}
	if rr.Gateway != "" {
		if err := rb.setGateway(field+".gateway", rr.Gateway); err != nil {
			return nil, err
		}
	}
	return rb, nil
}

// explicitBound parses range_start or range_end. fromAB is the bound the
// A-B/prefix form already set (invalid if none); both must then agree.
func explicitBound(field, s string, fromAB netip.Addr, subnet netip.Prefix, rangeText string) (netip.Addr, error) {
	if strings.TrimSpace(s) == "" {
		return fromAB, nil
	}
	// A mapped bound of an IPv6 range is judged with the whole range
	// (checkReservable); in an IPv4 range it is IPv4 written the long way.
	a, err := parsePlainAddr(field, s)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Is4In6() && subnet.Addr().Is4() {
		return netip.Addr{}, mappedErr(field, s, netip.PrefixFrom(a, a.BitLen()))
	}
	if fromAB.IsValid() && a != fromAB {
		return netip.Addr{}, fieldErr(field, " %q conflicts with range %q", s, rangeText)
	}
	if !subnet.Contains(a) {
		return netip.Addr{}, fieldErr(field, " %q is outside range %q", s, subnet.String())
	}
	return a, nil
}

// setBounds narrows the subnet's usable bounds to the explicit ones. Explicit
// bounds on the network or broadcast address are clamped rather than
// rejected: "start at the beginning" is the evident intent.
func (rb *rangeBuilder) setBounds(start, end netip.Addr) error {
	first, last := iprange.UsableBounds(rb.Subnet)
	rb.Start, rb.End = first, last
	if start.IsValid() && first.Less(start) {
		rb.Start = start
	}
	if end.IsValid() && end.Less(last) {
		rb.End = end
	}
	if !rb.End.Less(rb.Start) {
		return nil
	}
	field, val := rb.field+".range_start", start
	if end.IsValid() && end.Less(first) {
		field, val = rb.field+".range_end", end
	}
	why := "the network and broadcast addresses are never handed out"
	if !rb.Subnet.Addr().Is4() {
		why = "the subnet-router anycast address is never handed out"
	}
	return fieldErr(field, " %q leaves no usable address in range %q (%s)", val.String(), rb.Subnet.String(), why)
}

// addExclude validates exclude entry i of the list at field and adds it.
// A bare IP is accepted as a single-address exclude.
func (rb *rangeBuilder) addExclude(field string, i int, s string) error {
	f := indexed(field, i)
	p, _, ok := parsePrefixOrAddr(s)
	if !ok {
		return fieldErr(f, ": invalid CIDR %q", s)
	}
	p = p.Masked()
	if !sameFamily(p.Addr(), rb.Subnet.Addr()) {
		return fieldErr(f, " %q is %s but range %q is %s", s, family(p.Addr()), rb.Subnet.String(), family(rb.Subnet.Addr()))
	}
	if !p.Overlaps(rb.Subnet) {
		return fieldErr(f, " %q does not overlap range %q", s, rb.Subnet.String())
	}
	rb.Exclude = append(rb.Exclude, p)
	rb.excludeField = append(rb.excludeField, f)
	return nil
}

func (rb *rangeBuilder) setGateway(field, s string) error {
	gw, err := parseAddr(field, s)
	if err != nil {
		return err
	}
	if !rb.Subnet.Contains(gw) {
		return fieldErr(field, " %q is outside range %q", s, rb.Subnet.String())
	}
	if rb.Gateway.IsValid() && rb.Gateway != gw {
		return fieldErr(field, " %q conflicts with %s %q", s, rb.gatewayField, rb.Gateway.String())
	}
	rb.Gateway, rb.gatewayField = gw, field
	return nil
}

// checkReservable fails when Start..End reaches into the IPv4-mapped block
// and no exclude keeps it out: the API server refuses those addresses as a
// reservation's IP, so every ADD that picked one would fail. It names the
// explicit bound that reaches in, else the range.
func (rb *rangeBuilder) checkReservable() error {
	if rb.Subnet.Addr().Is4() || rb.End.Less(mappedBlock.Addr()) || iprange.LastAddr(mappedBlock).Less(rb.Start) {
		return nil
	}
	for _, p := range rb.Exclude {
		if p.Bits() <= mappedBlock.Bits() && p.Contains(mappedBlock.Addr()) {
			return nil
		}
	}
	const why = "whose addresses an IPReservation cannot hold"
	switch {
	case mappedBlock.Contains(rb.Start) && rb.startField != "" && rb.startField != rb.field+".range":
		return fieldErr(rb.startField, " %q is in the IPv4-mapped block %s, %s; start above or below it", rb.Start.String(), mappedBlockText, why)
	case mappedBlock.Contains(rb.End) && rb.endField != "" && rb.endField != rb.field+".range":
		return fieldErr(rb.endField, " %q is in the IPv4-mapped block %s, %s; end below or above it", rb.End.String(), mappedBlockText, why)
	}
	return fieldErr(rb.field+".range", " %q includes the IPv4-mapped block %s, %s; exclude it (\"exclude\": [%q]) or narrow range_start/range_end",
		rb.text, mappedBlockText, why, mappedBlockText)
}

// build makes the Range, naming the exclude (or gateway) that closes the
// last gap when the gateway and excludes cover Start..End.
func (rb *rangeBuilder) build() (iprange.Range, error) {
	r, err := iprange.New(rb.Spec)
	var empty *iprange.EmptyError
	switch {
	case errors.As(err, &empty):
		field, value := rb.gatewayField, rb.Gateway.String()
		if empty.Exclude >= 0 {
			field, value = rb.excludeField[empty.Exclude], rb.Exclude[empty.Exclude].String()
		}
		detail := ""
		if !empty.Alone {
			detail = " (together with the other excludes and the gateway)"
		}
		return iprange.Range{}, causedErr(err, field, " %q leaves no usable address in range %q%s", value, rb.Subnet.String(), detail)
	case err != nil:
		// Not reached: parseRange checked every part against its field.
		return iprange.Range{}, causedErr(err, rb.field+".range", " %q: %v", rb.text, err)
	}
	return r, nil
}

func indexed(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}
