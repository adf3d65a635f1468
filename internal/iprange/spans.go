// SPDX-License-Identifier: Apache-2.0

package iprange

import (
	"iter"
	"net/netip"
	"slices"
)

// span is an inclusive run of addresses lo..hi, lo <= hi, one family.
type span struct{ lo, hi netip.Addr }

// width returns hi-lo, i.e. the span's size minus one (the size itself
// overflows 128 bits for ::/0).
func (s span) width() u128 { return toU128(s.hi).sub(toU128(s.lo)) }

// blocked is a span New keeps out of a range: an exclude (its index) or
// the gateway (exclude -1).
type blocked struct {
	lo, hi  netip.Addr
	exclude int
}

// sweep returns start..end minus the excludes and the gateway, sorted and
// disjoint. When nothing is left, closer is the entry that covered the
// last free address (the first in input order, gateway last, among
// entries starting at the same address).
func sweep(start, end netip.Addr, exclude []netip.Prefix, gateway netip.Addr) (free []span, closer blocked) {
	bs := make([]blocked, 0, len(exclude)+1)
	for i, p := range exclude {
		bs = append(bs, blocked{p.Addr(), LastAddr(p), i})
	}
	if gateway.IsValid() {
		bs = append(bs, blocked{gateway, gateway, -1})
	}
	slices.SortStableFunc(bs, func(a, b blocked) int { return a.lo.Compare(b.lo) })

	cur := start // invariant: cur <= end; everything below cur is handled
	for _, b := range bs {
		if b.hi.Less(cur) {
			continue
		}
		if cur.Less(b.lo) {
			if end.Less(b.lo) {
				break
			}
			free = append(free, span{cur, b.lo.Prev()})
		}
		if !b.hi.Less(end) {
			return free, b
		}
		cur = b.hi.Next()
	}
	return append(free, span{cur, end}), blocked{}
}

// At returns the usable address at index h mod Size(), counting usable
// addresses upward from Start; h is a big-endian 128-bit integer. Reducing
// modulo the usable count (not the bounds) spreads indexes uniformly over
// usable addresses rather than piling them up right after a large exclude.
// The zero Range returns the zero Addr.
func (r Range) At(h [16]byte) netip.Addr {
	if len(r.free) == 0 {
		return netip.Addr{}
	}
	// New never hands out :: (the anycast address of ::/0), so the count
	// is below 2^128 and the sum cannot wrap to a zero modulus.
	n, _ := r.last.add(u128{0, 1})
	off := fromBytes(h).mod(n)
	k := 0
	for ; k < len(r.free)-1; k++ {
		w := r.free[k].width()
		if off.cmp(w) <= 0 {
			break
		}
		off = off.sub(w).sub(u128{0, 1})
	}
	lo := r.free[k].lo
	v, _ := toU128(lo).add(off)
	return toAddr(v, lo)
}

// Walk yields each usable address once, in ascending order from from
// (which should be usable; otherwise from the next usable address above
// it), wrapping around past End to Start and ending just below from.
func (r Range) Walk(from netip.Addr) iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		n := len(r.free)
		if n == 0 || !from.IsValid() || from.Is4() != r.start.Is4() {
			return
		}
		k := 0
		for k < n && r.free[k].hi.Less(from) {
			k++
		}
		if k == n {
			k, from = 0, r.free[0].lo
		} else if from.Less(r.free[k].lo) {
			from = r.free[k].lo
		}
		// Pass j visits free[(k+j)%n]; pass 0 starts at from, and the
		// extra pass n covers the part of free[k] below from.
		for j := 0; j <= n; j++ {
			s := r.free[(k+j)%n]
			switch j {
			case 0:
				s.lo = from
			case n:
				if from == s.lo {
					return
				}
				s.hi = from.Prev()
			}
			for a := s.lo; ; a = a.Next() {
				if !yield(a) {
					return
				}
				if a == s.hi {
					break
				}
			}
		}
	}
}
