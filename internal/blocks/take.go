// SPDX-License-Identifier: Apache-2.0

package blocks

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var (
	// ErrNoBlock means the holder holds no block of the range with a free
	// address and could take none: it borrows an address of the range.
	ErrNoBlock = errors.New("no free address block")
	// ErrTaken (wrapped by Store.Create) means a block of that name exists.
	ErrTaken = errors.New("address block already held")
)

// Store is the narrow interface between a Taker and the API server.
type Store interface {
	// Create creates the holder's block b of pool, named from key (the
	// pool's lock key), and returns it; ErrTaken (wrapped) when a block of
	// that name exists.
	Create(ctx context.Context, pool, key string, b netip.Prefix) (*ipkeeperv1alpha1.IPBlock, error)
	// Held lists the blocks of a pool, whoever holds them, as the holder
	// knows them best (live for an agent, which watches only its own).
	Held(ctx context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error)
}

// Taker finds addresses in its holder's blocks and takes new blocks.
type Taker struct {
	Set   *Set
	Store Store
	// Took is called after a block was taken; Failed when taking one
	// failed for another reason than another holder having it (the
	// holder borrows meanwhile). Either may be nil.
	Took   func(*ipkeeperv1alpha1.IPBlock)
	Failed func(error)
}

// InOwn returns a free address of r in the blocks of pool the holder
// holds. Blocks cut from r's subnet before it changed are left alone. The
// block that last gave an address is looked at first, then the others in
// address order from it: in a burst of allocations it is the one with
// room, and each full block before it would cost a look at every address.
func (t *Taker) InOwn(pool string, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, bool) {
	for _, b := range t.Set.ownFromLastGiver(pool) {
		if r.BlockOf(b.Addr()) != b {
			continue
		}
		sub, ok := r.BlockPart(b)
		if !ok {
			continue
		}
		if ip, err := allocator.Candidate(sub, taken, seed); err == nil {
			t.Set.gaveFrom(pool, b)
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// Candidate returns a free address of r in a block of pool the holder
// holds, taking a new block (named from key, the pool's lock key) when
// those are full; ErrNoBlock when there is none to take. taken says which
// addresses the holder knows to be held; an address it cannot see (in
// another holder's block) only costs its caller a failed create.
func (t *Taker) Candidate(ctx context.Context, pool, key string, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	if ip, ok := t.InOwn(pool, r, taken, seed); ok {
		return ip, nil
	}
	memo := pool + "\x00" + r.String()
	if t.Set.noneFreeNow(memo, time.Now()) {
		return netip.Addr{}, ErrNoBlock
	}
	unlock := t.Set.lockTaking(pool)
	defer unlock()
	// Another allocation may have taken a block meanwhile.
	if ip, ok := t.InOwn(pool, r, taken, seed); ok {
		return ip, nil
	}
	held, err := t.Store.Held(ctx, pool)
	if err != nil {
		t.failed(err)
		return netip.Addr{}, ErrNoBlock
	}
	t.Set.SetHeld(pool, held)
	for b := range r.Blocks(t.Set.Holder()) {
		if !t.Set.Free(pool, b) {
			continue
		}
		sub, ok := r.BlockPart(b)
		if !ok {
			continue
		}
		ip, err := allocator.Candidate(sub, taken, seed)
		if err != nil {
			continue // nothing free there that the holder can see
		}
		blk, err := t.Store.Create(ctx, pool, key, b)
		switch {
		case errors.Is(err, ErrTaken):
			// Another holder took it since the list.
			t.Set.Guess(pool, b)
			continue
		case err != nil:
			// Blocks only spare watch traffic: without one (no right to
			// take it yet, say, while an upgrade rolls out), borrow.
			t.failed(err)
			return netip.Addr{}, ErrNoBlock
		}
		t.Set.Record(blk)
		if t.Took != nil {
			t.Took(blk)
		}
		return ip, nil
	}
	t.Set.rememberNoneFree(memo, time.Now())
	return netip.Addr{}, ErrNoBlock
}

func (t *Taker) failed(err error) {
	if t.Failed != nil {
		t.Failed(err)
	}
}
