// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/agent/blocks"
	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// The search for a pod's address in one range, as named phases over a
// search state. reserveInRange lists them in order; each candidate it
// finds is made the holder's by createOrAdopt, and a candidate someone
// else took first costs one of reservation.MaxCollisions tries
// (reservation.Hunt).
//
//  1. ownBlock: a free address in a block of this node, or in a block it
//     takes now.
//  2. borrow: once no block is left, any address a live list of the pool
//     shows free.
//  3. confirmFull: a range that looks full is listed live before the pod
//     is refused.
//  4. reclaim: in a full range, an address this node released whose
//     cooldown is over.

// search is what one ADD's search in a range knows.
type search struct {
	a       *Agent
	req     *request
	r       iprange.Range
	h       holder
	seed    string
	pool    string
	network string
	// taken is what the search counts as held: the reservation cache at
	// first, then a live list of the pool once one was read.
	taken func(netip.Addr) bool
	// pending are this node's creates in flight: avoided while there are
	// other candidates, never a reason to call the range full.
	pending func(netip.Addr) bool
	// borrowing is set once no block of this node has room and none can
	// be taken (or, in unit tests of allocation, there are no blocks).
	borrowing bool
	// live is set once taken is a live list of the pool read by this
	// search: what a borrower scans, and what exhaustion is confirmed
	// against. shared is set when taken is the live list another
	// borrowing ADD read a moment ago: good to scan, no proof of a full
	// range.
	live, shared bool
}

// reserveInRange reserves a free candidate of r for the holder. isNew is
// false when the reservation existed already and is the holder's (a
// create whose response was lost).
func (a *Agent) reserveInRange(ctx context.Context, req *request, r iprange.Range, h holder) (e entry, isNew bool, err error) {
	s := a.newSearch(req, r, h)
	type made struct {
		e     entry
		isNew bool
	}
	got, err := reservation.Hunt(func() (made, error) {
		ip, inBlock, err := s.candidate(ctx)
		if err != nil {
			return made{}, err
		}
		e, isNew, err := s.claim(ctx, ip, inBlock)
		return made{e, isNew}, err
	})
	if errors.Is(err, reservation.ErrCollisions) {
		return entry{}, false, fail(reasonConflict, codeTryAgainLater, fmt.Errorf("network %q: %d candidate addresses in %s were taken by others at create time; the agent's cache is lagging, retry", s.network, reservation.MaxCollisions, r))
	}
	return got.e, got.isNew, err
}

func (a *Agent) newSearch(req *request, r iprange.Range, h holder) *search {
	s := &search{
		a: a, req: req, r: r, h: h,
		seed:    string(h.owner.UID) + "/" + req.IfName,
		pool:    req.pool.name,
		network: req.cfg.Name,
		pending: a.pending.in(req.pool.name),
		// Without blocks (unit tests of allocation) the cache sees the
		// whole range.
		borrowing: a.blocks == nil,
	}
	cached := a.reservations.TakenFunc(s.pool, time.Now())
	s.taken = func(ip netip.Addr) bool { return cached(ip) || req.pool.inOverlap(ip) }
	return s
}

// candidate runs the phases until one yields an address to create: the
// own block, then borrowing; a range that looks full is confirmed once
// (which costs no try) and then searched again; a full one is reclaimed
// from, or refused. inBlock says the address lies in this node's block.
func (s *search) candidate(ctx context.Context) (ip netip.Addr, inBlock bool, err error) {
	for {
		ip, inBlock, err = s.ownBlock(ctx)
		if s.borrowing {
			ip, err = s.borrow(ctx)
		}
		if !errors.Is(err, allocator.ErrExhausted) {
			break
		}
		if s.mayConfirm() {
			if err := s.confirmFull(ctx); err != nil {
				return netip.Addr{}, false, err
			}
			continue
		}
		ip, err = s.reclaim(ctx, err)
		return ip, false, err
	}
	if err != nil {
		var f *failure
		if errors.As(err, &f) {
			return netip.Addr{}, false, err
		}
		return netip.Addr{}, false, fail(reasonInternal, codeInternal, fmt.Errorf("network %q: %w", s.network, err))
	}
	return ip, inBlock, nil
}

// ownBlock is phase 1: a free address in a block of this node, taking a
// free block when those are full. No other agent hands out a node's block,
// so its creates rarely collide and only this node watches them. When no
// block has room and none can be taken, the search borrows from now on.
func (s *search) ownBlock(ctx context.Context) (netip.Addr, bool, error) {
	if s.borrowing {
		return netip.Addr{}, false, nil
	}
	ip, err := s.a.blockCandidate(ctx, s.req, s.r, func(ip netip.Addr) bool { return s.taken(ip) || s.pending(ip) }, s.seed)
	s.borrowing = errors.Is(err, blocks.ErrNoBlock)
	return ip, err == nil, err
}

// borrow is phase 2: every block is held, so any address free in the
// pool will do, labelled shared so that every agent sees it. The cache
// does not show other nodes' blocks, so the search scans a live list of
// the pool (shared for a moment by this node's borrowing ADDs); a range
// confirmed full a moment ago, with no release seen since, is full
// without a list.
func (s *search) borrow(ctx context.Context) (netip.Addr, error) {
	switch {
	case s.live || s.shared || s.a.blocks == nil:
		return s.pick(s.taken)
	case s.a.exhausted.confirmed(s.pool, s.r, time.Now()):
		s.taken, s.live = func(netip.Addr) bool { return true }, true
		return netip.Addr{}, fmt.Errorf("%w in range %s", allocator.ErrExhausted, s.r)
	}
	taken, fresh, err := s.a.borrowView(ctx, s.req, s.r, s.seed)
	if err != nil {
		return netip.Addr{}, err
	}
	s.taken, s.live, s.shared = taken, fresh, !fresh
	return s.pick(s.taken)
}

// pick chooses a candidate of the range, preferring one no create of
// this node is in flight for, and taking one that is rather than call the
// range full.
func (s *search) pick(taken func(netip.Addr) bool) (netip.Addr, error) {
	ip, err := allocator.Candidate(s.r, func(ip netip.Addr) bool { return taken(ip) || s.pending(ip) }, s.seed)
	if errors.Is(err, allocator.ErrExhausted) {
		return allocator.Candidate(s.r, taken, s.seed)
	}
	return ip, err
}

// mayConfirm says whether a range that looks full has yet to be
// confirmed against a live list.
func (s *search) mayConfirm() bool {
	return !s.live && !s.a.exhausted.confirmed(s.pool, s.r, time.Now())
}

// confirmFull is phase 3: the cache errs towards "taken" (the event of a
// release may arrive late), so a range that looks full is listed live
// before the pod is refused, and a full one is remembered until the
// pool's next release (exhaustedHints).
func (s *search) confirmFull(ctx context.Context) error {
	taken, err := s.a.confirmedTaken(ctx, s.req, s.r, s.seed)
	if err != nil {
		return err
	}
	s.taken, s.live = taken, true
	return nil
}

// reclaim is phase 4: the range is full, but an address this node
// released whose cooldown is over is free for the taking; without one the
// ADD is refused as exhausted (full, the error of the search).
func (s *search) reclaim(ctx context.Context, full error) (netip.Addr, error) {
	ip, ok := s.a.reclaimExpired(ctx, s.pool, func(ip netip.Addr) bool { return s.r.Usable(ip) == nil })
	if !ok {
		return netip.Addr{}, fail(reasonExhausted, codeInternal, fmt.Errorf("network %q (IPPool %q) is exhausted: %w", s.network, s.pool, full))
	}
	return ip, nil
}

// claim creates the candidate's reservation for the holder, the lock on
// the address; one someone else holds is marked taken in the cache, and
// the search tries another.
func (s *search) claim(ctx context.Context, ip netip.Addr, inBlock bool) (entry, bool, error) {
	e, isNew, err := s.a.createOrAdopt(ctx, s.req, ip, s.h, inBlock)
	if errors.Is(err, ErrTaken) {
		s.a.metrics.conflicts.Inc()
		s.a.reservations.MarkConflict(s.pool, ip, time.Now())
	}
	return e, isNew, err
}
