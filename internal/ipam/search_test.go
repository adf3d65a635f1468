// SPDX-License-Identifier: Apache-2.0

package ipam_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// A holder whose cache shows every pool but not its own writes (the
// controller's) counts what it created as held until the cache shows it,
// and then leaves the cache to decide.
func TestCreatedIsHeldUntilSeen(t *testing.T) {
	store := newMemStore()
	e := ipam.New(controllerConfig(store))
	r := cidrRange(t, "10.0.0.0/29")
	pool := onePool(r)
	var c creates
	first, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false))
	if err != nil {
		t.Fatal(err)
	}
	second, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false))
	if err != nil || second == first {
		t.Fatalf("second Assign with the same seed = %v, %v; want another address than %v while the cache does not show it", second, err, first)
	}
	e.Seen(pool.Name, first)
	third, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false))
	if err != nil || third != first {
		t.Fatalf("after Seen, with the cache not showing %v (released meanwhile), Assign = %v, %v; want it again", first, third, err)
	}
	if n := store.liveCalls(); n != 0 {
		t.Errorf("%d live lists, want none: the cache shows every pool", n)
	}
}

// A candidate someone else created first costs a try, is marked taken in
// the datastore and counted; every try taken ends the hunt.
func TestTakenCandidatesCostATry(t *testing.T) {
	store := newMemStore()
	conflicts := 0
	cfg := controllerConfig(store)
	cfg.Conflict = func() { conflicts++ }
	e := ipam.New(cfg)
	r := cidrRange(t, "10.0.0.0/24")
	pool := onePool(r)
	var c creates
	ip, err := ipam.Assign(context.Background(), e, pool, r, "s", c.takenFirst(1, reservation.ErrTaken))
	if err != nil || c.count() < 2 || ip == c.ips[0] {
		t.Fatalf("Assign = %v, %v after trying %v; want an address other than the one taken first", ip, err, c.ips)
	}
	if marked := store.marked(); conflicts != 1 || len(marked) != 1 || marked[0] != c.ips[0] {
		t.Fatalf("conflicts counted %d, marked %v; want the taken address %v once", conflicts, marked, c.ips[0])
	}
	if _, err := ipam.Assign(context.Background(), e, pool, r, "s", c.alwaysTaken()); !errors.Is(err, reservation.ErrCollisions) {
		t.Fatalf("every candidate taken: err = %v, want ErrCollisions", err)
	}
}

// A holder whose cache shows part of a pool (an agent's) lists it live
// before calling a range full, remembers a full one until the pool's next
// release, and takes back an expired address of its own in a full range.
func TestFullRangeConfirmedLive(t *testing.T) {
	store := newMemStore()
	e := ipam.New(agentConfig(store))
	r := cidrRange(t, "10.0.0.0/29")
	pool := onePool(r)
	free := addr("10.0.0.3")
	holdAll := func() {
		store.showCached(pool.Name, true, usable(r)...)
		store.showLive(pool.Name, true, usable(r)...)
	}
	holdAll()
	store.showLive(pool.Name, false, free) // the cache missed its release
	var c creates
	got, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false))
	if n := store.liveCalls(); err != nil || got != free || n != 1 {
		t.Fatalf("Assign = %v, %v after %d live lists; want %v after one", got, err, n, free)
	}

	holdAll()
	if _, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false)); !errors.Is(err, ipam.ErrExhausted) || store.liveCalls() != 2 {
		t.Fatalf("full range: err = %v after %d live lists; want ErrExhausted after a second", err, store.liveCalls())
	}
	if _, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false)); !errors.Is(err, ipam.ErrExhausted) || store.liveCalls() != 2 {
		t.Fatalf("confirmed full, no release since: err = %v after %d live lists; want ErrExhausted without a list", err, store.liveCalls())
	}
	store.release(pool.Name)
	store.addReclaimable(pool.Name, addr("10.0.0.5"))
	got, err = ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false))
	if n := store.liveCalls(); err != nil || got != addr("10.0.0.5") || n != 3 {
		t.Fatalf("after a release: Assign = %v, %v after %d live lists; want the expired 10.0.0.5 after a third", got, err, n)
	}
}

// An address a create is in flight for is avoided while others are free,
// and taken rather than calling the range full; Reserve marks its address
// in flight the same way.
func TestInFlightAvoidedButNeverFull(t *testing.T) {
	store := newMemStore()
	e := ipam.New(agentConfig(store))
	r := cidrRange(t, "10.0.0.0/29")
	pool := onePool(r)
	a, b := addr("10.0.0.2"), addr("10.0.0.4")
	held := except(usable(r), a, b)
	store.showCached(pool.Name, true, held...)
	store.showLive(pool.Name, true, held...)
	var c creates
	var inner []netip.Addr
	_, err := ipam.Reserve(context.Background(), e, pool.Name, a, func(context.Context) (struct{}, error) {
		got, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false))
		if err != nil {
			return struct{}{}, err
		}
		inner = append(inner, got)
		_, err = ipam.Reserve(context.Background(), e, pool.Name, b, func(context.Context) (struct{}, error) {
			got, err := ipam.Assign(context.Background(), e, pool, r, "s", c.succeed(store, pool.Name, false))
			inner = append(inner, got)
			return struct{}{}, err
		})
		return struct{}{}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if inner[0] != b {
		t.Errorf("with %v in flight, Assign = %v; want the other free address %v", a, inner[0], b)
	}
	if inner[1] != a && inner[1] != b {
		t.Errorf("with both free addresses in flight, Assign = %v; want one of them rather than exhausted", inner[1])
	}
}

// Concurrent requests of one holder never create the same address twice.
func TestConcurrentAssignsDiffer(t *testing.T) {
	store := newMemStore()
	e := ipam.New(controllerConfig(store))
	r := cidrRange(t, "10.0.0.0/24")
	pool := onePool(r)
	var mu sync.Mutex
	seen := map[netip.Addr]int{}
	collisions := 0
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := string(rune('a'+i%26)) + string(rune('a'+i/26))
			ip, err := ipam.Assign(context.Background(), e, pool, r, seed, func(_ context.Context, ip netip.Addr, _ bool) (netip.Addr, error) {
				mu.Lock()
				defer mu.Unlock()
				if seen[ip] > 0 {
					collisions++
					return netip.Addr{}, reservation.ErrTaken
				}
				seen[ip]++
				return ip, nil
			})
			if err != nil {
				t.Errorf("Assign %d: %v", i, err)
				return
			}
			if !r.Contains(ip) {
				t.Errorf("Assign %d = %v, outside %v", i, ip, r)
			}
		}()
	}
	wg.Wait()
	if len(seen) != 100 || collisions != 0 {
		t.Fatalf("%d addresses created for 100 requests, %d creates of an address another request of the holder had; want 100 and none", len(seen), collisions)
	}
}
