// SPDX-License-Identifier: Apache-2.0

package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

var bothHolders = []struct {
	name string
	cfg  func(*memStore) ipam.Config
}{
	{"controller", controllerConfig},
	{"agent", agentConfig},
}

// blockedCreate is a create that reports its address and then waits
// until released, so a test can run a second request while the first's
// create is in flight.
type blockedCreate struct {
	started chan netip.Addr
	release chan struct{}
}

func newBlockedCreate() *blockedCreate {
	return &blockedCreate{started: make(chan netip.Addr, 1), release: make(chan struct{})}
}

func (b *blockedCreate) create(_ context.Context, ip netip.Addr, _ bool) (netip.Addr, error) {
	b.started <- ip
	<-b.release
	return ip, nil
}

type result struct {
	ip  netip.Addr
	err error
}

// assignAsync runs Assign in a goroutine; its result arrives on the channel.
func assignAsync(e *ipam.Engine, pool *ipam.Pool, seed string, create func(context.Context, netip.Addr, bool) (netip.Addr, error)) <-chan result {
	out := make(chan result, 1)
	go func() {
		ip, err := ipam.Assign(context.Background(), e, pool, pool.Ranges[0], seed, create)
		out <- result{ip, err}
	}()
	return out
}

// A create may fail, so its address is avoided while it is in flight and
// there are other candidates, even by a request with the same seed.
func TestAssignAvoidsAddressInFlight(t *testing.T) {
	t.Parallel()
	for _, h := range bothHolders {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			r := cidrRange(t, "10.0.0.0/28")
			pool := onePool(r)
			all := usable(r)
			free := []netip.Addr{all[1], all[5], all[9]}
			store.showCached(pool.Name, true, except(all, free...)...)
			e := ipam.New(h.cfg(store))
			blocked := newBlockedCreate()
			done := assignAsync(e, pool, "same", blocked.create)
			inFlight := <-blocked.started

			var c creates
			for i := range len(free) - 1 {
				ip, err := ipam.Assign(context.Background(), e, pool, r, "same", c.succeed(store, pool.Name, true))
				if err != nil || ip == inFlight || !slices.Contains(free, ip) || slices.Index(c.ips, ip) != i {
					t.Fatalf("Assign %d with %v in flight = %v, %v (creates %v); want another free address of %v", i, inFlight, ip, err, c.ips, free)
				}
			}
			close(blocked.release)
			if res := <-done; res.err != nil || res.ip != inFlight {
				t.Fatalf("blocked Assign = %v, %v; want %v", res.ip, res.err, inFlight)
			}
		})
	}
}

// An address in flight is never a reason to call a range full: when it
// is the only free one, a second request tries it (its create decides),
// and an agent does not list the pool for it.
func TestAssignTakesInFlightRatherThanExhausted(t *testing.T) {
	t.Parallel()
	for _, h := range bothHolders {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			r := cidrRange(t, "10.0.0.0/29")
			pool := onePool(r)
			all := usable(r)
			only := all[3]
			store.showCached(pool.Name, true, except(all, only)...)
			store.showLive(pool.Name, true, except(all, only)...)
			e := ipam.New(h.cfg(store))
			blocked := newBlockedCreate()
			done := assignAsync(e, pool, "a", blocked.create)
			if ip := <-blocked.started; ip != only {
				t.Fatalf("first Assign creates %v, want %v", ip, only)
			}
			var c creates
			ip, err := ipam.Assign(context.Background(), e, pool, r, "b", c.succeed(store, pool.Name, false))
			if err != nil || ip != only {
				t.Fatalf("with the only free address %v in flight: Assign = %v, %v; want %v rather than ErrExhausted", only, ip, err, only)
			}
			if n := store.liveCalls(); n != 0 {
				t.Errorf("%d live lists, want none: the range is not full", n)
			}
			close(blocked.release)
			if res := <-done; res.err != nil || res.ip != only {
				t.Fatalf("blocked Assign = %v, %v; want %v", res.ip, res.err, only)
			}
		})
	}
}

// Reserve (a static, requested or taken-back address) marks its address
// in flight while its create runs, as Assign does, and returns what the
// create returns.
func TestReserveMarksInFlight(t *testing.T) {
	t.Parallel()
	for _, h := range bothHolders {
		for _, onlyFree := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/only-free-%t", h.name, onlyFree), func(t *testing.T) {
				t.Parallel()
				store := newMemStore()
				r := cidrRange(t, "10.0.0.0/28")
				pool := onePool(r)
				// The address Assign with this seed tries first.
				static, err := allocator.Candidate(r, nil, "seed")
				if err != nil {
					t.Fatal(err)
				}
				if onlyFree {
					store.showCached(pool.Name, true, except(usable(r), static)...)
				}
				e := ipam.New(h.cfg(store))
				started, release := make(chan struct{}), make(chan struct{})
				want := errors.New("the create's own error")
				done := make(chan error, 1)
				go func() {
					got, err := ipam.Reserve(context.Background(), e, pool.Name, static, func(context.Context) (string, error) {
						close(started)
						<-release
						return "made", want
					})
					if got != "made" {
						err = fmt.Errorf("Reserve returned %q, want the create's %q", got, "made")
					}
					done <- err
				}()
				<-started
				var c creates
				ip, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false))
				switch {
				case err != nil:
					t.Fatalf("Assign with %v reserved in flight: %v", static, err)
				case onlyFree && ip != static:
					t.Errorf("Assign = %v; want %v, in flight but the only free one", ip, static)
				case !onlyFree && ip == static:
					t.Errorf("Assign = %v, the address a Reserve is in flight for; want another", ip)
				}
				close(release)
				if err := <-done; !errors.Is(err, want) {
					t.Errorf("Reserve = %v, want the create's error", err)
				}
			})
		}
	}
}

// A controller's Reserve, like its Assign, counts its address held until
// its cache shows it; an agent's cache records the write itself.
func TestReserveHeldUntilSeen(t *testing.T) {
	t.Parallel()
	for _, h := range bothHolders {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			r := cidrRange(t, "10.0.0.0/28")
			pool := onePool(r)
			static, err := allocator.Candidate(r, nil, "seed")
			if err != nil {
				t.Fatal(err)
			}
			e := ipam.New(h.cfg(store))
			if _, err := ipam.Reserve(context.Background(), e, pool.Name, static, func(context.Context) (bool, error) { return true, nil }); err != nil {
				t.Fatal(err)
			}
			var c creates
			ip, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false))
			if err != nil {
				t.Fatal(err)
			}
			// This fake's cache never shows the reserved address: the agent
			// (its cache records its writes) has nothing to avoid it by.
			if held := h.name == "controller"; (ip != static) != held {
				t.Errorf("Assign after Reserve(%v) = %v; want it avoided: %t", static, ip, held)
			}
			e.Seen(pool.Name, static)
			if ip, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false)); err != nil || ip != static {
				t.Errorf("after Seen, the cache not showing it: Assign = %v, %v; want %v", ip, err, static)
			}
		})
	}
}

// Concurrent requests of one holder, all with the same seed so that each
// starts at the same candidate, never create the same address twice.
func TestConcurrentAssignsNeverCreateTwice(t *testing.T) {
	t.Parallel()
	for _, h := range bothHolders {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			const n = 100
			store := newMemStore()
			r := cidrRange(t, "10.0.0.0/25")
			pool := onePool(r)
			conflicts := atomic.Int32{}
			cfg := h.cfg(store)
			cfg.Conflict = func() { conflicts.Add(1) }
			e := ipam.New(cfg)
			var mu sync.Mutex
			created := map[netip.Addr]int{}
			create := func(_ context.Context, ip netip.Addr, _ bool) (netip.Addr, error) {
				mu.Lock()
				created[ip]++
				again := created[ip] > 1
				mu.Unlock()
				if again {
					return netip.Addr{}, reservation.ErrTaken
				}
				// The holder's cache shows the create as it returns.
				store.showCached(pool.Name, true, ip)
				return ip, nil
			}
			start := make(chan struct{})
			results := make(chan result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					seed := "same"
					if i%4 == 0 {
						seed = fmt.Sprint("own-", i)
					}
					ip, err := ipam.Assign(context.Background(), e, pool, r, seed, create)
					results <- result{ip, err}
				}()
			}
			close(start)
			wg.Wait()
			close(results)
			got := map[netip.Addr]bool{}
			for res := range results {
				if res.err != nil || !r.Contains(res.ip) || got[res.ip] {
					t.Errorf("Assign = %v, %v; want a fresh address of %v", res.ip, res.err, r)
				}
				got[res.ip] = true
			}
			for ip, k := range created {
				if k > 1 {
					t.Errorf("%v created %d times", ip, k)
				}
			}
			if len(got) != n || conflicts.Load() != 0 {
				t.Errorf("%d addresses for %d requests, %d conflicts; want %d and none", len(got), n, conflicts.Load(), n)
			}
		})
	}
}

// gatedClock is a clock whose next reading, once armed, waits for the
// test: it holds a request still between two of its steps.
type gatedClock struct {
	*clock
	armed  atomic.Bool
	paused chan struct{}
	resume chan struct{}
}

func (g *gatedClock) Now() time.Time {
	if g.armed.CompareAndSwap(true, false) {
		g.paused <- struct{}{}
		<-g.resume
	}
	return g.clock.Now()
}

// Between a create's return and the engine counting its address held
// (settle), the address must not look free to another request of the
// holder whose cache does not show it yet: it is no longer in flight, and
// the cache may take a while. The clock is read by settle right after the
// create, so a gated clock holds the first request there.
func TestCreatedAddressNeverFreeBeforeHeld(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"Assign", "Reserve"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			r := cidrRange(t, "10.0.0.0/28")
			pool := onePool(r)
			g := &gatedClock{clock: newClock(), paused: make(chan struct{}), resume: make(chan struct{})}
			cfg := controllerConfig(store)
			cfg.Now = g.Now
			e := ipam.New(cfg)
			first, err := allocator.Candidate(r, nil, "seed")
			if err != nil {
				t.Fatal(err)
			}
			// The create succeeds; the cache (a watch) shows it later.
			create := func(context.Context) (netip.Addr, error) { g.armed.Store(true); return first, nil }
			done := make(chan error, 1)
			go func() {
				var err error
				if via == "Assign" {
					_, err = ipam.Assign(context.Background(), e, pool, r, "seed", func(ctx context.Context, _ netip.Addr, _ bool) (netip.Addr, error) { return create(ctx) })
				} else {
					_, err = ipam.Reserve(context.Background(), e, pool.Name, first, create)
				}
				done <- err
			}()
			<-g.paused
			var c creates
			ip, err := ipam.Assign(context.Background(), e, pool, r, "seed", c.succeed(store, pool.Name, false))
			close(g.resume)
			if err := <-done; err != nil {
				t.Fatalf("first %s: %v", via, err)
			}
			if err != nil || ip == first || slices.Contains(c.ips, first) {
				t.Errorf("Assign right after the create of %v returned, before it was counted held: %v, %v after creates %v; want another address, %v never tried",
					first, ip, err, c.ips, first)
			}
		})
	}
}

// gatedCache is a datastore whose cache, once armed, holds the next
// request still right after it read one address: the request has seen
// the cache, not yet the engine's in-flight marks.
type gatedCache struct {
	*memStore
	armed  atomic.Bool
	paused chan struct{}
	resume chan struct{}
}

func (g *gatedCache) Cached(pool string, now time.Time) func(netip.Addr) bool {
	inner := g.memStore.Cached(pool, now)
	return func(ip netip.Addr) bool {
		held := inner(ip)
		if g.armed.CompareAndSwap(true, false) {
			g.paused <- struct{}{}
			<-g.resume
		}
		return held
	}
}

// A request's view of an address must not be its cache from before a
// create and the in-flight marks from after it: a create that returns
// between the two (its write now in the cache, its mark ended) leaves the
// address looking free. The gated cache holds the second request between
// the two reads while the first one's create returns.
func TestAssignInFlightCheckedBeforeCache(t *testing.T) {
	t.Parallel()
	for _, h := range bothHolders {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			g := &gatedCache{memStore: store, paused: make(chan struct{}), resume: make(chan struct{})}
			r := cidrRange(t, "10.0.0.0/28")
			pool := onePool(r)
			cfg := h.cfg(store)
			cfg.Store = g
			e := ipam.New(cfg)
			started, release := make(chan netip.Addr, 1), make(chan struct{})
			first := assignAsync(e, pool, "seed", func(_ context.Context, ip netip.Addr, _ bool) (netip.Addr, error) {
				started <- ip
				<-release
				// The holder's cache records the write as the create returns.
				store.showCached(pool.Name, true, ip)
				return ip, nil
			})
			x := <-started
			g.armed.Store(true)
			var c creates
			second := assignAsync(e, pool, "seed", c.succeed(store, pool.Name, true))
			<-g.paused
			close(release)
			if res := <-first; res.err != nil || res.ip != x {
				t.Fatalf("first Assign = %v, %v; want %v", res.ip, res.err, x)
			}
			close(g.resume)
			res := <-second
			if res.err != nil || res.ip == x || slices.Contains(c.ips, x) {
				t.Errorf("second Assign, same seed, while %v was created = %v, %v after creates %v; want another address, %v never tried", x, res.ip, res.err, c.ips, x)
			}
		})
	}
}
