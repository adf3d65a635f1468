// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// ErrExhausted reports that a family's ranges have no free address.
var ErrExhausted = ipam.ErrExhausted

// Allocator holds addresses for claims. It is safe for concurrent use by
// the workers of several reconcilers.
type Allocator struct {
	client client.Client // writes; reads from the cache
	live   client.Reader // reads from the API server
	addrs  *reservationindex.Addresses
	taker  *blocks.Taker
	engine *ipam.Engine
	log    logr.Logger
	// blocksSynced reports whether the IPBlock watch has delivered every
	// block (WatchBlocks).
	blocksSynced func() bool
	// created are its creates whose events have not come back yet.
	created ownCreates
	// unsure are its creates whose outcome is unknown, by holder.
	unsure unsureCreates
}

// New returns an Allocator writing through c (whose reads are the cache
// that has the IPPools and IPBlocks), reading live through live, seeing
// what is held in addrs, with claimBlocks, the Set of the blocks of
// IPAMClaims (blocks.NewSet(string(HolderIPAMClaims)), fed by WatchBlocks,
// whose synced func is blocksSynced).
func New(c client.Client, live client.Reader, addrs *reservationindex.Addresses, claimBlocks *blocks.Set, blocksSynced func() bool, log logr.Logger) *Allocator {
	a := &Allocator{client: c, live: live, addrs: addrs, log: log, blocksSynced: blocksSynced}
	a.taker = &blocks.Taker{
		Set: claimBlocks,
		// Which blocks are held is read from the controller's cache of
		// IPBlocks (every holder's).
		Store:  &blocks.KubeStore{Client: c, Holder: ipkeeperv1alpha1.HolderIPAMClaims, Owner: poolOwner(c)},
		Took:   func(*ipkeeperv1alpha1.IPBlock) { blocksTaken.Inc() },
		Failed: ipam.LogBlockErrors(log, "cannot take an address block for IPAMClaims; borrowing addresses instead (every agent then watches their reservations)"),
	}
	// The controller's cache shows every reservation, and its own creates
	// only once their events come back: the engine counts them held
	// meanwhile, until the cache shows them (OnHeld).
	a.engine = ipam.New(ipam.Config{Store: engineStore{a}, Blocks: a.taker, CacheShowsAll: true, Conflict: conflicts.Inc})
	addrs.OnHeld(a.engine.Seen)
	return a
}

// Ready reports whether the allocator's caches have seen every
// reservation and every block: until then it would pick addresses and
// blocks it cannot see are held (a failed create each).
func (a *Allocator) Ready() bool { return a.addrs.Synced() && a.blocksSynced() }

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
func (a *Allocator) Assign(ctx context.Context, pool *ipam.Pool, h Holder, family []iprange.Range, seed string) (*ipkeeperv1alpha1.IPReservation, error) {
	// The cache's count first: no create (and delete) for an address the
	// quota refuses anyway. The live count after the create decides.
	ns := h.Owner.Namespace
	err := poolquota.Check(pool.Name, pool.Quota, ns, a.addrs.HeldBy(pool.Name, ns)+1)
	if err != nil {
		return nil, err
	}
	if res, ok, err := a.confirmUnsure(ctx, pool, h, family); ok {
		return res, err
	}
	for _, r := range family {
		var res *ipkeeperv1alpha1.IPReservation
		if res, err = a.assignInRange(ctx, pool, h, r, seed); !errors.Is(err, ErrExhausted) {
			return res, err
		}
	}
	return nil, err
}

// assignInRange runs the search in one range (ipam.Assign): the claims'
// blocks, a new block, then borrowing from the controller's cache, which
// shows every reservation.
func (a *Allocator) assignInRange(ctx context.Context, pool *ipam.Pool, h Holder, r iprange.Range, seed string) (*ipkeeperv1alpha1.IPReservation, error) {
	res, err := ipam.Assign(ctx, a.engine, pool, r, seed, func(ctx context.Context, ip netip.Addr, inBlock bool) (*ipkeeperv1alpha1.IPReservation, error) {
		return a.create(ctx, pool, h, ip, inBlock)
	})
	if errors.Is(err, reservation.ErrCollisions) {
		return nil, fmt.Errorf("%d addresses of %s (IPPool %q) the controller's cache showed free were held: the cache is behind; retrying", reservation.MaxCollisions, r, pool.Name)
	}
	return res, err
}

// Reserve makes ip the holder's: an address a claim requests or records.
// A reservation of ip the holder already has is returned as it is; one of
// anyone else's is a *reservation.TakenError naming it
// (reservation.DescribeHolder says whose in words fit for the holder's
// namespace). A new reservation beyond the pool's per-namespace quota is
// refused with a *poolquota.ExceededError.
func (a *Allocator) Reserve(ctx context.Context, pool *ipam.Pool, h Holder, ip netip.Addr) (*ipkeeperv1alpha1.IPReservation, error) {
	return ipam.Reserve(ctx, a.engine, pool.Name, ip, func(ctx context.Context) (*ipkeeperv1alpha1.IPReservation, error) {
		return a.create(ctx, pool, h, ip, a.taker.Set.Owns(pool.Name, ip))
	})
}

// create creates the reservation of ip for the holder (labelled as in a
// block of IPAMClaims when inBlock), adopting one that is already the
// holder's (a create whose answer was lost). Someone else's is a
// *reservation.TakenError. A new reservation is confirmed within the
// pool's per-namespace quota (withinQuota); taking back what the claim's
// name kept, or adopting, holds nothing more.
func (a *Allocator) create(ctx context.Context, pool *ipam.Pool, h Holder, ip netip.Addr, inBlock bool) (*ipkeeperv1alpha1.IPReservation, error) {
	if err := ipkeeperv1alpha1.ValidateIP(ip); err != nil {
		return nil, fmt.Errorf("address %s of IPPool %s: %w", ip, pool.Name, err)
	}
	block := reservation.NoBlock
	if inBlock {
		block = reservation.ClaimsBlock
	}
	params := reservation.Params{Pool: pool.Name, Key: pool.Key, Network: h.Network, IP: ip, Owner: h.Owner, Interface: h.Interface, Block: block}
	store := reservation.KubeStore{Client: a.client, Live: a.live}
	creates.Inc()
	res, adopted, err := reservation.CreateOrAdopt(ctx, store, reservation.New(params))
	if err != nil && !errors.Is(err, reservation.ErrTaken) {
		a.unsure.add(h.Owner.UID, pool.Name, ip, time.Now()) // it may have landed
	}
	if err == nil && !adopted {
		a.created.add(res, time.Now())
		return a.withinQuota(ctx, store, pool, res)
	}
	var taken *reservation.TakenError
	if errors.As(err, &taken) && taken.Holder != nil && reservation.KeptFor(taken.Holder, h.Claimant(), pool.Retains()) {
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
func (a *Allocator) withinQuota(ctx context.Context, store reservation.Store, pool *ipam.Pool, res *ipkeeperv1alpha1.IPReservation) (*ipkeeperv1alpha1.IPReservation, error) {
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

// engineStore is the controller's datastore for the search
// (ipam.Datastore): its one cache of reservations, which shows every
// pool whole, so it never lists live; released addresses are the garbage
// collector's to delete.
type engineStore struct{ a *Allocator }

func (s engineStore) Cached(pool string, _ time.Time) func(netip.Addr) bool {
	return func(ip netip.Addr) bool { return s.a.addrs.Held(pool, ip) }
}

func (s engineStore) Live(context.Context, string) (func(netip.Addr) bool, error) {
	return nil, errors.New("the controller's cache shows every reservation: no live list")
}

func (s engineStore) Releases(string) uint64 { return 0 }

// MarkConflict has nothing to do: the engine counts an address a create
// found taken as held until the cache shows it.
func (s engineStore) MarkConflict(string, netip.Addr, time.Time) {}

func (s engineStore) Reclaim(context.Context, string, func(netip.Addr) bool) (netip.Addr, bool) {
	return netip.Addr{}, false
}
