// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// The allocation search keeps hints beside the reservation cache (package
// index): what a recent ADD learned that spares the next one work. A hint
// may be stale and is never the truth: a reservation's name still decides
// who holds an address.

// pendingHints are the addresses this agent's creates in flight are for:
// its other ADDs skip them while there are other candidates.
type pendingHints struct {
	mu sync.RWMutex
	m  map[string]map[netip.Addr]int // pool -> IP -> creates in flight
}

// mark records that a create of ip is in flight; the returned func ends it.
func (p *pendingHints) mark(pool string, ip netip.Addr) (done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[netip.Addr]int{}
	}
	m := p.m[pool]
	if m == nil {
		m = map[netip.Addr]int{}
		p.m[pool] = m
	}
	m[ip]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if m := p.m[pool]; m != nil {
			if m[ip]--; m[ip] <= 0 {
				delete(m, ip)
			}
			if len(m) == 0 {
				delete(p.m, pool)
			}
		}
	}
}

// in reports whether a create of this agent is in flight for an address
// of the pool: a candidate to avoid while there are others, but no proof
// that the pool is full.
func (p *pendingHints) in(pool string) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		p.mu.RLock()
		defer p.mu.RUnlock()
		return p.m[pool][ip] > 0
	}
}

// exhaustedTTL bounds how long a live confirmation of exhaustion stands
// without a release event (the watch may miss one while it is down).
const exhaustedTTL = 10 * time.Second

// exhaustedHints record live confirmations that a range was full, so the
// ADDs that follow refuse without listing the pool again. A confirmation
// lapses at the pool's next release the cache sees, or after exhaustedTTL.
type exhaustedHints struct {
	// releases returns the pool's release count (index.Cache.Releases).
	releases func(pool string) uint64

	mu sync.Mutex
	m  map[string]exhaustedHint // pool + range -> confirmation
}

// exhaustedHint is one live confirmation that a range was full.
type exhaustedHint struct {
	releases uint64 // the pool's release count when the live list began
	at       time.Time
}

func exhaustedKey(pool string, r iprange.Range) string { return pool + "\x00" + r.String() }

// confirm records that a live list begun at release count n found r full.
func (x *exhaustedHints) confirm(pool string, r iprange.Range, n uint64, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = map[string]exhaustedHint{}
	}
	x.m[exhaustedKey(pool, r)] = exhaustedHint{releases: n, at: now}
}

// confirmed reports whether r was confirmed full by a live list with no
// release on the pool seen since, within exhaustedTTL.
func (x *exhaustedHints) confirmed(pool string, r iprange.Range, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := exhaustedKey(pool, r)
	m, ok := x.m[k]
	if !ok {
		return false
	}
	if m.releases != x.releases(pool) || now.Sub(m.at) >= exhaustedTTL {
		delete(x.m, k)
		return false
	}
	return true
}
