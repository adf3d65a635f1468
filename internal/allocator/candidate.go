package allocator

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

var (
	// ErrExhausted is wrapped by Candidate when every usable address of the
	// range is taken; the wrapping error names the range.
	ErrExhausted = errors.New("no free address")
	// ErrInvalidRange is wrapped when a Range breaks the invariants Parse
	// guarantees (only possible for a hand-built Range).
	ErrInvalidRange = errors.New("invalid range")
)

// Candidate returns a usable address of r for which taken reports false.
// It starts at an address derived from seed and scans upward, wrapping
// around once, so it visits each usable address at most once and calls
// taken at most once per address. A nil taken means nothing is taken.
//
// Usable means inside r.Start..r.End and neither r.Gateway nor in r.Exclude.
func Candidate(r ipamconfig.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	return pick(r, taken, seedHash(seed))
}

// pick is Candidate with the seed already hashed, so tests can aim at any
// starting offset.
func pick(r ipamconfig.Range, taken func(netip.Addr) bool, h u128) (netip.Addr, error) {
	spans, err := freeSpans(r)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(spans) == 0 {
		return netip.Addr{}, exhausted(r)
	}
	ip, ok := scan(spans, startOffset(spans, h), taken)
	if !ok {
		return netip.Addr{}, exhausted(r)
	}
	return ip, nil
}

func exhausted(r ipamconfig.Range) error {
	return fmt.Errorf("%w in range %s", ErrExhausted, r)
}

// seedHash takes 128 bits of SHA-256: enough to reach every address of the
// widest IPv6 range, and well mixed even for near-identical seeds.
func seedHash(seed string) u128 {
	sum := sha256.Sum256([]byte(seed))
	return u128{binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:16])}
}

// startOffset reduces h modulo the number of usable addresses, so starting
// points are uniform over usable addresses rather than piling up right after
// a large exclude.
func startOffset(spans []span, h u128) u128 {
	var total u128
	for _, s := range spans {
		n, c1 := s.width().add(u128{0, 1})
		t, c2 := total.add(n)
		if c1 || c2 {
			// 2^128 usable addresses (all of ::/0): every h is in range.
			return h
		}
		total = t
	}
	return h.mod(total)
}

// scan returns the first address not taken, starting off usable addresses
// into spans, moving upward and wrapping to the first span once.
func scan(spans []span, off u128, taken func(netip.Addr) bool) (netip.Addr, bool) {
	k := 0
	for ; k < len(spans)-1; k++ {
		w := spans[k].width()
		if off.cmp(w) <= 0 {
			break
		}
		off = off.sub(w).sub(u128{0, 1})
	}
	lo := spans[k].lo
	v, _ := toU128(lo).add(off)
	first := toAddr(v, lo)
	if taken == nil {
		return first, true
	}

	// Pass j visits spans[(k+j)%n]; pass 0 starts at first, and the extra
	// pass n covers the part of spans[k] below first.
	n := len(spans)
	for j := 0; j <= n; j++ {
		s := spans[(k+j)%n]
		switch j {
		case 0:
			s.lo = first
		case n:
			if first == s.lo {
				return netip.Addr{}, false
			}
			s.hi = first.Prev()
		}
		for a := s.lo; ; a = a.Next() {
			if !taken(a) {
				return a, true
			}
			if a == s.hi {
				break
			}
		}
	}
	return netip.Addr{}, false
}
