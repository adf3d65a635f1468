// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// ErrExhausted is wrapped by Candidate when every usable address of the
// range is taken; the wrapping error names the range.
var ErrExhausted = errors.New("no free address")

// Candidate returns a usable address of r for which taken reports false.
// It starts at an address derived from seed and scans upward, wrapping
// around once, so it visits each usable address at most once and calls
// taken at most once per address. A nil taken means nothing is taken.
//
// Usable means what r.Usable says: inside r's bounds, neither its gateway
// nor excluded.
func Candidate(r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	return pick(r, taken, seedHash(seed))
}

// pick is Candidate with the seed already hashed, so tests can aim at any
// starting index.
func pick(r iprange.Range, taken func(netip.Addr) bool, h [16]byte) (netip.Addr, error) {
	first := r.At(h)
	if first.IsValid() && taken == nil {
		return first, nil
	}
	for a := range r.Walk(first) {
		if !taken(a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w in range %s", ErrExhausted, r)
}

// seedHash takes 128 bits of SHA-256: enough to reach every address of the
// widest IPv6 range, and well mixed even for near-identical seeds.
func seedHash(seed string) [16]byte {
	sum := sha256.Sum256([]byte(seed))
	return [16]byte(sum[:16])
}
