// SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// The search for a holder's address in one range, as named phases over a
// search state. candidate runs them in order; Assign makes each candidate
// the holder's, and one someone else took first costs a try.
//
//  1. ownBlock: a free address in a block of the holder, or in a block it
//     takes now. No other holder hands out the block's addresses, so its
//     creates rarely collide, and only the holder watches them.
//  2. borrow: once no block has room and none can be taken, any address
//     free in the range, labelled shared so that every holder sees it: as
//     the holder's cache shows the pool when it shows all of it (the
//     controller's), else as a live list shows it (an agent's).
//  3. confirmFull: a range that looks full to a cache that shows part of
//     the pool is listed live before the request is refused.
//  4. reclaim: in a full range, an address the holder released whose
//     cooldown is over.

// search is what one request's search in a range knows.
type search struct {
	e    *Engine
	pool *Pool
	r    iprange.Range
	seed string
	// taken is what the search counts as held: the holder's cache at
	// first, then a live list of the pool once one was read.
	taken func(netip.Addr) bool
	// pending are the holder's creates in flight: avoided while there are
	// other candidates, never a reason to call the range full.
	pending func(netip.Addr) bool
	// borrowing is set once no block of the holder has room and none can
	// be taken (or the holder takes none).
	borrowing bool
	// live is set once taken shows the whole pool: a live list read by
	// this search, or a cache that shows every reservation. shared is set
	// when taken is the live list another borrowing request read a moment
	// ago: good to scan, no proof of a full range.
	live, shared bool
}

func (e *Engine) newSearch(pool *Pool, r iprange.Range, seed string) *search {
	return &search{
		e: e, pool: pool, r: r, seed: seed,
		taken:     e.taken(pool),
		pending:   e.inflight.inFlightIn(pool.Name),
		borrowing: e.cfg.Blocks == nil,
		live:      e.cfg.CacheShowsAll,
	}
}

// candidate runs the phases until one yields an address to create, its
// create marked in flight until end is called: the own block, then
// borrowing; a range that looks full is confirmed once and searched
// again; a full one is reclaimed from, or refused. inBlock says the
// address lies in one of the holder's blocks.
func (s *search) candidate(ctx context.Context) (ip netip.Addr, inBlock bool, end func(), err error) {
	for {
		ip, inBlock, end, err = s.ownBlock(ctx)
		if s.borrowing {
			ip, end, err = s.borrow(ctx)
		}
		if !errors.Is(err, ErrExhausted) {
			return ip, inBlock, end, err
		}
		if !s.live && !s.confirmed() {
			if err := s.confirmFull(ctx); err != nil {
				return netip.Addr{}, false, nil, err
			}
			continue
		}
		ip, end, err = s.reclaim(ctx, err)
		return ip, false, end, err
	}
}

// ownBlock is phase 1: a free address in a block of the holder, taking a
// free block when those are full. When no block has room and none can be
// taken, the search borrows from now on.
func (s *search) ownBlock(ctx context.Context) (netip.Addr, bool, func(), error) {
	if s.borrowing {
		return netip.Addr{}, false, nil, nil
	}
	unlock := s.e.pickLock(s.pool.Name)
	defer unlock()
	ip, err := s.e.cfg.Blocks.Candidate(ctx, s.pool.Name, s.pool.Key, s.r, s.takenOrPending, s.seed)
	s.borrowing = errors.Is(err, blocks.ErrNoBlock)
	if err != nil {
		return netip.Addr{}, false, nil, err
	}
	return ip, true, s.e.inflight.begin(s.pool.Name, ip), nil
}

// borrow is phase 2: every block is held, so any address free in the
// range will do. A holder whose cache shows part of the pool scans a live
// list of it (shared for a moment by its borrowing requests); a range
// confirmed full a moment ago, with no release seen since, is full
// without a list.
func (s *search) borrow(ctx context.Context) (netip.Addr, func(), error) {
	switch {
	case s.live || s.shared || s.e.cfg.Blocks == nil:
		return s.pick()
	case s.confirmed():
		s.taken, s.live = func(netip.Addr) bool { return true }, true
		return netip.Addr{}, nil, fmt.Errorf("%w in range %s", ErrExhausted, s.r)
	}
	if err := s.borrowView(ctx); err != nil {
		return netip.Addr{}, nil, err
	}
	return s.pick()
}

// borrowView scans with the live list of the holder's last borrowing
// request, within BorrowTTL (an address taken since then costs a failed
// create, which marks it taken), with the cache and the ranges of younger
// networks beside it: no proof of a full range. Without one it lists the
// pool now (confirmFull's list, used alone, as there: the cache may still
// mark an address taken that a collision found held before a release the
// list already shows, and with that mark a fresh list would call the
// range full with the address free).
func (s *search) borrowView(ctx context.Context) error {
	snap, ok := s.e.borrowed.get(s.pool.Name, s.e.cfg.Now())
	if !ok {
		if err := s.confirmFull(ctx); err != nil {
			return err
		}
		s.e.borrowed.put(s.pool.Name, s.taken, s.e.cfg.Now())
		return nil
	}
	cached := s.e.taken(s.pool)
	s.taken, s.shared = func(ip netip.Addr) bool { return snap(ip) || cached(ip) }, true
	return nil
}

// takenOrPending reads the in-flight memo before the cache: a create
// ends only once its holder's cache (or the memo's held set) shows the
// address, so read in this order an address is never seen as neither.
func (s *search) takenOrPending(ip netip.Addr) bool { return s.pending(ip) || s.taken(ip) }

// pick chooses a candidate of the range, preferring one no create of the
// holder is in flight for, and taking one that is rather than call the
// range full; its create is marked in flight before another request can
// pick.
func (s *search) pick() (netip.Addr, func(), error) {
	unlock := s.e.pickLock(s.pool.Name)
	defer unlock()
	ip, err := allocator.Candidate(s.r, s.takenOrPending, s.seed)
	if errors.Is(err, ErrExhausted) {
		ip, err = allocator.Candidate(s.r, s.taken, s.seed)
	}
	if err != nil {
		return netip.Addr{}, nil, err
	}
	return ip, s.e.inflight.begin(s.pool.Name, ip), nil
}

// confirmed reports whether a live list found the range full, with no
// release of the pool seen since.
func (s *search) confirmed() bool {
	return s.e.exhausted.confirmed(rangeKey(s.pool.Name, s.r), s.e.cfg.Store.Releases(s.pool.Name), s.e.cfg.Now())
}

// confirmFull is phase 3: a partial cache errs towards "taken" (the event
// of a release may arrive late), so a range that looks full is listed
// live before the request is refused, and a full one is remembered until
// the pool's next release (exhaustedHints).
func (s *search) confirmFull(ctx context.Context) error {
	releases := s.e.cfg.Store.Releases(s.pool.Name)
	live, err := s.e.cfg.Store.Live(ctx, s.pool.Name)
	if err != nil {
		return err
	}
	s.taken = func(ip netip.Addr) bool { return live(ip) || s.pool.InOverlap(ip) }
	s.live = true
	if _, err := allocator.Candidate(s.r, s.taken, s.seed); errors.Is(err, ErrExhausted) {
		s.e.exhausted.confirm(rangeKey(s.pool.Name, s.r), releases, s.e.cfg.Now())
	}
	return nil
}

// reclaim is phase 4: the range is full, but an address the holder
// released whose cooldown is over is free for the taking (unless a
// younger overlapping network's range holds it now); without one the
// request is refused with full, the error of the search.
func (s *search) reclaim(ctx context.Context, full error) (netip.Addr, func(), error) {
	ip, ok := s.e.cfg.Store.Reclaim(ctx, s.pool.Name, func(ip netip.Addr) bool { return s.r.Usable(ip) == nil && !s.pool.InOverlap(ip) })
	if !ok {
		return netip.Addr{}, nil, full
	}
	return ip, s.e.inflight.begin(s.pool.Name, ip), nil
}
