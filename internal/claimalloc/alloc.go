// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	"github.com/ipkeeper/ipkeeper/internal/reservationindex"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// ErrExhausted reports that a family's ranges have no free address.
var ErrExhausted = allocator.ErrExhausted

// recentTTL is how long the allocator counts an address it created, or
// found taken, as held while its cache does not show it: far longer than a
// watch event takes to arrive (once the cache shows it, the cache decides).
const recentTTL = time.Minute

// Allocator holds addresses for claims. It is safe for concurrent use by
// the workers of several reconcilers.
type Allocator struct {
	client client.Client // writes; reads from the cache
	live   client.Reader // reads from the API server
	addrs  *reservationindex.Addresses
	taker  *blocks.Taker
	log    logr.Logger
	// blocksSynced reports whether the IPBlock watch has delivered every
	// block (WatchBlocks).
	blocksSynced func() bool

	// picking serialises, per pool, choosing a candidate and remembering
	// it, so the workers of the controller never pick the same address.
	picking sync.Map // pool -> *sync.Mutex
	mu      sync.Mutex
	// recent holds, per pool, addresses being created or created (or
	// found taken) that the cache may not show yet.
	recent map[string]map[netip.Addr]time.Time
	// blockErrorLogged is when a failure to take a block was last logged.
	blockErrorLogged time.Time
}

// New returns an Allocator writing through c (whose reads are the cache
// that has the IPPools and IPBlocks), reading live through live, seeing
// what is held in addrs, with claimBlocks, the Set of the blocks of
// IPAMClaims (blocks.NewSet(string(HolderIPAMClaims)), fed by WatchBlocks,
// whose synced func is blocksSynced).
func New(c client.Client, live client.Reader, addrs *reservationindex.Addresses, claimBlocks *blocks.Set, blocksSynced func() bool, log logr.Logger) *Allocator {
	a := &Allocator{client: c, live: live, addrs: addrs, log: log, blocksSynced: blocksSynced, recent: map[string]map[netip.Addr]time.Time{}}
	addrs.OnHeld(a.forget)
	a.taker = &blocks.Taker{
		Set: claimBlocks,
		// Which blocks are held is read from the controller's cache of
		// IPBlocks (every holder's).
		Store:  &blocks.KubeStore{Client: c, Holder: ipkeeperv1alpha1.HolderIPAMClaims, Owner: poolOwner(c)},
		Took:   func(*ipkeeperv1alpha1.IPBlock) { blocksTaken.Inc() },
		Failed: a.noteBlockError,
	}
	return a
}

// Ready reports whether the allocator's caches have seen every
// reservation and every block: until then it would pick addresses and
// blocks it cannot see are held (a failed create each).
func (a *Allocator) Ready() bool { return a.addrs.Synced() && a.blocksSynced() }

// noteBlockError logs a failure to take a block, at most once a minute.
func (a *Allocator) noteBlockError(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.blockErrorLogged) < time.Minute {
		return
	}
	a.blockErrorLogged = time.Now()
	a.log.Error(err, "cannot take an address block for IPAMClaims; borrowing addresses instead (every agent then watches their reservations)")
}

// Pool is what an allocation needs of an IPPool.
type Pool struct {
	// Name is the pool's; Key what its reservations are named from
	// (IPPool.LockKey).
	Name, Key string
	// Ranges are the pool's parsed spec.ranges, in spec order.
	Ranges []iprange.Range
	// Overlapped are ranges of younger overlapping inline networks
	// (inlinepool.FindOverlap): theirs, never handed out here.
	Overlapped []iprange.Range
	// Retains says the pool has a reuse cooldown: a claim made anew gets
	// back what its name held (reservation.KeptFor).
	Retains bool
	// Quota is the pool's spec.maxAddressesPerNamespace (poolquota.Limit);
	// 0: none.
	Quota int
}

// PoolOf parses an IPPool for allocation; errors name the field.
func PoolOf(p *ipkeeperv1alpha1.IPPool) (*Pool, error) {
	ranges, err := ipamconfig.PoolRanges(&p.Spec)
	if err != nil {
		return nil, err
	}
	return &Pool{Name: p.Name, Key: p.LockKey(), Ranges: ranges, Retains: reservation.Cooldown(p) > 0, Quota: poolquota.Limit(p)}, nil
}

// Families groups the pool's ranges by IP family, in order of first
// appearance: a claim gets one address per family, from the first range
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

// RangeFor returns the range of the pool that hands ip out, or why none does.
func (p *Pool) RangeFor(ip netip.Addr) (iprange.Range, error) {
	if p.inOverlap(ip) {
		return iprange.Range{}, fmt.Errorf("%s is in the range of a younger inline network that overlaps IPPool %q", ip, p.Name)
	}
	if err := iprange.UsableIn(p.Ranges, ip, p.Name); err != nil {
		return iprange.Range{}, err
	}
	for _, r := range p.Ranges {
		if r.Contains(ip) && r.Usable(ip) == nil {
			return r, nil
		}
	}
	return iprange.Range{}, fmt.Errorf("%s is not handed out by IPPool %q", ip, p.Name)
}

func (p *Pool) inOverlap(ip netip.Addr) bool {
	for _, r := range p.Overlapped {
		if !ip.Less(r.Start()) && !r.End().Less(ip) {
			return true
		}
	}
	return false
}

// Holder is who a reservation is made for.
type Holder struct {
	Owner ipkeeperv1alpha1.ReservationOwner
	// Network is the reservation's spec.network: the claim's CNI network
	// (a Cluster API claim's is its pool).
	Network string
	// Interface is the IPAMClaim's pod interface (spec.interface).
	Interface string
	// Aliases are the other names of the claim's VM network
	// (naming.ClaimNames): what a claim of one of them left retained is
	// the claim's to take back (reservation.KeptFor).
	Aliases []string
	// ClaimGone reports whether an IPAMClaim is gone, read live
	// (reservation.Claimant.Gone): an alias's claim that exists keeps
	// what it holds.
	ClaimGone func(ipkeeperv1alpha1.ReservationOwner) bool
}

// Claimant is what reservation.KeptFor judges the holder by.
func (h Holder) Claimant() reservation.Claimant {
	return reservation.Claimant{Owner: h.Owner, Aliases: h.Aliases, Gone: h.ClaimGone}
}

// Assign reserves a free address of one IP family of the pool (family:
// its ranges, in spec order) for the holder; seed (the claim's UID) picks
// the first candidate, so a retry tries the same address first. It
// returns ErrExhausted (wrapped) when every range of the family is full,
// and a *poolquota.ExceededError when the holder's namespace holds the
// pool's per-namespace quota.
func (a *Allocator) Assign(ctx context.Context, pool *Pool, h Holder, family []iprange.Range, seed string) (*ipkeeperv1alpha1.IPReservation, error) {
	// The cache's count first: no create (and delete) for an address the
	// quota refuses anyway. The live count after the create decides.
	ns := h.Owner.Namespace
	err := poolquota.Check(pool.Name, pool.Quota, ns, a.addrs.HeldBy(pool.Name, ns)+1)
	if err != nil {
		return nil, err
	}
	for _, r := range family {
		var res *ipkeeperv1alpha1.IPReservation
		if res, err = a.assignInRange(ctx, pool, h, r, seed); !errors.Is(err, ErrExhausted) {
			return res, err
		}
	}
	return nil, err
}

// assignInRange runs the phases of the search in one range, candidate
// after candidate (reservation.Hunt) while the cache has not shown their
// holders yet.
func (a *Allocator) assignInRange(ctx context.Context, pool *Pool, h Holder, r iprange.Range, seed string) (*ipkeeperv1alpha1.IPReservation, error) {
	res, err := reservation.Hunt(func() (*ipkeeperv1alpha1.IPReservation, error) {
		ip, inBlock, err := a.pick(ctx, pool, r, seed)
		if err != nil {
			return nil, err
		}
		res, err := a.create(ctx, pool, h, ip, inBlock)
		if errors.Is(err, reservation.ErrTaken) {
			conflicts.Inc()
		}
		return res, err
	})
	if errors.Is(err, reservation.ErrCollisions) {
		return nil, fmt.Errorf("%d addresses of %s (IPPool %q) the controller's cache showed free were held: the cache is behind; retrying", reservation.MaxCollisions, r, pool.Name)
	}
	return res, err
}

// pick chooses a candidate of r and remembers it, so no other worker
// picks it before the cache shows it; inBlock says it lies in a block of
// IPAMClaims.
func (a *Allocator) pick(ctx context.Context, pool *Pool, r iprange.Range, seed string) (ip netip.Addr, inBlock bool, err error) {
	mu, _ := a.picking.LoadOrStore(pool.Name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	taken := a.takenFunc(pool)
	// Phases 1 and 2: a free address in a block of IPAMClaims, taking a
	// new block when those are full. No agent watches reservations there:
	// the block's addresses are no node's to hand out.
	ip, err = a.taker.Candidate(ctx, pool.Name, pool.Key, r, taken, seed)
	inBlock = err == nil
	if errors.Is(err, blocks.ErrNoBlock) {
		// Phase 3: borrow. Every block is held (or the controller may not
		// take one): any address the cache shows free, labelled shared, so
		// the agent of the node whose block it lies in sees it and skips it.
		ip, err = allocator.Candidate(r, taken, seed)
	}
	if err != nil {
		return netip.Addr{}, false, err
	}
	a.remember(pool.Name, ip)
	return ip, inBlock, nil
}

// Reserve makes ip the holder's: an address a claim requests or records.
// A reservation of ip the holder already has is returned as it is; one of
// anyone else's is a *reservation.TakenError naming it
// (reservation.DescribeHolder says whose in words fit for the holder's
// namespace). A new reservation beyond the pool's per-namespace quota is
// refused with a *poolquota.ExceededError.
func (a *Allocator) Reserve(ctx context.Context, pool *Pool, h Holder, ip netip.Addr) (*ipkeeperv1alpha1.IPReservation, error) {
	return a.create(ctx, pool, h, ip, a.taker.Set.Owns(pool.Name, ip))
}

// create creates the reservation of ip for the holder (labelled as in a
// block of IPAMClaims when inBlock), adopting one that is already the
// holder's (a create whose answer was lost). Someone else's is a
// *reservation.TakenError. A new reservation is confirmed within the
// pool's per-namespace quota (withinQuota); taking back what the claim's
// name kept, or adopting, holds nothing more.
func (a *Allocator) create(ctx context.Context, pool *Pool, h Holder, ip netip.Addr, inBlock bool) (*ipkeeperv1alpha1.IPReservation, error) {
	if err := ipkeeperv1alpha1.ValidateIP(ip); err != nil {
		return nil, fmt.Errorf("address %s of IPPool %s: %w", ip, pool.Name, err)
	}
	block := reservation.NoBlock
	if inBlock {
		block = reservation.ClaimsBlock
	}
	params := reservation.Params{Pool: pool.Name, Key: pool.Key, Network: h.Network, IP: ip, Owner: h.Owner, Interface: h.Interface, Block: block}
	store := reservation.KubeStore{Client: a.client, Live: a.live}
	a.remember(pool.Name, ip)
	creates.Inc()
	res, adopted, err := reservation.CreateOrAdopt(ctx, store, reservation.New(params))
	if err == nil && !adopted {
		return a.withinQuota(ctx, store, pool, res)
	}
	var taken *reservation.TakenError
	if errors.As(err, &taken) && taken.Holder != nil && reservation.KeptFor(taken.Holder, h.Claimant(), pool.Retains) {
		res, err = a.takeBack(ctx, store, taken, params, h.Claimant())
	}
	if errors.As(err, &taken) && taken.Holder == nil {
		// Taken, but its holder could not be read (gone meanwhile): not a
		// conflict to report; the next reconcile may get the address.
		return nil, fmt.Errorf("reading IPReservation %s: %w", taken.Name, taken.Err)
	}
	return res, err
}

// withinQuota confirms res, just created, against the pool's quota
// (poolquota.Confirm, counted live): one over it, or one the count could
// not confirm, is deleted at once (never handed out) and the error
// returned.
func (a *Allocator) withinQuota(ctx context.Context, store reservation.Store, pool *Pool, res *ipkeeperv1alpha1.IPReservation) (*ipkeeperv1alpha1.IPReservation, error) {
	err := poolquota.Confirm(ctx, poolquota.Live(a.live), pool.Name, pool.Quota, res.Spec.Owner.Namespace)
	if err == nil {
		return res, nil
	}
	if derr := reservation.Discard(context.WithoutCancel(ctx), store, res.Name, res.UID, res.ResourceVersion); derr != nil && !errors.Is(derr, reservation.ErrGone) {
		a.log.Error(derr, "deleting a reservation the namespace's quota refused; the garbage collector deletes it once its claim is gone", "reservation", res.Name)
	}
	return nil, err
}

// takeBack gives a claim back the address its claim name held before
// (reservation.KeptFor), by reservation.TakeBack.
func (a *Allocator) takeBack(ctx context.Context, store reservation.Store, taken *reservation.TakenError, params reservation.Params, c reservation.Claimant) (*ipkeeperv1alpha1.IPReservation, error) {
	old := taken.Holder
	res, err := reservation.TakeBack(ctx, store, old, params, func(cur *ipkeeperv1alpha1.IPReservation) bool {
		return reservation.KeptFor(cur, c, true)
	})
	if err != nil {
		return nil, err
	}
	takenBack.Inc()
	a.log.Info("gave a claim back the address its name held before, cooling down since", "claim", params.Owner.Namespace+"/"+params.Owner.Name,
		"ip", old.Spec.IP, "previousClaimUID", old.Spec.Owner.UID, "reuseAfter", old.Spec.ReuseAfter)
	return res, nil
}

// takenFunc reports what the allocator counts as held in the pool: what
// the cache shows, its own creates the cache does not show yet, and the
// ranges of younger overlapping networks. An address the cache has shown
// is no longer remembered (forget): once released, it is free at once.
func (a *Allocator) takenFunc(pool *Pool) func(netip.Addr) bool {
	now := time.Now()
	return func(ip netip.Addr) bool {
		if pool.inOverlap(ip) {
			return true
		}
		return a.addrs.Held(pool.Name, ip) || a.isRecent(pool.Name, ip, now)
	}
}

func (a *Allocator) remember(pool string, ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.recent[pool]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		a.recent[pool] = m
	}
	now := time.Now()
	m[ip] = now
	if len(m)%256 == 0 {
		for k, at := range m {
			if now.Sub(at) >= recentTTL {
				delete(m, k)
			}
		}
	}
}

// forget drops a remembered address: the cache shows it now.
func (a *Allocator) forget(pool string, ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.recent[pool]; m != nil {
		delete(m, ip)
	}
}

func (a *Allocator) isRecent(pool string, ip netip.Addr, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.recent[pool][ip]
	return ok && now.Sub(at) < recentTTL
}
