package agent

import (
	"net/netip"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// entry is the compact form of an IPReservation the index keeps.
type entry struct {
	name        string
	uid         types.UID
	network     string
	ip          netip.Addr
	owner       ipkeeperv1alpha1.ReservationOwner
	ifName      string
	containerID string
	node        string
	created     time.Time
}

func entryOf(r *ipkeeperv1alpha1.IPReservation) (entry, bool) {
	ip, err := netip.ParseAddr(r.Spec.IP)
	if err != nil {
		return entry{}, false
	}
	return entry{
		name: r.Name, uid: r.UID, network: r.Spec.Network, ip: ip, owner: r.Spec.Owner,
		ifName: r.Spec.InterfaceName, containerID: r.Spec.ContainerID, node: r.Spec.Node,
		created: r.CreationTimestamp.Time,
	}, true
}

// attachmentKey identifies one pod attachment to one network.
type attachmentKey struct {
	network string
	podUID  types.UID
	ifName  string
}

// index answers "is this address taken" and "what does this attachment
// hold" without an API call. It is fed by the reservation informer and,
// ahead of it, by the agent's own writes; it errs on the side of "taken"
// (a stale entry only skips an address) and the API server's AlreadyExists
// is what guarantees uniqueness.
type index struct {
	mu     sync.RWMutex
	byName map[string]entry
	taken  map[string]map[netip.Addr]string // network -> IP -> reservation name
	byPod  map[attachmentKey]map[string]struct{}
	// byClaim finds the reservations an IPAMClaim (by UID) holds.
	byClaim map[types.UID]map[string]struct{}
	// conflicts are addresses a create found taken before the informer
	// showed them; they expire in case the holder is gone by then.
	conflicts map[string]map[netip.Addr]time.Time
	// unobserved holds the UIDs of reservations this agent wrote that the
	// informer has not delivered yet; a lagging event for an older object of
	// the same name must not replace them.
	unobserved map[string]types.UID
}

const conflictTTL = 30 * time.Second

func newIndex() *index {
	return &index{
		byName:     map[string]entry{},
		taken:      map[string]map[netip.Addr]string{},
		byPod:      map[attachmentKey]map[string]struct{}{},
		byClaim:    map[types.UID]map[string]struct{}{},
		conflicts:  map[string]map[netip.Addr]time.Time{},
		unobserved: map[string]types.UID{},
	}
}

// upsert records a reservation this agent just wrote.
func (x *index) upsert(e entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unobserved[e.name] = e.uid
	x.upsertLocked(e)
}

// observe records a reservation delivered by the informer. An event for
// another object of the same name than one this agent wrote since is stale
// (that object was deleted before ours was created): ignore it.
func (x *index) observe(e entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if uid, ok := x.unobserved[e.name]; ok {
		if uid != e.uid {
			return
		}
		delete(x.unobserved, e.name)
	}
	x.upsertLocked(e)
}

func (x *index) upsertLocked(e entry) {
	if old, ok := x.byName[e.name]; ok {
		x.removeLocked(old)
	}
	x.byName[e.name] = e
	if x.taken[e.network] == nil {
		x.taken[e.network] = map[netip.Addr]string{}
	}
	x.taken[e.network][e.ip] = e.name
	if c := x.conflicts[e.network]; c != nil {
		delete(c, e.ip)
	}
	if e.owner.Kind == ipkeeperv1alpha1.OwnerPod {
		k := attachmentKey{e.network, e.owner.UID, e.ifName}
		if x.byPod[k] == nil {
			x.byPod[k] = map[string]struct{}{}
		}
		x.byPod[k][e.name] = struct{}{}
	}
	if e.owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
		if x.byClaim[e.owner.UID] == nil {
			x.byClaim[e.owner.UID] = map[string]struct{}{}
		}
		x.byClaim[e.owner.UID][e.name] = struct{}{}
	}
}

// remove drops a reservation if the index holds that very object (by UID).
func (x *index) remove(name string, uid types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byName[name]; ok && (uid == "" || old.uid == uid) {
		x.removeLocked(old)
		delete(x.unobserved, name)
	}
}

func (x *index) removeLocked(e entry) {
	delete(x.byName, e.name)
	if m := x.taken[e.network]; m != nil && m[e.ip] == e.name {
		delete(m, e.ip)
		if len(m) == 0 {
			delete(x.taken, e.network)
		}
	}
	if e.owner.Kind == ipkeeperv1alpha1.OwnerPod {
		k := attachmentKey{e.network, e.owner.UID, e.ifName}
		if m := x.byPod[k]; m != nil {
			delete(m, e.name)
			if len(m) == 0 {
				delete(x.byPod, k)
			}
		}
	}
	if m := x.byClaim[e.owner.UID]; m != nil && e.owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
		delete(m, e.name)
		if len(m) == 0 {
			delete(x.byClaim, e.owner.UID)
		}
	}
}

// markConflict records that a create found ip taken.
func (x *index) markConflict(network string, ip netip.Addr, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.conflicts[network]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		x.conflicts[network] = m
	}
	m[ip] = now
	if len(m) > 1024 {
		for a, t := range m {
			if now.Sub(t) >= conflictTTL {
				delete(m, a)
			}
		}
	}
}

// takenFunc returns the predicate the allocator scans with.
func (x *index) takenFunc(network string, now time.Time) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		x.mu.RLock()
		defer x.mu.RUnlock()
		if _, ok := x.taken[network][ip]; ok {
			return true
		}
		t, ok := x.conflicts[network][ip]
		return ok && now.Sub(t) < conflictTTL
	}
}

// conflictSince reports whether a create found ip taken at or after since.
func (x *index) conflictSince(network string, ip netip.Addr, since time.Time) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t, ok := x.conflicts[network][ip]
	return ok && !t.Before(since)
}

// attachment returns the reservations a pod attachment holds.
func (x *index) attachment(network string, podUID types.UID, ifName string) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []entry
	for name := range x.byPod[attachmentKey{network, podUID, ifName}] {
		out = append(out, x.byName[name])
	}
	return out
}

// claim returns the reservations of a network an IPAMClaim holds.
func (x *index) claim(network string, claimUID types.UID) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []entry
	for name := range x.byClaim[claimUID] {
		if e := x.byName[name]; e.network == network {
			out = append(out, e)
		}
	}
	return out
}

// get returns the reservation of that name, if the index has it.
func (x *index) get(name string) (entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.byName[name]
	return e, ok
}

// filter returns the entries for which keep is true.
func (x *index) filter(keep func(entry) bool) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []entry
	for _, e := range x.byName {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

func (x *index) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byName)
}
