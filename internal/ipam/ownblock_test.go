// SPDX-License-Identifier: Apache-2.0

package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// A holder with blocks is given an address of its own blocks first, and
// its create is told so (inBlock): only the holder watches those.
func TestAssignOwnBlockFirst(t *testing.T) {
	t.Parallel()
	holders := []struct {
		name string
		cfg  func(*memStore) ipam.Config
		show bool // the cache records the holder's own creates
	}{
		{"controller", controllerConfig, false},
		{"agent", agentConfig, true},
	}
	for _, h := range holders {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			r := cidrRange(t, "10.0.0.0/24")
			pool := onePool(r)
			blk := &memBlocks{block: cidrRange(t, "10.0.0.64/29")}
			inBlock := usable(blk.block)
			// Half the block is held already, and the rest of the range free.
			store.showCached(pool.Name, true, inBlock[:3]...)
			cfg := h.cfg(store)
			cfg.Blocks = blk
			e := ipam.New(cfg)
			var c creates
			for i := range len(inBlock) - 3 {
				ip, err := ipam.Assign(context.Background(), e, pool, r, fmt.Sprint("seed-", i), c.succeed(store, pool.Name, h.show))
				if err != nil {
					t.Fatalf("Assign %d: %v", i, err)
				}
				if !slices.Contains(inBlock[3:], ip) || slices.Index(c.ips, ip) != i {
					t.Fatalf("Assign %d = %v after creates %v; want a free address of the block %v not given before", i, ip, c.ips, inBlock[3:])
				}
				if !c.inBlock[i] {
					t.Errorf("Assign %d: create of %v told inBlock false, want true", i, ip)
				}
			}
			if n := store.liveCalls(); n != 0 {
				t.Errorf("%d live lists, want none: the block had room", n)
			}
			blk.mu.Lock()
			defer blk.mu.Unlock()
			for i := range blk.pools {
				if blk.pools[i] != pool.Name || blk.keys[i] != pool.Key {
					t.Errorf("Blocks asked for pool %q key %q, want %q, %q", blk.pools[i], blk.keys[i], pool.Name, pool.Key)
				}
			}
		})
	}
}

// Once the blocks are full and none can be taken, the controller borrows
// any address its cache shows free: not in a block, and without a list.
func TestAssignBorrowsFromCacheShowingAll(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	r := cidrRange(t, "10.0.0.0/28")
	pool := onePool(r)
	all := usable(r)
	free := []netip.Addr{all[4], all[11]}
	store.showCached(pool.Name, true, except(all, free...)...)
	blk := &memBlocks{noBlock: true}
	cfg := controllerConfig(store)
	cfg.Blocks = blk
	e := ipam.New(cfg)
	var c creates
	for i := range free {
		ip, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false))
		if err != nil || !slices.Contains(free, ip) || c.inBlock[i] {
			t.Fatalf("Assign %d = %v, %v (inBlock %v); want a borrowed free address of %v", i, ip, err, c.inBlock, free)
		}
	}
	if _, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false)); !errors.Is(err, ipam.ErrExhausted) {
		t.Fatalf("both borrowed: err = %v, want ErrExhausted", err)
	}
	if c.ips[0] == c.ips[1] || store.liveCalls() != 0 || blk.callCount() != 3 {
		t.Errorf("creates %v, %d live lists, %d Blocks calls; want two different, none, 3", c.ips, store.liveCalls(), blk.callCount())
	}
}

// An agent that borrows lists the pool live (its cache shows only its
// node's reservations and the shared ones) and shares that list with its
// next borrowing requests for BorrowTTL.
func TestAssignBorrowsThroughLiveList(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	store.markShown = true
	r := cidrRange(t, "10.0.0.0/28")
	pool := onePool(r)
	all := usable(r)
	free := []netip.Addr{all[2], all[7], all[12]}
	// Other nodes hold the rest: the live list shows it, the cache not.
	store.showLive(pool.Name, true, except(all, free...)...)
	clk := newClock()
	cfg := agentConfig(store)
	cfg.Blocks, cfg.Now = &memBlocks{noBlock: true}, clk.Now
	e := ipam.New(cfg)
	var c creates

	first, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, true))
	if err != nil || !slices.Contains(free, first) || c.inBlock[0] || store.liveCalls() != 1 {
		t.Fatalf("first borrow = %v, %v after %d live lists; want one of %v (the list's free, not in a block) after one", first, err, store.liveCalls(), free)
	}
	second, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, true))
	if err != nil || !slices.Contains(free, second) || second == first || store.liveCalls() != 1 {
		t.Fatalf("second borrow within BorrowTTL = %v, %v after %d live lists; want another of %v after the first's list alone", second, err, store.liveCalls(), free)
	}

	// The last free address was taken by another node after the shared
	// list: the create finds it taken, and the list made then shows the
	// range full.
	last := except(free, first, second)[0]
	store.showLive(pool.Name, true, last)
	_, err = ipam.Assign(context.Background(), e, pool, r, "s", func(_ context.Context, ip netip.Addr, inBlock bool) (netip.Addr, error) {
		c.add(ip, inBlock)
		return netip.Addr{}, reservation.ErrTaken
	})
	if !errors.Is(err, ipam.ErrExhausted) || c.ips[2] != last || len(c.ips) != 3 || store.liveCalls() != 2 {
		t.Fatalf("third borrow = %v after creates %v and %d live lists; want ErrExhausted after one failed create of %v and a second list", err, c.ips, store.liveCalls(), last)
	}
	// Confirmed full, no release since: refused without a list.
	if _, err := ipam.Assign(context.Background(), e, pool, r, "t", c.succeed(store, pool.Name, true)); !errors.Is(err, ipam.ErrExhausted) || store.liveCalls() != 2 {
		t.Fatalf("confirmed full: err = %v after %d live lists; want ErrExhausted after 2", err, store.liveCalls())
	}
}

// The shared live list lapses after BorrowTTL: the next borrowing request
// lists again.
func TestAssignBorrowSnapshotLapses(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	r := cidrRange(t, "10.0.0.0/27")
	pool := onePool(r)
	clk := newClock()
	cfg := agentConfig(store)
	cfg.Blocks, cfg.Now = &memBlocks{noBlock: true}, clk.Now
	e := ipam.New(cfg)
	var c creates
	assign := func(seed string) {
		t.Helper()
		if _, err := ipam.Assign(context.Background(), e, pool, r, seed, c.succeed(store, pool.Name, true)); err != nil {
			t.Fatalf("Assign(%s): %v", seed, err)
		}
	}
	assign("a")
	clk.Advance(ipam.BorrowTTL - 1)
	assign("b")
	if n := store.liveCalls(); n != 1 {
		t.Fatalf("within BorrowTTL: %d live lists, want 1", n)
	}
	clk.Advance(1)
	assign("c")
	if n := store.liveCalls(); n != 2 {
		t.Fatalf("BorrowTTL after the list: %d live lists, want 2", n)
	}
}

// Addresses come from the holder's block while it has room; once it is
// full and no other block can be taken, the request borrows from the range.
func TestAssignBorrowsWhenBlockFills(t *testing.T) {
	t.Parallel()
	store := newMemStore()
	r := cidrRange(t, "10.0.0.0/28")
	pool := onePool(r)
	blk := &memBlocks{block: cidrRange(t, "10.0.0.8/31")} // two addresses
	cfg := controllerConfig(store)
	cfg.Blocks = blk
	e := ipam.New(cfg)
	var c creates
	for i := range 3 {
		ip, err := ipam.Assign(context.Background(), e, pool, r, fmt.Sprint(i), c.succeed(store, pool.Name, false))
		if err != nil {
			t.Fatalf("Assign %d: %v", i, err)
		}
		if got, want := c.inBlock[i], i < 2; got != want || blk.block.Contains(ip) != want {
			t.Errorf("Assign %d = %v, inBlock %t; want in the block: %t", i, ip, got, want)
		}
	}
}
