// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// The search for a pod's address is package ipam's, the one every holder
// runs (this node here, ipkeeper-controller's claims there); what is the
// agent's own is its datastore: the reservation cache of this node's and
// the shared reservations (package index), a live list of a pool when the
// search borrows or confirms a full range, and its own expiry of released
// addresses (reclaimExpired).

// newEngine returns the search of this node: its blocks (none in unit
// tests of allocation: addresses come from the whole range) over its
// datastore, whose cache shows part of each pool and records the agent's
// creates as they return (index.Cache.Wrote).
func (a *Agent) newEngine() *ipam.Engine {
	cfg := ipam.Config{Store: engineStore{a}, CacheShowsWrites: true, Conflict: a.metrics.conflicts.Inc}
	if a.blocks != nil {
		cfg.Blocks = a.blocks
	}
	return ipam.New(cfg)
}

// reserveInRange reserves a free candidate of r for the holder. isNew is
// false when the reservation existed already and is the holder's (a
// create whose response was lost).
func (a *Agent) reserveInRange(ctx context.Context, req *request, r iprange.Range, h holder) (e entry, isNew bool, err error) {
	type made struct {
		e     entry
		isNew bool
	}
	seed := string(h.owner.UID) + "/" + req.IfName
	got, err := ipam.Assign(ctx, a.engine, req.pool, r, seed, func(ctx context.Context, ip netip.Addr, inBlock bool) (made, error) {
		e, isNew, err := a.createOrAdopt(ctx, req, ip, h, inBlock)
		return made{e, isNew}, err
	})
	var f *failure
	switch {
	case err == nil, errors.As(err, &f):
		return got.e, got.isNew, err
	case errors.Is(err, ipam.ErrExhausted):
		return entry{}, false, fail(reasonExhausted, codeInternal, fmt.Errorf("network %q (IPPool %q) is exhausted: %w", req.cfg.Name, req.pool.Name, err))
	case errors.Is(err, reservation.ErrCollisions):
		return entry{}, false, fail(reasonConflict, codeTryAgainLater, fmt.Errorf("network %q: %d candidate addresses in %s were taken by others at create time; the agent's cache is lagging, retry", req.cfg.Name, reservation.MaxCollisions, r))
	default:
		return entry{}, false, fail(reasonInternal, codeInternal, fmt.Errorf("network %q: %w", req.cfg.Name, err))
	}
}

// engineStore is the agent's datastore for the search (ipam.Datastore).
type engineStore struct{ a *Agent }

func (s engineStore) Cached(pool string, now time.Time) func(netip.Addr) bool {
	return s.a.reservations.TakenFunc(pool, now)
}

// Live lists the pool's reservations from the API server: the cache shows
// only this node's and the shared ones. A create that found an address
// taken after the list began counts it as held too.
func (s engineStore) Live(ctx context.Context, pool string) (func(netip.Addr) bool, error) {
	since := time.Now()
	live, err := s.a.store.TakenIn(ctx, pool)
	if err != nil {
		return nil, fail(reasonInternal, codeTryAgainLater, err)
	}
	return func(ip netip.Addr) bool { return live[ip] || s.a.reservations.ConflictSince(pool, ip, since) }, nil
}

func (s engineStore) Releases(pool string) uint64 { return s.a.reservations.Releases(pool) }

func (s engineStore) MarkConflict(pool string, ip netip.Addr, now time.Time) {
	s.a.reservations.MarkConflict(pool, ip, now)
}

func (s engineStore) Reclaim(ctx context.Context, pool string, usable func(netip.Addr) bool) (netip.Addr, bool) {
	return s.a.reclaimExpired(ctx, pool, usable)
}
