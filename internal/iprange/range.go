// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
)

// ErrInvalid is wrapped by the errors of New.
var ErrInvalid = errors.New("invalid range")

// Spec describes a range before validation; New turns it into a Range.
type Spec struct {
	// Subnet is the CIDR the range lives in; host bits are ignored.
	Subnet netip.Prefix
	// Start and End are the inclusive bounds. A zero Start or End means
	// the subnet's first or last usable address (see UsableBounds); set,
	// they must lie within those.
	Start, End netip.Addr
	// Gateway, when set, lies in Subnet and is never handed out.
	Gateway netip.Addr
	// Exclude lists prefixes of Subnet's family, each overlapping Subnet,
	// whose addresses are never handed out. They may overlap each other
	// and reach outside Start..End; host bits are ignored.
	Exclude []netip.Prefix
}

// Range is a validated address range: the addresses it hands out are
// Start..End minus Gateway and Exclude. Its fields are unexported and it
// is made only by New, so every Range keeps the invariants New checks and
// nobody downstream re-validates it; it is never modified after New, so
// copies may be shared. The zero Range holds no address.
//
// Compare the CNI host-local plugin's allocator.Range, which likewise
// keeps all range arithmetic in one type.
type Range struct {
	subnet     netip.Prefix
	start, end netip.Addr
	gateway    netip.Addr
	exclude    []netip.Prefix
	// free is Start..End minus gateway and excludes: sorted, disjoint,
	// non-empty, at most len(exclude)+2 spans, so an excluded prefix of any
	// size is stepped over at once. Computed once, in New.
	free []span
	// last is the number of usable addresses minus one (the count of a
	// whole IPv6 range would not fit 128 bits; see UsableBounds).
	last u128
}

// EmptyError is New's error when the gateway and excludes leave no
// address of Start..End to hand out. It names the entry that closes the
// last gap, so a configuration error can name the field at fault.
type EmptyError struct {
	// Exclude is the index in Spec.Exclude of that entry, or -1 for the
	// gateway.
	Exclude int
	// Alone is true when that entry covers all of Start..End by itself.
	Alone bool
	spec  Spec
}

func (e *EmptyError) Error() string {
	what := "gateway " + e.spec.Gateway.String()
	if e.Exclude >= 0 {
		what = "exclude " + e.spec.Exclude[e.Exclude].Masked().String()
	}
	if !e.Alone {
		what += " (together with the other excludes and the gateway)"
	}
	return fmt.Sprintf("%v %s: %s leaves no usable address", ErrInvalid, e.spec.Subnet.Masked(), what)
}

// Unwrap makes an EmptyError match ErrInvalid.
func (e *EmptyError) Unwrap() error { return ErrInvalid }

// New validates s and returns the Range it describes. Errors wrap
// ErrInvalid; an *EmptyError when nothing is left to hand out.
func New(s Spec) (Range, error) {
	if !s.Subnet.IsValid() {
		return Range{}, fmt.Errorf("%w: no subnet", ErrInvalid)
	}
	subnet := s.Subnet.Masked()
	first, last := UsableBounds(subnet)
	r := Range{subnet: subnet, start: first, end: last, gateway: s.Gateway}
	invalid := func(format string, args ...any) (Range, error) {
		return Range{}, fmt.Errorf("%w %s: %s", ErrInvalid, subnet, fmt.Sprintf(format, args...))
	}
	for _, b := range []struct {
		name string
		a    netip.Addr
		dst  *netip.Addr
	}{{"start", s.Start, &r.start}, {"end", s.End, &r.end}} {
		switch {
		case !b.a.IsValid():
			continue
		case b.a.Zone() != "":
			return invalid("%s %s has a zone", b.name, b.a)
		case !subnet.Contains(b.a):
			return invalid("%s %s is outside the subnet", b.name, b.a)
		case b.a.Less(first) || last.Less(b.a):
			return invalid("%s %s is outside the usable addresses %s-%s", b.name, b.a, first, last)
		}
		*b.dst = b.a
	}
	if r.end.Less(r.start) {
		return invalid("start %s is after end %s", r.start, r.end)
	}
	if s.Gateway.IsValid() && (s.Gateway.Zone() != "" || !subnet.Contains(s.Gateway)) {
		return invalid("gateway %s is outside the subnet", s.Gateway)
	}
	if len(s.Exclude) > 0 {
		r.exclude = make([]netip.Prefix, len(s.Exclude))
	}
	for i, p := range s.Exclude {
		if !p.IsValid() || !p.Overlaps(subnet) {
			return invalid("exclude %s does not overlap the subnet", p)
		}
		r.exclude[i] = p.Masked()
	}
	free, closer := sweep(r.start, r.end, r.exclude, r.gateway)
	if len(free) == 0 {
		return Range{}, &EmptyError{Exclude: closer.exclude, Alone: !r.start.Less(closer.lo), spec: s}
	}
	r.free = free
	for i, f := range free {
		if i > 0 {
			// Spans are disjoint, so the sum stays below 2^128-1.
			r.last, _ = r.last.add(u128{0, 1})
		}
		r.last, _ = r.last.add(f.width())
	}
	return r, nil
}

// MustNew is New for tests and constants: it panics on error.
func MustNew(s Spec) Range {
	r, err := New(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Subnet returns the masked CIDR the range lives in.
func (r Range) Subnet() netip.Prefix { return r.subnet }

// Start returns the first address of the range's bounds.
func (r Range) Start() netip.Addr { return r.start }

// End returns the last address of the range's bounds.
func (r Range) End() netip.Addr { return r.end }

// Gateway returns the gateway, or the zero Addr when none is configured.
func (r Range) Gateway() netip.Addr { return r.gateway }

// Excludes returns (a copy of) the masked excluded prefixes.
func (r Range) Excludes() []netip.Prefix { return slices.Clone(r.exclude) }

// Is4 reports whether r is an IPv4 range.
func (r Range) Is4() bool { return r.subnet.Addr().Is4() }

// Contains reports whether ip lies in r's subnet, the test for "this
// range's family and network"; Usable says whether ip may be handed out.
func (r Range) Contains(ip netip.Addr) bool { return r.subnet.Contains(ip) }

// Size returns the number of usable addresses (Start..End minus gateway
// and excludes); zero only for the zero Range.
func (r Range) Size() *big.Int {
	if len(r.free) == 0 {
		return new(big.Int)
	}
	n := r.last.big()
	return n.Add(n, big.NewInt(1))
}

// String renders the range as "subnet (start-end)", the form used in errors.
func (r Range) String() string {
	return r.subnet.String() + " (" + r.start.String() + "-" + r.end.String() + ")"
}

// LastAddr returns the highest address of p (for IPv4, its broadcast
// address).
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// UsableBounds returns the first and last assignable address of p: the
// network address (IPv6: subnet-router anycast) and the IPv4 broadcast
// address are dropped, except on point-to-point prefixes (IPv4 /31 per
// RFC 3021, IPv6 /127 per RFC 6164) and single-address prefixes.
func UsableBounds(p netip.Prefix) (first, last netip.Addr) {
	first, last = p.Masked().Addr(), LastAddr(p)
	if p.Addr().BitLen()-p.Bits() <= 1 {
		return first, last
	}
	first = first.Next()
	if p.Addr().Is4() {
		last = last.Prev()
	}
	return first, last
}
