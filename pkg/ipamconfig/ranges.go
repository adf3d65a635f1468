package ipamconfig

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// rangeBuilder is a Range under construction plus the JSON paths of its
// parts, so later checks can name the field that caused a problem.
type rangeBuilder struct {
	Range
	field        string   // "ipam" or "ipam.ipRanges[i]"
	excludeField []string // parallel to Range.Exclude
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
		first, ok := parseAddr(a)
		if !ok {
			return nil, fieldErr(rf, ": invalid start address %q in %q (want CIDR or A-B/prefix)", a, rr.Range)
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(b))
		if err != nil {
			return nil, fieldErr(rf, ": invalid CIDR %q in %q (want CIDR or A-B/prefix)", b, rr.Range)
		}
		subnet, start, end = p.Masked(), first, p.Addr()
		if !subnet.Contains(start) {
			return nil, fieldErr(rf, " %q: start %s is outside %s", rr.Range, start, subnet)
		}
		if end.Less(start) {
			return nil, fieldErr(rf, " %q: start %s is after end %s", rr.Range, start, end)
		}
	} else {
		p, err := netip.ParsePrefix(text)
		if err != nil {
			return nil, fieldErr(rf, ": invalid CIDR %q", rr.Range)
		}
		subnet = p.Masked()
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

	rb := &rangeBuilder{field: field, Range: Range{Subnet: subnet}}
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
	a, ok := parseAddr(s)
	if !ok {
		return netip.Addr{}, fieldErr(field, ": invalid IP %q", s)
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
	first, last := usableBounds(rb.Subnet)
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
	if !rb.Is4() {
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
	gw, ok := parseAddr(s)
	if !ok {
		return fieldErr(field, ": invalid IP %q", s)
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

// checkUsable fails when the gateway and excludes cover Start..End. It
// names the exclude (or gateway) that closes the last gap.
func (rb *rangeBuilder) checkUsable() error {
	type span struct {
		lo, hi       netip.Addr
		field, value string
	}
	blocked := make([]span, 0, len(rb.Exclude)+1)
	for i, p := range rb.Exclude {
		blocked = append(blocked, span{p.Addr(), lastAddr(p), rb.excludeField[i], p.String()})
	}
	if rb.Gateway.IsValid() {
		blocked = append(blocked, span{rb.Gateway, rb.Gateway, rb.gatewayField, rb.Gateway.String()})
	}
	slices.SortStableFunc(blocked, func(a, b span) int { return a.lo.Compare(b.lo) })

	cur := rb.Start // invariant: cur <= End and nothing in Start..cur-1 is free
	for _, b := range blocked {
		if b.hi.Less(cur) {
			continue
		}
		if cur.Less(b.lo) {
			return nil
		}
		if !b.hi.Less(rb.End) {
			detail := ""
			if rb.Start.Less(b.lo) {
				detail = " (together with the other excludes and the gateway)"
			}
			return fieldErr(b.field, " %q leaves no usable address in range %q%s", b.value, rb.Subnet.String(), detail)
		}
		cur = b.hi.Next()
	}
	return nil
}

func indexed(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}
