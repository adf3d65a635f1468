// SPDX-License-Identifier: Apache-2.0

package ipam_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// memStore is a holder's datastore in memory (ipam.Datastore): per pool,
// what its cache shows held, what a live list shows, its release count
// and the released addresses Reclaim may free. It counts the calls the
// tests make claims about.
type memStore struct {
	mu       sync.Mutex
	cached   map[string]map[netip.Addr]bool
	live     map[string]map[netip.Addr]bool
	releases map[string]uint64
	reclaim  map[string][]netip.Addr
	liveErr  error
	// markShown makes MarkConflict mark the address held in the cache,
	// as an agent's reservation index does; the controller's does not.
	markShown bool

	lives, reclaims int
	conflicts       []netip.Addr
	// conflictSeq counts MarkConflict calls, so a live list counts as held
	// what a create found taken after the list began (the Live contract).
	conflictSeq int
	conflictAt  map[string]map[netip.Addr]int
}

func newMemStore() *memStore {
	return &memStore{
		cached:     map[string]map[netip.Addr]bool{},
		live:       map[string]map[netip.Addr]bool{},
		releases:   map[string]uint64{},
		reclaim:    map[string][]netip.Addr{},
		conflictAt: map[string]map[netip.Addr]int{},
	}
}

var _ ipam.Datastore = (*memStore)(nil)

func (s *memStore) Cached(pool string, _ time.Time) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cached[pool][ip]
	}
}

func (s *memStore) Live(_ context.Context, pool string) (func(netip.Addr) bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lives++
	if s.liveErr != nil {
		return nil, s.liveErr
	}
	snap := map[netip.Addr]bool{}
	for ip, held := range s.live[pool] {
		snap[ip] = held
	}
	since := s.conflictSeq
	return func(ip netip.Addr) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		at, ok := s.conflictAt[pool][ip]
		return snap[ip] || (ok && at > since)
	}, nil
}

func (s *memStore) Releases(pool string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releases[pool]
}

func (s *memStore) MarkConflict(pool string, ip netip.Addr, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conflicts = append(s.conflicts, ip)
	s.conflictSeq++
	if s.conflictAt[pool] == nil {
		s.conflictAt[pool] = map[netip.Addr]int{}
	}
	s.conflictAt[pool][ip] = s.conflictSeq
	if s.markShown {
		s.setLocked(s.cached, pool, true, ip)
	}
}

// Reclaim frees the first listed address usable accepts, as an agent's
// expiry of its released addresses does.
func (s *memStore) Reclaim(_ context.Context, pool string, usable func(netip.Addr) bool) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reclaims++
	for i, ip := range s.reclaim[pool] {
		if usable(ip) {
			s.reclaim[pool] = append(s.reclaim[pool][:i:i], s.reclaim[pool][i+1:]...)
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func (s *memStore) setLocked(m map[string]map[netip.Addr]bool, pool string, held bool, ips ...netip.Addr) {
	if m[pool] == nil {
		m[pool] = map[netip.Addr]bool{}
	}
	for _, ip := range ips {
		m[pool][ip] = held
	}
}

// showCached sets what the cache shows of ips.
func (s *memStore) showCached(pool string, held bool, ips ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(s.cached, pool, held, ips...)
}

// showLive sets what a live list shows of ips.
func (s *memStore) showLive(pool string, held bool, ips ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(s.live, pool, held, ips...)
}

func (s *memStore) release(pool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases[pool]++
}

func (s *memStore) addReclaimable(pool string, ips ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reclaim[pool] = append(s.reclaim[pool], ips...)
}

func (s *memStore) liveCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lives
}

func (s *memStore) reclaimCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reclaims
}

func (s *memStore) marked() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]netip.Addr(nil), s.conflicts...)
}

// memBlocks are a holder's blocks (ipam.Blocks): free addresses of one
// fixed sub-range of the range, or blocks.ErrNoBlock when it has none or
// noBlock is set.
type memBlocks struct {
	mu      sync.Mutex
	block   iprange.Range
	noBlock bool
	calls   int
	pools   []string
	keys    []string
}

var _ ipam.Blocks = (*memBlocks)(nil)

func (b *memBlocks) Candidate(_ context.Context, pool, key string, _ iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	b.mu.Lock()
	b.calls++
	b.pools, b.keys = append(b.pools, pool), append(b.keys, key)
	noBlock, block := b.noBlock, b.block
	b.mu.Unlock()
	if noBlock {
		return netip.Addr{}, blocks.ErrNoBlock
	}
	ip, err := allocator.Candidate(block, taken, seed)
	if err != nil {
		return netip.Addr{}, blocks.ErrNoBlock
	}
	return ip, nil
}

func (b *memBlocks) callCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// clock is a settable clock for Config.Now, so memo lifetimes are tested
// without waiting.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// creates records what a test's create callbacks were asked for.
type creates struct {
	mu      sync.Mutex
	ips     []netip.Addr
	inBlock []bool
}

func (c *creates) add(ip netip.Addr, inBlock bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ips = append(c.ips, ip)
	c.inBlock = append(c.inBlock, inBlock)
}

func (c *creates) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ips)
}

// succeed returns a create that records its address and makes it the
// holder's; show, when set, makes the store's cache show it, as an
// agent's cache records its writes (or a controller's watch delivers
// them).
func (c *creates) succeed(store *memStore, pool string, show bool) func(context.Context, netip.Addr, bool) (netip.Addr, error) {
	return func(_ context.Context, ip netip.Addr, inBlock bool) (netip.Addr, error) {
		c.add(ip, inBlock)
		if show {
			store.showCached(pool, true, ip)
			store.showLive(pool, true, ip)
		}
		return ip, nil
	}
}

// takenFirst returns a create whose first n calls find their address
// someone else's (reservation.ErrTaken, as err wraps it).
func (c *creates) takenFirst(n int, err error) func(context.Context, netip.Addr, bool) (netip.Addr, error) {
	return func(_ context.Context, ip netip.Addr, inBlock bool) (netip.Addr, error) {
		c.add(ip, inBlock)
		if c.count() <= n {
			return netip.Addr{}, err
		}
		return ip, nil
	}
}

// alwaysTaken is a create that finds every address someone else's.
func (c *creates) alwaysTaken() func(context.Context, netip.Addr, bool) (netip.Addr, error) {
	return c.takenFirst(1<<30, reservation.ErrTaken)
}

func mustRange(t testing.TB, s iprange.Spec) iprange.Range {
	t.Helper()
	r, err := iprange.New(s)
	if err != nil {
		t.Fatalf("iprange.New(%+v): %v", s, err)
	}
	return r
}

// cidrRange is the range of a whole subnet.
func cidrRange(t testing.TB, cidr string) iprange.Range {
	t.Helper()
	return mustRange(t, iprange.Spec{Subnet: netip.MustParsePrefix(cidr)})
}

// onePool is a pool of one range named "blue" whose lock key differs from
// its name, so a test can tell which of the two a call got.
func onePool(r iprange.Range) *ipam.Pool {
	return &ipam.Pool{Name: "blue", Key: "blue-key", Ranges: []iprange.Range{r}}
}

// usable lists r's usable addresses in order.
func usable(r iprange.Range) []netip.Addr {
	var out []netip.Addr
	for ip := r.Start(); !r.End().Less(ip); ip = ip.Next() {
		if r.Usable(ip) == nil {
			out = append(out, ip)
		}
	}
	return out
}

// except returns ips without the ones in skip.
func except(ips []netip.Addr, skip ...netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		keep := true
		for _, s := range skip {
			if ip == s {
				keep = false
			}
		}
		if keep {
			out = append(out, ip)
		}
	}
	return out
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// The two holders the engine serves: the controller, whose cache shows
// every reservation but not its own writes, and an agent without blocks,
// whose cache shows part of each pool and records its own writes.
func controllerConfig(store *memStore) ipam.Config {
	return ipam.Config{Store: store, CacheShowsAll: true}
}

func agentConfig(store *memStore) ipam.Config {
	return ipam.Config{Store: store, CacheShowsWrites: true}
}
