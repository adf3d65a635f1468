// SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// The search keeps memos beside its holder's cache: what a recent request
// learned that spares the next one work, or a failed create. A memo may
// be stale and is never the truth: a reservation's name still decides who
// holds an address.

// unseenTTL is how long the engine counts an address it created, or found
// taken, as held while its holder's cache does not show it: far longer
// than a watch event takes to arrive (once the cache shows it, the cache
// decides).
const unseenTTL = time.Minute

// inFlight is the one memo of the engine's creates that its holder's
// cache may not show yet: the creates in flight (other requests avoid
// those addresses while there are other candidates, since a create may
// fail: never a reason to call a range full), and, for a holder whose
// cache does not record its own writes (Config.CacheShowsWrites), the
// addresses created or found taken, counted as held until the cache shows
// them (Seen) or unseenTTL passes.
type inFlight struct {
	mu      sync.Mutex
	pending map[string]map[netip.Addr]int       // pool -> IP -> creates in flight
	unseen  map[string]map[netip.Addr]time.Time // pool -> IP -> when created or found taken
}

// begin records that a create of ip is in flight; the returned func ends it.
func (m *inFlight) begin(pool string, ip netip.Addr) (end func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		m.pending = map[string]map[netip.Addr]int{}
	}
	p := m.pending[pool]
	if p == nil {
		p = map[netip.Addr]int{}
		m.pending[pool] = p
	}
	p[ip]++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if p := m.pending[pool]; p != nil {
			if p[ip]--; p[ip] <= 0 {
				delete(p, ip)
			}
			if len(p) == 0 {
				delete(m.pending, pool)
			}
		}
	}
}

// inFlightIn reports whether a create is in flight for an address of the pool.
func (m *inFlight) inFlightIn(pool string) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.pending[pool][ip] > 0
	}
}

// hold counts ip as held until the holder's cache shows it (seen).
func (m *inFlight) hold(pool string, ip netip.Addr, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unseen == nil {
		m.unseen = map[string]map[netip.Addr]time.Time{}
	}
	u := m.unseen[pool]
	if u == nil {
		u = map[netip.Addr]time.Time{}
		m.unseen[pool] = u
	}
	u[ip] = now
	if len(u)%256 == 0 {
		for k, at := range u {
			if now.Sub(at) >= unseenTTL {
				delete(u, k)
			}
		}
	}
}

// seen drops a held address: the holder's cache shows it now.
func (m *inFlight) seen(pool string, ip netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u := m.unseen[pool]; u != nil {
		delete(u, ip)
	}
}

// heldIn reports whether the memo counts an address of the pool as held.
func (m *inFlight) heldIn(pool string, now time.Time) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		at, ok := m.unseen[pool][ip]
		return ok && now.Sub(at) < unseenTTL
	}
}

// ExhaustedTTL bounds how long a live confirmation of exhaustion stands
// without a release the holder's cache sees (its watch may miss one while
// it is down).
const ExhaustedTTL = 10 * time.Second

// exhaustedHints record live confirmations that a range was full, so the
// requests that follow refuse without listing the pool again. A
// confirmation lapses at the pool's next release the holder's cache sees
// (Datastore.Releases), or after ExhaustedTTL.
type exhaustedHints struct {
	mu sync.Mutex
	m  map[string]exhaustedHint // pool + range -> confirmation
}

// exhaustedHint is one live confirmation that a range was full.
type exhaustedHint struct {
	releases uint64 // the pool's release count when the live list began
	at       time.Time
}

func rangeKey(pool string, r fmt.Stringer) string { return pool + "\x00" + r.String() }

// confirm records that a live list begun at release count n found r full.
func (x *exhaustedHints) confirm(key string, n uint64, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = map[string]exhaustedHint{}
	}
	x.m[key] = exhaustedHint{releases: n, at: now}
}

// confirmed reports whether the range of key was confirmed full by a live
// list with no release on the pool seen since (releases is the pool's
// count now), within ExhaustedTTL.
func (x *exhaustedHints) confirmed(key string, releases uint64, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	h, ok := x.m[key]
	if !ok {
		return false
	}
	if h.releases != releases || now.Sub(h.at) >= ExhaustedTTL {
		delete(x.m, key)
		return false
	}
	return true
}

// BorrowTTL is how long a borrowing request reuses the live list of an
// earlier one of the same holder.
const BorrowTTL = 10 * time.Second

// borrowSnapshots keep, per pool, the last live list a borrowing request
// made, for the holder's next borrowing requests.
type borrowSnapshots struct {
	mu sync.Mutex
	m  map[string]borrowSnapshot
}

type borrowSnapshot struct {
	taken func(netip.Addr) bool
	at    time.Time
}

func (b *borrowSnapshots) get(pool string, now time.Time) (func(netip.Addr) bool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.m[pool]
	if !ok || now.Sub(s.at) >= BorrowTTL {
		delete(b.m, pool)
		return nil, false
	}
	return s.taken, true
}

func (b *borrowSnapshots) put(pool string, taken func(netip.Addr) bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]borrowSnapshot{}
	}
	for p, s := range b.m {
		if now.Sub(s.at) >= BorrowTTL {
			delete(b.m, p)
		}
	}
	b.m[pool] = borrowSnapshot{taken: taken, at: now}
}
