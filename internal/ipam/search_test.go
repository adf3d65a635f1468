// SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// fakeStore is a holder's datastore in memory: what its cache shows, what
// a live list shows, its release count and its expired released addresses.
type fakeStore struct {
	mu        sync.Mutex
	cached    map[netip.Addr]bool
	live      map[netip.Addr]bool
	releases  uint64
	lives     int
	conflicts []netip.Addr
	expired   []netip.Addr
}

func newFakeStore() *fakeStore {
	return &fakeStore{cached: map[netip.Addr]bool{}, live: map[netip.Addr]bool{}}
}

func (f *fakeStore) Cached(string, time.Time) func(netip.Addr) bool {
	return func(ip netip.Addr) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.cached[ip] }
}

func (f *fakeStore) Live(context.Context, string) (func(netip.Addr) bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lives++
	snap := map[netip.Addr]bool{}
	for ip, held := range f.live {
		snap[ip] = held
	}
	return func(ip netip.Addr) bool { return snap[ip] }, nil
}

func (f *fakeStore) Releases(string) uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.releases }

func (f *fakeStore) MarkConflict(_ string, ip netip.Addr, _ time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conflicts = append(f.conflicts, ip)
}

func (f *fakeStore) Reclaim(_ context.Context, _ string, usable func(netip.Addr) bool) (netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ip := range f.expired {
		if usable(ip) {
			f.expired = append(f.expired[:i], f.expired[i+1:]...)
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// holdAll marks every address of r held, in the cache and the live list,
// but for free.
func (f *fakeStore) holdAll(r iprange.Range, free ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	skip := map[netip.Addr]bool{}
	for _, ip := range free {
		skip[ip] = true
	}
	for ip := r.Start(); !r.End().Less(ip); ip = ip.Next() {
		if r.Usable(ip) == nil && !skip[ip] {
			f.cached[ip], f.live[ip] = true, true
		}
	}
}

func testPool(t *testing.T, cidr string) (*Pool, iprange.Range) {
	t.Helper()
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix(cidr)})
	return &Pool{Name: "p", Key: "p", Ranges: []iprange.Range{r}}, r
}

// made is what a test's create records: the addresses it was asked for.
type made struct {
	mu  sync.Mutex
	ips []netip.Addr
}

func (m *made) create(taken map[netip.Addr]bool) func(context.Context, netip.Addr, bool) (netip.Addr, error) {
	return func(_ context.Context, ip netip.Addr, _ bool) (netip.Addr, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.ips = append(m.ips, ip)
		if taken[ip] {
			return netip.Addr{}, reservation.ErrTaken
		}
		return ip, nil
	}
}

// A holder whose cache shows every pool but not its own writes (the
// controller's) counts what it created as held until the cache shows it,
// and then leaves the cache to decide.
func TestCreatedIsHeldUntilSeen(t *testing.T) {
	store := newFakeStore()
	e := New(Config{Store: store, CacheShowsAll: true})
	pool, r := testPool(t, "10.0.0.0/29")
	var m made
	first, err := Assign(context.Background(), e, pool, r, "seed", m.create(nil))
	if err != nil {
		t.Fatal(err)
	}
	second, err := Assign(context.Background(), e, pool, r, "seed", m.create(nil))
	if err != nil || second == first {
		t.Fatalf("second Assign with the same seed = %v, %v; want another address than %v while the cache does not show it", second, err, first)
	}
	e.Seen(pool.Name, first)
	third, err := Assign(context.Background(), e, pool, r, "seed", m.create(nil))
	if err != nil || third != first {
		t.Fatalf("after Seen, with the cache not showing %v (released meanwhile), Assign = %v, %v; want it again", first, third, err)
	}
	if store.lives != 0 {
		t.Errorf("%d live lists, want none: the cache shows every pool", store.lives)
	}
}

// A candidate someone else created first costs a try, is marked taken in
// the datastore and counted; every try taken ends the hunt.
func TestTakenCandidatesCostATry(t *testing.T) {
	store := newFakeStore()
	conflicts := 0
	e := New(Config{Store: store, CacheShowsAll: true, Conflict: func() { conflicts++ }})
	pool, r := testPool(t, "10.0.0.0/24")
	var m made
	firstTaken := map[netip.Addr]bool{}
	ip, err := Assign(context.Background(), e, pool, r, "s", func(ctx context.Context, ip netip.Addr, inBlock bool) (netip.Addr, error) {
		if len(m.ips) == 0 {
			firstTaken[ip] = true
		}
		return m.create(firstTaken)(ctx, ip, inBlock)
	})
	if err != nil || firstTaken[ip] {
		t.Fatalf("Assign = %v, %v; want an address other than the one taken", ip, err)
	}
	if conflicts != 1 || len(store.conflicts) != 1 || !firstTaken[store.conflicts[0]] {
		t.Fatalf("conflicts counted %d, marked %v; want the taken address once", conflicts, store.conflicts)
	}
	all := map[netip.Addr]bool{}
	for a := r.Start(); !r.End().Less(a); a = a.Next() {
		all[a] = true
	}
	if _, err := Assign(context.Background(), e, pool, r, "s", m.create(all)); !errors.Is(err, reservation.ErrCollisions) {
		t.Fatalf("every candidate taken: err = %v, want ErrCollisions", err)
	}
}

// A holder whose cache shows part of a pool (an agent's) lists it live
// before calling a range full, remembers a full one until the pool's next
// release, and takes back an expired address of its own in a full range.
func TestFullRangeConfirmedLive(t *testing.T) {
	store := newFakeStore()
	e := New(Config{Store: store, CacheShowsWrites: true})
	pool, r := testPool(t, "10.0.0.0/29")
	free := netip.MustParseAddr("10.0.0.3")
	store.holdAll(r)
	store.mu.Lock()
	store.live[free] = false // the cache missed its release
	store.mu.Unlock()
	var m made
	got, err := Assign(context.Background(), e, pool, r, "s", m.create(nil))
	if err != nil || got != free || store.lives != 1 {
		t.Fatalf("Assign = %v, %v after %d live lists; want %v after one", got, err, store.lives, free)
	}

	store.holdAll(r)
	if _, err := Assign(context.Background(), e, pool, r, "s", m.create(nil)); !errors.Is(err, ErrExhausted) || store.lives != 2 {
		t.Fatalf("full range: err = %v after %d live lists; want ErrExhausted after a second", err, store.lives)
	}
	if _, err := Assign(context.Background(), e, pool, r, "s", m.create(nil)); !errors.Is(err, ErrExhausted) || store.lives != 2 {
		t.Fatalf("confirmed full, no release since: err = %v after %d live lists; want ErrExhausted without a list", err, store.lives)
	}
	store.mu.Lock()
	store.releases++
	store.expired = []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	store.mu.Unlock()
	got, err = Assign(context.Background(), e, pool, r, "s", m.create(nil))
	if err != nil || got != netip.MustParseAddr("10.0.0.5") || store.lives != 3 {
		t.Fatalf("after a release: Assign = %v, %v after %d live lists; want the expired 10.0.0.5 after a third", got, err, store.lives)
	}
}

// An address a create is in flight for is avoided while others are free,
// and taken rather than calling the range full; Reserve marks its address
// in flight the same way.
func TestInFlightAvoidedButNeverFull(t *testing.T) {
	store := newFakeStore()
	e := New(Config{Store: store, CacheShowsWrites: true})
	pool, r := testPool(t, "10.0.0.0/29")
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.4")
	store.holdAll(r, a, b)
	var m made
	var inner []netip.Addr
	_, err := Reserve(context.Background(), e, pool.Name, a, func(context.Context) (struct{}, error) {
		got, err := Assign(context.Background(), e, pool, r, "s", m.create(nil))
		if err != nil {
			return struct{}{}, err
		}
		inner = append(inner, got)
		_, err = Reserve(context.Background(), e, pool.Name, b, func(context.Context) (struct{}, error) {
			got, err := Assign(context.Background(), e, pool, r, "s", m.create(nil))
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
	store := newFakeStore()
	e := New(Config{Store: store, CacheShowsAll: true})
	pool, r := testPool(t, "10.0.0.0/24")
	var mu sync.Mutex
	seen := map[netip.Addr]int{}
	collisions := 0
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := string(rune('a'+i%26)) + string(rune('a'+i/26))
			ip, err := Assign(context.Background(), e, pool, r, seed, func(_ context.Context, ip netip.Addr, _ bool) (netip.Addr, error) {
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
