package allocator

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// span is an inclusive run of addresses lo..hi, lo <= hi, one family.
type span struct{ lo, hi netip.Addr }

// width returns hi-lo, i.e. the span's size minus one (the size itself
// overflows 128 bits for ::/0).
func (s span) width() u128 { return toU128(s.hi).sub(toU128(s.lo)) }

// checkRange rejects Range values that Parse would never produce, so a
// hand-built Range yields an error instead of a panic or a wrong answer.
func checkRange(r ipamconfig.Range) error {
	switch {
	case !r.Start.IsValid() || !r.End.IsValid():
		return fmt.Errorf("%w %s: start and end must be set", ErrInvalidRange, r)
	case r.Start.Is4() != r.End.Is4():
		return fmt.Errorf("%w %s: start and end differ in IP family", ErrInvalidRange, r)
	case r.Start.Zone() != "" || r.End.Zone() != "":
		return fmt.Errorf("%w %s: zoned addresses are not allocatable", ErrInvalidRange, r)
	case r.End.Less(r.Start):
		return fmt.Errorf("%w %s: start is after end", ErrInvalidRange, r)
	case r.Subnet.IsValid() && (!r.Subnet.Contains(r.Start) || !r.Subnet.Contains(r.End)):
		return fmt.Errorf("%w %s: start and end must lie inside the subnet", ErrInvalidRange, r)
	}
	return nil
}

// freeSpans returns Start..End minus the gateway and the excludes, sorted
// and disjoint. Its length is bounded by len(Exclude)+2, which is what lets
// the scan jump over an excluded prefix of any size in one step.
func freeSpans(r ipamconfig.Range) ([]span, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	blocked := make([]span, 0, len(r.Exclude)+1)
	add := func(lo, hi netip.Addr) {
		// Clip to Start..End; entries of the other family never match.
		if lo.Is4() != r.Start.Is4() || hi.Less(r.Start) || r.End.Less(lo) {
			return
		}
		blocked = append(blocked, span{maxAddr(lo, r.Start), minAddr(hi, r.End)})
	}
	for _, p := range r.Exclude {
		if p.IsValid() {
			add(p.Masked().Addr(), lastAddr(p))
		}
	}
	if r.Gateway.IsValid() {
		gw := r.Gateway.WithZone("")
		add(gw, gw)
	}
	slices.SortFunc(blocked, func(a, b span) int { return a.lo.Compare(b.lo) })

	var free []span
	cur := r.Start // invariant: cur <= End; everything below cur is handled
	for _, b := range blocked {
		if b.hi.Less(cur) {
			continue
		}
		if cur.Less(b.lo) {
			free = append(free, span{cur, b.lo.Prev()})
		}
		if !b.hi.Less(r.End) {
			return free, nil
		}
		cur = b.hi.Next()
	}
	return append(free, span{cur, r.End}), nil
}

// lastAddr returns the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func minAddr(a, b netip.Addr) netip.Addr {
	if b.Less(a) {
		return b
	}
	return a
}

func maxAddr(a, b netip.Addr) netip.Addr {
	if a.Less(b) {
		return b
	}
	return a
}
