// SPDX-License-Identifier: Apache-2.0

package blocks

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// noneFreeTTL bounds how long a holder that found no block to take borrows
// without looking again, when no block goes meanwhile.
const noneFreeTTL = 30 * time.Second

// Set is what one holder knows of IPBlocks: per pool, the blocks it holds
// (from a watch of its blocks and, ahead of it, its own creates), and who
// held the others when it last looked (a live list when it takes a block,
// and creates that found a block taken). It is safe for concurrent use.
type Set struct {
	holder string
	mu     sync.RWMutex
	// held maps, per pool, each held block to its holder ("" when only a
	// create that found it taken says it is held); a live list replaces
	// it whenever the holder takes a block.
	held map[string]map[netip.Prefix]string
	// lengths counts, per pool, the held blocks of each prefix length:
	// blocks of another length (cut from a subnet since changed) may
	// overlap a block about to be taken.
	lengths map[string]map[int]int
	// mine holds, per pool, the holder's blocks, in address order.
	mine map[string][]netip.Prefix
	// freed counts deleted blocks: a block that went may be taken again.
	freed uint64
	// noneFree remembers, per pool and range, that no block was free to take.
	noneFree map[string]noneFreeMemo
	// gave is, per pool, the holder's block that last gave an address.
	gave map[string]netip.Prefix
	// taking serialises taking a new block per pool, so the allocations
	// of one holder that all find its blocks full take one block, not one
	// each.
	takingMu sync.Mutex
	taking   map[string]*sync.Mutex
}

type noneFreeMemo struct {
	freed uint64
	at    time.Time
}

// NewSet returns the Set of holder (ipkeeperv1alpha1.IPBlockSpec.HolderName).
func NewSet(holder string) *Set {
	return &Set{
		holder: holder, held: map[string]map[netip.Prefix]string{}, lengths: map[string]map[int]int{},
		mine: map[string][]netip.Prefix{}, noneFree: map[string]noneFreeMemo{}, taking: map[string]*sync.Mutex{}, gave: map[string]netip.Prefix{},
	}
}

// Holder is whose Set this is.
func (s *Set) Holder() string { return s.holder }

// Record records a block a watch delivered or the holder created.
func (s *Set) Record(b *ipkeeperv1alpha1.IPBlock) {
	p, err := netip.ParsePrefix(b.Spec.CIDR)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdLocked(b.Spec.Pool, p.Masked(), b.Spec.HolderName())
}

// SetHeld records the blocks of a pool a live list found, and the holder's.
func (s *Set) SetHeld(pool string, blocks []ipkeeperv1alpha1.IPBlock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, pool)
	delete(s.lengths, pool)
	for _, p := range s.mine[pool] {
		s.holdLocked(pool, p, s.holder)
	}
	for _, b := range blocks {
		if p, err := netip.ParsePrefix(b.Spec.CIDR); err == nil && b.Spec.Pool == pool {
			s.holdLocked(pool, p.Masked(), b.Spec.HolderName())
		}
	}
}

// ReplaceMine takes the full list of the holder's blocks (a relist):
// those it lacks went. It reports whether any went.
func (s *Set) ReplaceMine(blocks []*ipkeeperv1alpha1.IPBlock) bool {
	listed := map[string]map[netip.Prefix]bool{}
	for _, b := range blocks {
		if p, err := netip.ParsePrefix(b.Spec.CIDR); err == nil {
			if listed[b.Spec.Pool] == nil {
				listed[b.Spec.Pool] = map[netip.Prefix]bool{}
			}
			listed[b.Spec.Pool][p.Masked()] = true
		}
	}
	type gone struct {
		pool string
		p    netip.Prefix
	}
	var went []gone
	s.mu.RLock()
	for pool, ps := range s.mine {
		for _, p := range ps {
			if !listed[pool][p] {
				went = append(went, gone{pool, p})
			}
		}
	}
	s.mu.RUnlock()
	for _, g := range went {
		s.forget(g.pool, g.p, s.holder)
	}
	for _, b := range blocks {
		s.Record(b)
	}
	return len(went) > 0
}

// Guess records that someone holds block p of pool (a create found it
// taken), until the next live list says who.
func (s *Set) Guess(pool string, p netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[pool][p]; !ok {
		s.holdLocked(pool, p, "")
	}
}

func (s *Set) holdLocked(pool string, p netip.Prefix, holder string) {
	m := s.held[pool]
	if m == nil {
		m = map[netip.Prefix]string{}
		s.held[pool] = m
		s.lengths[pool] = map[int]int{}
	}
	if _, ok := m[p]; !ok {
		s.lengths[pool][p.Bits()]++
	}
	m[p] = holder
	if holder == s.holder && !slices.Contains(s.mine[pool], p) {
		s.mine[pool] = append(s.mine[pool], p)
		slices.SortFunc(s.mine[pool], func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	}
}

// Forget drops a deleted block: if it was the holder's, the holder no
// longer hands it out. It reports whether the block was the holder's.
func (s *Set) Forget(b *ipkeeperv1alpha1.IPBlock) bool {
	p, err := netip.ParsePrefix(b.Spec.CIDR)
	if err != nil {
		return false
	}
	return s.forget(b.Spec.Pool, p.Masked(), b.Spec.HolderName())
}

func (s *Set) forget(pool string, p netip.Prefix, holder string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freed++
	if _, ok := s.held[pool][p]; ok {
		delete(s.held[pool], p)
		if s.lengths[pool][p.Bits()]--; s.lengths[pool][p.Bits()] <= 0 {
			delete(s.lengths[pool], p.Bits())
		}
		if len(s.held[pool]) == 0 {
			delete(s.held, pool)
			delete(s.lengths, pool)
		}
	}
	if holder != s.holder {
		return false
	}
	s.mine[pool] = slices.DeleteFunc(s.mine[pool], func(x netip.Prefix) bool { return x == p })
	if len(s.mine[pool]) == 0 {
		delete(s.mine, pool)
	}
	return true
}

// Free reports whether nobody holds block p of pool (a block the pool's
// geometry gives), nor a smaller block inside it. A held block larger than
// p is no block of the geometry (Of never cuts one), so it does not count:
// one object covering a whole pool, which a compromised node could write,
// would otherwise make every other holder borrow. Taking a block inside
// it is safe, since each address is still locked by its reservation's
// name.
func (s *Set) Free(pool string, p netip.Prefix) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	held := s.held[pool]
	for bits := range s.lengths[pool] {
		if bits < p.Bits() {
			continue
		}
		if bits == p.Bits() {
			if _, ok := held[p.Masked()]; ok {
				return false
			}
			continue
		}
		// Smaller blocks inside p (a subnet since widened): look at each.
		for q := range held {
			if q.Bits() == bits && p.Contains(q.Addr()) {
				return false
			}
		}
	}
	return true
}

// Own returns the blocks of a pool the holder holds, in address order.
func (s *Set) Own(pool string) []netip.Prefix {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.mine[pool])
}

// ownFromLastGiver returns Own(pool) rotated so that the block that last
// gave an address comes first.
func (s *Set) ownFromLastGiver(pool string) []netip.Prefix {
	s.mu.RLock()
	defer s.mu.RUnlock()
	own := s.mine[pool]
	i := slices.Index(own, s.gave[pool])
	if i < 0 {
		i = 0
	}
	return append(slices.Clone(own[i:]), own[:i]...)
}

// gaveFrom records the block that last gave an address of pool.
func (s *Set) gaveFrom(pool string, b netip.Prefix) {
	s.mu.RLock()
	same := s.gave[pool] == b
	s.mu.RUnlock()
	if same {
		return // most allocations: no write lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gave[pool] = b
}

// Owns reports whether ip lies in one of the holder's blocks of pool.
func (s *Set) Owns(pool string, ip netip.Addr) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.mine[pool] {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// noneFreeNow reports whether a look for a block (of the range key names)
// found none within noneFreeTTL, with no block freed since.
func (s *Set) noneFreeNow(key string, now time.Time) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.noneFree[key]
	return ok && m.freed == s.freed && now.Sub(m.at) < noneFreeTTL
}

func (s *Set) rememberNoneFree(key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, m := range s.noneFree {
		if now.Sub(m.at) >= noneFreeTTL {
			delete(s.noneFree, k)
		}
	}
	s.noneFree[key] = noneFreeMemo{freed: s.freed, at: now}
}

// lockTaking serialises taking a block of pool; it returns the unlock.
func (s *Set) lockTaking(pool string) func() {
	s.takingMu.Lock()
	m := s.taking[pool]
	if m == nil {
		m = &sync.Mutex{}
		s.taking[pool] = m
	}
	s.takingMu.Unlock()
	m.Lock()
	return m.Unlock
}
