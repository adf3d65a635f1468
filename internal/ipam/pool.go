// SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Pool is what an allocation needs of an IPPool, read when the request
// starts: a range added a moment ago is used at once, one removed is not.
type Pool struct {
	// Name is the pool's; Key what its reservations and blocks are named
	// from (IPPool.LockKey).
	Name, Key string
	// Ranges are the pool's parsed spec.ranges, in spec order.
	Ranges []iprange.Range
	// Overlapped are ranges of younger overlapping inline networks
	// (inlinepool.FindOverlap): theirs, never handed out here.
	Overlapped []iprange.Range
	// Cooldown is the pool's spec.reuseCooldown (reservation.Cooldown).
	Cooldown time.Duration
	// Quota is the pool's spec.maxAddressesPerNamespace (poolquota.Limit);
	// 0: none.
	Quota int
	// Object is the pool as read, for its spec.namespaceSelector.
	Object *ipkeeperv1alpha1.IPPool
}

// PoolOf parses an IPPool for allocation; errors name the field.
func PoolOf(p *ipkeeperv1alpha1.IPPool) (*Pool, error) {
	ranges, err := ipamconfig.PoolRanges(&p.Spec)
	if err != nil {
		return nil, err
	}
	return NewPool(p, ranges), nil
}

// NewPool returns the view of p whose spec.ranges parse to ranges (a
// caller that caches parsed specs passes its own).
func NewPool(p *ipkeeperv1alpha1.IPPool, ranges []iprange.Range) *Pool {
	return &Pool{Name: p.Name, Key: p.LockKey(), Ranges: ranges, Cooldown: reservation.Cooldown(p), Quota: poolquota.Limit(p), Object: p}
}

// Retains says the pool has a reuse cooldown: a claim made anew gets back
// what its name held (reservation.KeptFor).
func (p *Pool) Retains() bool { return p.Cooldown > 0 }

// Families groups the pool's ranges by IP family, in order of first
// appearance: a holder gets one address per family, from the first range
// of the family that has one free.
func (p *Pool) Families() [][]iprange.Range {
	var out [][]iprange.Range
	for _, r := range p.Ranges {
		placed := false
		for i, f := range out {
			if f[0].Is4() == r.Is4() {
				out[i], placed = append(f, r), true
				break
			}
		}
		if !placed {
			out = append(out, []iprange.Range{r})
		}
	}
	return out
}

// Containing returns the range whose subnet contains ip: the one whose
// prefix length and gateway an address of it is returned with, handed
// out or not.
func (p *Pool) Containing(ip netip.Addr) (iprange.Range, bool) {
	for _, r := range p.Ranges {
		if r.Contains(ip) {
			return r, true
		}
	}
	return iprange.Range{}, false
}

// RangeFor returns the range of the pool that hands ip out, or why none does.
func (p *Pool) RangeFor(ip netip.Addr) (iprange.Range, error) {
	if err := p.Usable(ip); err != nil {
		return iprange.Range{}, err
	}
	for _, r := range p.Ranges {
		if r.Contains(ip) && r.Usable(ip) == nil {
			return r, nil
		}
	}
	return iprange.Range{}, fmt.Errorf("%s is not handed out by IPPool %q", ip, p.Name)
}

// Usable reports why no range of the pool may hand out ip now, or nil.
func (p *Pool) Usable(ip netip.Addr) error {
	if p.InOverlap(ip) {
		return fmt.Errorf("%s is in the range of a younger inline network that overlaps IPPool %q", ip, p.Name)
	}
	return iprange.UsableIn(p.Ranges, ip, p.Name)
}

// InOverlap reports whether ip lies in a younger overlapping network's range.
func (p *Pool) InOverlap(ip netip.Addr) bool {
	for _, r := range p.Overlapped {
		if !ip.Less(r.Start()) && !r.End().Less(ip) {
			return true
		}
	}
	return false
}

// PrefixOf returns ip with the prefix length of the range containing it.
// An address the ranges no longer cover (a range was removed while it was
// held) keeps the family's first range's length: the pool says nothing
// better about it.
func (p *Pool) PrefixOf(ip netip.Addr, family []iprange.Range) netip.Prefix {
	if r, ok := p.Containing(ip); ok {
		return netip.PrefixFrom(ip, r.Subnet().Bits())
	}
	return netip.PrefixFrom(ip, family[0].Subnet().Bits())
}
