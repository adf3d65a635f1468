// SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// ErrExhausted reports that a range, or every range of a family, has no
// free address.
var ErrExhausted = allocator.ErrExhausted

// Datastore is what the search reads of its holder's world: the holder's
// cache of reservations, and the steps that read or write the API server.
type Datastore interface {
	// Cached reports what the holder's cache shows held in the pool now.
	Cached(pool string, now time.Time) func(netip.Addr) bool
	// Live lists what is held in the pool from the API server, counting as
	// held the addresses a create found taken since the list began. Only
	// a holder whose cache shows part of the pool is asked
	// (Config.CacheShowsAll).
	Live(ctx context.Context, pool string) (func(netip.Addr) bool, error)
	// Releases counts the pool's releases the cache has seen: a range
	// confirmed full stays full until the next one.
	Releases(pool string) uint64
	// MarkConflict records that a create found ip held by someone else.
	MarkConflict(pool string, ip netip.Addr, now time.Time)
	// Reclaim frees an address of the pool the holder released whose
	// cooldown is over and that usable accepts, and returns it.
	Reclaim(ctx context.Context, pool string, usable func(netip.Addr) bool) (netip.Addr, bool)
}

// Blocks are a holder's address blocks (a blocks.Taker, or an agent's
// blocks.Node around one).
type Blocks interface {
	// Candidate returns a free address of r in a block of the pool the
	// holder holds, taking a new block (named from key) when those are
	// full; blocks.ErrNoBlock when there is none to take.
	Candidate(ctx context.Context, pool, key string, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error)
}

// Config is what an Engine is made of; one Engine serves one holder.
type Config struct {
	Store Datastore
	// Blocks are the holder's address blocks; nil: the holder takes none
	// and its cache shows the whole range (unit tests of allocation).
	Blocks Blocks
	// CacheShowsAll says the holder's cache shows every reservation of
	// every pool (ipkeeper-controller's): borrowing scans it, and a range
	// it shows full is full. An agent's shows its node's and the shared
	// ones: it borrows from a live list and confirms a full range live.
	CacheShowsAll bool
	// CacheShowsWrites says the holder's cache records its own creates as
	// they return (an agent's index.Cache.Wrote); otherwise the engine
	// counts what it created, or found taken, as held until Seen.
	CacheShowsWrites bool
	// Conflict counts a candidate someone else held at create time; may
	// be nil.
	Conflict func()
	// Now is the clock of the memos; nil: time.Now.
	Now func() time.Time
}

// Engine gives one holder addresses from pools: the search for a free
// candidate, as named phases (search.go), and the memos beside the
// holder's cache. It is safe for concurrent use.
type Engine struct {
	cfg       Config
	inflight  inFlight
	exhausted exhaustedHints
	borrowed  borrowSnapshots
	// picking serialises, per pool, choosing a candidate and marking its
	// create in flight, so two requests never pick the same address from
	// the same view.
	picking sync.Map // pool -> *sync.Mutex
}

// New returns the engine of one holder.
func New(cfg Config) *Engine {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Engine{cfg: cfg}
}

// Seen tells the engine its holder's cache shows ip held in the pool now.
func (e *Engine) Seen(pool string, ip netip.Addr) { e.inflight.seen(pool, ip) }

// Assign reserves a free address of r for the holder: candidate after
// candidate (reservation.Hunt) from the search's phases, each made the
// holder's by create (inBlock: it lies in one of the holder's blocks). A
// candidate create finds someone else's (reservation.ErrTaken) is marked
// taken and costs one of reservation.MaxCollisions tries; seed picks the
// first candidate, so a retry tries the same address first. It returns
// ErrExhausted (wrapped) when r has no free address, and
// reservation.ErrCollisions when every try collided.
func Assign[T any](ctx context.Context, e *Engine, pool *Pool, r iprange.Range, seed string, create func(ctx context.Context, ip netip.Addr, inBlock bool) (T, error)) (T, error) {
	s := e.newSearch(pool, r, seed)
	return reservation.Hunt(func() (T, error) {
		var zero T
		ip, inBlock, end, err := s.candidate(ctx)
		if err != nil {
			return zero, err
		}
		res, err := create(ctx, ip, inBlock)
		// Held before no longer in flight, so no search sees ip free between.
		e.settle(pool.Name, ip)
		end()
		if errors.Is(err, reservation.ErrTaken) {
			if e.cfg.Conflict != nil {
				e.cfg.Conflict()
			}
			e.cfg.Store.MarkConflict(pool.Name, ip, e.cfg.Now())
		}
		return res, err
	})
}

// Reserve makes a given address the holder's through create (a static
// or requested address, or one taken back): meanwhile its create counts
// as in flight, so no search of the holder picks it.
func Reserve[T any](ctx context.Context, e *Engine, pool string, ip netip.Addr, create func(ctx context.Context) (T, error)) (T, error) {
	end := e.inflight.begin(pool, ip)
	res, err := create(ctx)
	e.settle(pool, ip)
	end()
	return res, err
}

// settle records, for a holder whose cache does not record its own
// writes, that ip may be held now whatever the create returned (the
// holder's, someone else's, or a create whose outcome is unknown), until
// the cache shows it.
func (e *Engine) settle(pool string, ip netip.Addr) {
	if e.cfg.CacheShowsWrites {
		return
	}
	now := e.cfg.Now()
	e.inflight.hold(pool, ip, now)
	// The cache may have shown the create before it returned (its Seen
	// came first, and would not come again): then the cache decides
	// already, also once the address is released.
	if e.cfg.Store.Cached(pool, now)(ip) {
		e.inflight.seen(pool, ip)
	}
}

// taken is what the search counts as held in the pool at first: the
// holder's cache, the engine's creates it does not show yet, and the
// ranges of younger overlapping networks.
func (e *Engine) taken(pool *Pool) func(netip.Addr) bool {
	now := e.cfg.Now()
	cached := e.cfg.Store.Cached(pool.Name, now)
	held := e.inflight.heldIn(pool.Name, now)
	return func(ip netip.Addr) bool { return cached(ip) || held(ip) || pool.InOverlap(ip) }
}

func (e *Engine) pickLock(pool string) func() {
	mu, _ := e.picking.LoadOrStore(pool, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// LogBlockErrors returns a Taker's Failed hook that logs msg with the
// error at most once a minute: while no block can be taken every request
// borrows, and each would log the same.
func LogBlockErrors(log logr.Logger, msg string) func(error) {
	var last atomic.Int64
	return func(err error) {
		now := time.Now()
		l := last.Load()
		// CompareAndSwap: of requests failing at once, one logs.
		if l != 0 && now.Sub(time.Unix(0, l)) < time.Minute || !last.CompareAndSwap(l, now.UnixNano()) {
			return
		}
		log.Error(err, msg)
	}
}
