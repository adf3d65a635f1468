// SPDX-License-Identifier: Apache-2.0

package reservationindex

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// entry is what the Addresses keeps of one reservation: only what counting
// needs. network is "" for a reservation of no CNI network.
type entry struct {
	// namespace is the owner's: what the pool's per-namespace quota counts.
	pool, network, namespace string
	ip                       netip.Addr
	cooling                  bool
}

// holders counts the reservations of one pool that hold one address.
// Names derive from (pool, ip), so there is normally one; the count keeps
// the set right even if an old reservation named another way duplicates it.
type holders struct {
	n, cooling int32
}

// poolSet is the part of the Addresses for one pool.
type poolSet struct {
	addrs      map[netip.Addr]holders
	networks   map[string]int // network -> reservations of it in the pool
	namespaces map[string]int // owner namespace -> reservations of it in the pool
}

// Addresses holds, per pool, the distinct addresses its reservations hold
// and the networks they came from. It is fed by the reservation informer's
// events (Set, Delete, through Source) and read by the pool status
// controller (Count) and the controller's allocator (Held), so every
// reservation is cached once; it is safe for concurrent use.
type Addresses struct {
	synced atomic.Bool
	// onHeld are called with each address a reservation's arrival holds.
	onHeld []func(pool string, ip netip.Addr)
	mu     sync.RWMutex
	byName map[string]entry
	pools  map[string]*poolSet
}

// NewAddresses returns an empty Addresses.
func NewAddresses() *Addresses {
	return &Addresses{byName: map[string]entry{}, pools: map[string]*poolSet{}}
}

func entryOf(r *v1alpha1.IPReservation) entry {
	// The CRD only admits canonical addresses; anything else stays the
	// zero Addr, which no range can hand out: it counts as out of range.
	ip, _ := netip.ParseAddr(r.Spec.IP)
	e := entry{
		pool:      r.Spec.Pool,
		network:   r.Spec.Network,
		namespace: r.Spec.Owner.Namespace,
		ip:        ip,
		cooling:   r.Spec.Released(),
	}
	if r.Spec.Owner.Kind == v1alpha1.OwnerIPAddressClaim {
		// Cluster API reservations carry the pool's name as their network:
		// they use the pool, but are of no CNI network.
		e.network = ""
	}
	return e
}

// Set records r, added or updated. It returns the pools whose counts
// changed (none when only, say, the container ID moved): old is the pool
// r was counted in before when that differs from its pool now.
func (x *Addresses) Set(r *v1alpha1.IPReservation) (pool, old string, changed bool) {
	e := entryOf(r)
	defer func() {
		for _, f := range x.onHeld {
			f(e.pool, e.ip) // once Held says so
		}
	}()
	x.mu.Lock()
	defer x.mu.Unlock()
	prev, had := x.byName[r.Name]
	if had && prev == e {
		return e.pool, "", false
	}
	if had {
		x.remove(prev)
		if prev.pool != e.pool {
			old = prev.pool
		}
	}
	x.byName[r.Name] = e
	ps := x.pools[e.pool]
	if ps == nil {
		ps = &poolSet{addrs: map[netip.Addr]holders{}, networks: map[string]int{}, namespaces: map[string]int{}}
		x.pools[e.pool] = ps
	}
	h := ps.addrs[e.ip]
	h.n++
	if e.cooling {
		h.cooling++
	}
	ps.addrs[e.ip] = h
	if e.network != "" {
		ps.networks[e.network]++
	}
	ps.namespaces[e.namespace]++
	return e.pool, old, true
}

// Delete forgets the reservation called name and returns its pool.
func (x *Addresses) Delete(name string) (pool string, changed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	prev, had := x.byName[name]
	if !had {
		return "", false
	}
	delete(x.byName, name)
	x.remove(prev)
	return prev.pool, true
}

// remove takes e's contribution out of its pool; x.mu is held.
func (x *Addresses) remove(e entry) {
	ps := x.pools[e.pool]
	h := ps.addrs[e.ip]
	h.n--
	if e.cooling {
		h.cooling--
	}
	if h.n == 0 {
		delete(ps.addrs, e.ip)
	} else {
		ps.addrs[e.ip] = h
	}
	if e.network != "" {
		if ps.networks[e.network]--; ps.networks[e.network] == 0 {
			delete(ps.networks, e.network)
		}
	}
	if ps.namespaces[e.namespace]--; ps.namespaces[e.namespace] == 0 {
		delete(ps.namespaces, e.namespace)
	}
	if len(ps.addrs) == 0 {
		delete(x.pools, e.pool)
	}
}

// OnHeld registers f to be called with the pool and address of every
// reservation the Addresses learn of: a writer that remembers its own
// creates until the cache shows them learns here that it does. Register
// before the Source starts; f must not block.
func (x *Addresses) OnHeld(f func(pool string, ip netip.Addr)) { x.onHeld = append(x.onHeld, f) }

// Synced reports whether the Addresses have seen every reservation that
// existed when their Source started (until then, Held may miss some).
func (x *Addresses) Synced() bool { return x.synced.Load() }

// Held reports whether a reservation of pool holds ip (a released one
// waiting out its cooldown included: it is not free yet).
func (x *Addresses) Held(pool string, ip netip.Addr) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ps := x.pools[pool]
	if ps == nil {
		return false
	}
	_, ok := ps.addrs[ip]
	return ok
}

// HeldBy returns how many reservations of pool the owners of namespace
// hold, released ones included: what the pool's per-namespace quota
// counts (poolquota), from the cache, without a list.
func (x *Addresses) HeldBy(pool, namespace string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if ps := x.pools[pool]; ps != nil {
		return ps.namespaces[namespace]
	}
	return 0
}

// HeldIn reports whether a reservation of pool holds an address of block
// p. It looks up each of p's addresses (a block has at most 256), so it
// costs no scan of the pool.
func (x *Addresses) HeldIn(pool string, p netip.Prefix) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ps := x.pools[pool]
	if ps == nil {
		return false
	}
	if len(ps.addrs) < 1<<min(p.Addr().BitLen()-p.Bits(), 16) {
		for ip := range ps.addrs { // fewer held than the block holds
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	for ip := p.Masked().Addr(); p.Contains(ip); ip = ip.Next() {
		if _, ok := ps.addrs[ip]; ok {
			return true
		}
	}
	return false
}

// Count is the usage of one pool against its current ranges.
type Count struct {
	// Used is the number of held addresses per range, in range order: an
	// address counts in the first range that can hand it out.
	Used []int64
	// OutOfRange is the number of held addresses no range can hand out.
	OutOfRange int64
	// CoolingDown is the number of held addresses in Used all of whose
	// holders released them and wait out the pool's reuse cooldown (a
	// released address out of range counts in OutOfRange only), so
	// CoolingDown <= sum(Used).
	CoolingDown int64
	// Networks are the CNI networks of the pool's reservations, sorted
	// (Cluster API claims' reservations are of none).
	Networks []string
	// HeldGateways are the ranges' gateways a reservation holds, in range
	// order: a pool edit moved a gateway onto an address in use.
	HeldGateways []netip.Addr
	// Namespaces is how many reservations each owner namespace holds
	// (released ones included), for the namespaces holding at least
	// minPerNamespace (Count's argument; none when it is 0).
	Namespaces map[string]int64
}

// Count counts pool's held addresses against ranges (nil when the spec is
// invalid: then every held address is out of range), and the namespaces
// holding at least minPerNamespace reservations (0: none counted).
func (x *Addresses) Count(pool string, ranges []iprange.Range, minPerNamespace int) Count {
	c := Count{Used: make([]int64, len(ranges))}
	x.mu.RLock()
	defer x.mu.RUnlock()
	ps := x.pools[pool]
	if ps == nil {
		return c
	}
	for ip, h := range ps.addrs {
		if i := usableIn(ranges, ip); i >= 0 {
			c.Used[i]++
			if h.cooling == h.n {
				c.CoolingDown++
			}
		} else {
			c.OutOfRange++
		}
	}
	for _, r := range ranges {
		if gw := r.Gateway(); gw.IsValid() && !slices.Contains(c.HeldGateways, gw) {
			if _, ok := ps.addrs[gw]; ok {
				c.HeldGateways = append(c.HeldGateways, gw)
			}
		}
	}
	c.Networks = make([]string, 0, len(ps.networks))
	for n := range ps.networks {
		c.Networks = append(c.Networks, n)
	}
	slices.Sort(c.Networks)
	if minPerNamespace > 0 {
		for ns, n := range ps.namespaces {
			if n >= minPerNamespace {
				if c.Namespaces == nil {
					c.Namespaces = map[string]int64{}
				}
				c.Namespaces[ns] = int64(n)
			}
		}
	}
	return c
}

// usableIn returns the index of the first range that can hand ip out, or -1.
func usableIn(ranges []iprange.Range, ip netip.Addr) int {
	for i, r := range ranges {
		// Contains first: it is what rules out most ranges, and Usable
		// builds an error for every range it refuses.
		if r.Contains(ip) && r.Usable(ip) == nil {
			return i
		}
	}
	return -1
}
