// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// Borrowing: when this node holds no block of a range with a free address
// and can take none (package agent/blocks), an ADD borrows an address
// anywhere in the range, as a live list of the pool shows it; such a
// reservation is labelled shared, so every agent watches it.

// borrowTTL is how long a borrowing ADD reuses the live list of an
// earlier one on the node.
const borrowTTL = 10 * time.Second

// blockCandidate returns a free address of r in a block this node holds,
// taking a new block when those are full; blocks.ErrNoBlock when there is
// none to take.
func (a *Agent) blockCandidate(ctx context.Context, req *request, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	return a.blocks.Candidate(ctx, req.pool.name, req.pool.key, r, taken, seed)
}

// noteBlockError logs a failure to take a block, at most once a minute.
func (a *Agent) noteBlockError(err error) {
	now := time.Now()
	if last := a.blockErrorLogged.Load(); last != 0 && now.Sub(time.Unix(0, last)) < time.Minute {
		return
	}
	a.blockErrorLogged.Store(now.UnixNano())
	a.log.Error(err, "cannot take an address block; borrowing addresses instead (every agent then watches their reservations)")
}

// borrowSnapshots keeps, per pool, the last live list a borrowing ADD
// made, for the node's next borrowing ADDs.
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
	if !ok || now.Sub(s.at) >= borrowTTL {
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
		if now.Sub(s.at) >= borrowTTL {
			delete(b.m, p)
		}
	}
	b.m[pool] = borrowSnapshot{taken: taken, at: now}
}
