// SPDX-License-Identifier: Apache-2.0

package index

import (
	"iter"
	"net/netip"
	"strconv"
	"sync"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Entry is the compact form of an IPReservation the cache keeps.
type Entry struct {
	Name            string
	UID             types.UID
	ResourceVersion string // resourceVersion: a release deletes exactly this version
	Pool            string // spec.pool: the key the agent indexes and locks by
	Network         string // spec.network, as written
	IP              netip.Addr
	Owner           ipkeeperv1alpha1.ReservationOwner
	InterfaceName   string
	ContainerID     string
	Node            string
	Created         time.Time
	// Attached is when the node's agent last pointed the reservation at an
	// attachment (spec.attachedAt, else its creation).
	Attached time.Time
	// ReuseAfter is set once the owner let it go and it only waits out its
	// pool's reuse cooldown (spec.ReuseAfter): it keeps the address taken
	// but is nobody's, and may be deleted from then on.
	ReuseAfter time.Time
}

// Released reports whether the owner let the reservation go (it waits out
// its pool's cooldown).
func (e Entry) Released() bool { return !e.ReuseAfter.IsZero() }

func attachedAt(r *ipkeeperv1alpha1.IPReservation) time.Time {
	if r.Spec.AttachedAt != nil {
		return r.Spec.AttachedAt.Time
	}
	return r.CreationTimestamp.Time
}

func EntryOf(r *ipkeeperv1alpha1.IPReservation) (Entry, bool) {
	ip, err := netip.ParseAddr(r.Spec.IP)
	if err != nil {
		return Entry{}, false
	}
	var reuseAfter time.Time
	if r.Spec.Released() {
		reuseAfter = r.Spec.ReuseAfter.Time
	}
	network := intern(r.Spec.Network)
	return Entry{
		Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion, Pool: intern(r.Spec.Pool), Network: network, IP: ip,
		Owner: ipkeeperv1alpha1.ReservationOwner{
			Kind: intern(r.Spec.Owner.Kind), Namespace: intern(r.Spec.Owner.Namespace), Name: r.Spec.Owner.Name, UID: r.Spec.Owner.UID,
		},
		InterfaceName: intern(r.Spec.InterfaceName), ContainerID: r.Spec.ContainerID, Node: intern(r.Spec.Node),
		Created: r.CreationTimestamp.Time, Attached: attachedAt(r), ReuseAfter: reuseAfter,
	}, true
}

// intern returns the one copy of s the process keeps: networks, pools,
// nodes, namespaces and interface names repeat across the reservations of
// a cluster, and each decoded object brings its own copy.
func intern[S ~string](s S) S { return unique.Make(s).Value() }

// olderThan reports whether e is an older version of the same object than
// o. resourceVersions are opaque to clients, but those of one object grow;
// when either does not parse as a number, neither is called older.
func (e Entry) olderThan(o Entry) bool {
	if e.UID != o.UID {
		return false
	}
	a, errA := strconv.ParseUint(e.ResourceVersion, 10, 64)
	b, errB := strconv.ParseUint(o.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && a < b
}

// attachmentKey identifies one pod attachment to one pool.
type attachmentKey struct {
	pool   string
	podUID types.UID
	ifName string
}

// sandboxKey is what a DEL names: a sandbox's interface on a pool.
type sandboxKey struct {
	pool        string
	containerID string
	ifName      string
}

// nodeKey is what a CNI GC covers: a node's pod reservations on a pool.
type nodeKey struct {
	node string
	pool string
}

// Cache answers "is this address taken" and "what does this attachment
// hold" without an API call. It is fed by the agent's reservation
// reflectors (Watch; Watched, WatchedDeletion) and, ahead of them, by the
// agent's own writes and live reads (Wrote, Deleted); it errs on the side
// of "taken" (a stale entry only skips an address) and the API server's
// AlreadyExists is what guarantees uniqueness. It never goes back to an
// older version of an object it holds, nor brings back one this agent
// deleted: DEL and GC decide from it.
type Cache struct {
	// node is the agent's node; when set, other nodes' pod reservations
	// are kept compact (see remote).
	node      string
	mu        sync.RWMutex
	byName    map[string]Entry
	taken     map[string]map[netip.Addr]string // pool -> IP -> reservation name
	byPod     map[attachmentKey]set
	bySandbox map[sandboxKey]set
	byNode    map[nodeKey]set
	// retired finds the released reservations a node made on a pool,
	// waiting out the cooldown: the ones its agent may delete once expired.
	retired map[nodeKey]set
	// conflicts are addresses a create found taken before the watch
	// showed them; they expire in case the holder is gone by then.
	conflicts map[string]map[netip.Addr]time.Time
	// undelivered holds the UIDs of reservations this agent wrote that the
	// watch has not delivered yet; a lagging event for an older object of
	// the same name must not replace them.
	undelivered map[string]undeliveredWrite
	// deleted holds reservations this agent deleted whose deletion the
	// watch has not delivered yet; their lagging events are stale.
	deleted map[string]tombstone
	// releases counts, per pool, reservations that went away (a change
	// invalidates what a live list showed).
	releases map[string]uint64
}

// set holds reservation names. Almost every set of the cache holds one
// name (an attachment's, a sandbox's or a claim's reservation), which it
// keeps without a map: a map per set was a third of the cache's memory.
type set struct {
	one  string              // the only name, while many is nil
	many map[string]struct{} // every name, once there were two
}

func (s *set) add(name string) {
	switch {
	case s.many != nil:
		s.many[name] = struct{}{}
	case s.one == "" || s.one == name:
		s.one = name
	default:
		s.many = map[string]struct{}{s.one: {}, name: {}}
		s.one = ""
	}
}

func (s *set) remove(name string) {
	if s.many != nil {
		delete(s.many, name)
	} else if s.one == name {
		s.one = ""
	}
}

func (s set) has(name string) bool {
	if s.many != nil {
		_, ok := s.many[name]
		return ok
	}
	return name != "" && s.one == name
}

func (s set) len() int {
	if s.many != nil {
		return len(s.many)
	}
	if s.one != "" {
		return 1
	}
	return 0
}

// all yields the names.
func (s set) all() iter.Seq[string] {
	return func(yield func(string) bool) {
		if s.many == nil {
			if s.one != "" {
				yield(s.one)
			}
			return
		}
		for name := range s.many {
			if !yield(name) {
				return
			}
		}
	}
}

type undeliveredWrite struct {
	uid types.UID
	at  time.Time
}

type tombstone struct {
	uid types.UID
	at  time.Time
}

const (
	conflictTTL = 30 * time.Second
	// tombstoneTTL bounds how long a deletion waits for its watch event.
	tombstoneTTL = 10 * time.Minute
	// undeliveredTTL bounds how long a write of this agent that the watch
	// never delivered (created and deleted within a watch gap) keeps events
	// of another object of the same name out.
	undeliveredTTL = 2 * time.Minute
)

// New returns the cache of the agent of node; with node "" it keeps every
// reservation whole.
func New(node string) *Cache {
	return &Cache{
		node:        node,
		byName:      map[string]Entry{},
		taken:       map[string]map[netip.Addr]string{},
		byPod:       map[attachmentKey]set{},
		bySandbox:   map[sandboxKey]set{},
		byNode:      map[nodeKey]set{},
		retired:     map[nodeKey]set{},
		conflicts:   map[string]map[netip.Addr]time.Time{},
		undelivered: map[string]undeliveredWrite{},
		deleted:     map[string]tombstone{},
		releases:    map[string]uint64{},
	}
}

// Wrote records a reservation this agent just wrote or read live.
func (x *Cache) Wrote(e Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byName[e.Name]; ok && e.olderThan(old) {
		return
	}
	now := time.Now()
	x.undelivered[e.Name] = undeliveredWrite{uid: e.UID, at: now}
	delete(x.deleted, e.Name)
	x.putLocked(e)
}

// Watched records a reservation delivered by the watch. It ignores an
// event older than what the cache holds: another object of the same name
// than one this agent wrote since, an older version of the same object, or
// an object this agent deleted.
func (x *Cache) Watched(e Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t, ok := x.deleted[e.Name]; ok && t.uid == e.UID {
		return
	}
	if w, ok := x.undelivered[e.Name]; ok {
		if w.uid != e.UID && time.Since(w.at) < undeliveredTTL {
			return
		}
		delete(x.undelivered, e.Name)
	}
	if old, ok := x.byName[e.Name]; ok {
		if e.olderThan(old) {
			return
		}
	}
	x.putLocked(e)
}

// remote reports whether e is anything but a pod reservation of this
// node. An agent acts only on its own node's pods (ADD, DEL, GC, cooldown
// expiry); of any other reservation it sees (another node's pod's, a
// claim's, another writer's) it needs the address, the object's identity
// and version, and the owner's kind, so those are kept without the rest
// and found by no attachment, sandbox or node.
func (x *Cache) remote(e Entry) bool { return remoteTo(x.node, e.Node, e.Owner.Kind) }

// remoteTo reports whether a reservation made on node resNode for an owner
// of the given kind is not one of this node's pods', as seen by an agent
// of node ("" keeps every reservation whole).
func remoteTo(node, resNode string, ownerKind ipkeeperv1alpha1.OwnerKind) bool {
	return node != "" && (resNode != node || ownerKind != ipkeeperv1alpha1.OwnerPod)
}

func (x *Cache) putLocked(e Entry) {
	if old, ok := x.byName[e.Name]; ok {
		x.unlinkLocked(old)
	}
	remote := x.remote(e)
	if remote {
		e.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: e.Owner.Kind}
		e.InterfaceName, e.ContainerID = "", ""
	}
	x.byName[e.Name] = e
	if x.taken[e.Pool] == nil {
		x.taken[e.Pool] = map[netip.Addr]string{}
	}
	x.taken[e.Pool][e.IP] = e.Name
	if c := x.conflicts[e.Pool]; c != nil {
		delete(c, e.IP)
	}
	// Only pods' reservations are found by attachment, sandbox or node:
	// the agent acts on no other.
	if remote || e.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
		return
	}
	if e.Released() {
		// Holds the address for nobody: no attachment finds it.
		link(x.retired, nodeKey{e.Node, e.Pool}, e.Name)
		return
	}
	link(x.bySandbox, sandboxKey{e.Pool, e.ContainerID, e.InterfaceName}, e.Name)
	link(x.byPod, attachmentKey{e.Pool, e.Owner.UID, e.InterfaceName}, e.Name)
	link(x.byNode, nodeKey{e.Node, e.Pool}, e.Name)
}

// WatchedDeletion drops a reservation the watch reports deleted, if the cache
// holds that very object (by UID; "" matches any).
func (x *Cache) WatchedDeletion(name string, uid types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t, ok := x.deleted[name]; ok && (uid == "" || t.uid == uid) {
		delete(x.deleted, name)
	}
	if old, ok := x.byName[name]; ok && (uid == "" || old.UID == uid) {
		x.dropLocked(old)
		delete(x.undelivered, name)
	}
}

// Deleted drops a reservation this agent deleted (or found deleted) and
// remembers it until the watch reports the deletion.
func (x *Cache) Deleted(name string, uid types.UID, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byName[name]; ok && old.UID == uid {
		x.dropLocked(old)
		delete(x.undelivered, name)
	}
	x.deleted[name] = tombstone{uid: uid, at: now}
	if len(x.deleted) > 1024 {
		for n, t := range x.deleted {
			if now.Sub(t.at) >= tombstoneTTL {
				delete(x.deleted, n)
			}
		}
	}
}

// dropLocked removes e for good: its address is free again, and so is a
// mark that a create found it taken (MarkConflict): a reservation's name
// is its pool's and address's, so what that create collided with is the
// reservation gone now.
func (x *Cache) dropLocked(e Entry) {
	x.unlinkLocked(e)
	x.releases[e.Pool]++
	if c := x.conflicts[e.Pool]; c != nil {
		delete(c, e.IP)
		if len(c) == 0 {
			delete(x.conflicts, e.Pool)
		}
	}
}

func (x *Cache) unlinkLocked(e Entry) {
	delete(x.byName, e.Name)
	if m := x.taken[e.Pool]; m != nil && m[e.IP] == e.Name {
		delete(m, e.IP)
		if len(m) == 0 {
			delete(x.taken, e.Pool)
		}
	}
	if x.remote(e) || e.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
		return
	}
	if e.Released() {
		unlink(x.retired, nodeKey{e.Node, e.Pool}, e.Name)
		return
	}
	unlink(x.bySandbox, sandboxKey{e.Pool, e.ContainerID, e.InterfaceName}, e.Name)
	unlink(x.byPod, attachmentKey{e.Pool, e.Owner.UID, e.InterfaceName}, e.Name)
	unlink(x.byNode, nodeKey{e.Node, e.Pool}, e.Name)
}

func link[K comparable](m map[K]set, k K, name string) {
	s := m[k]
	s.add(name)
	m[k] = s
}

func unlink[K comparable](m map[K]set, k K, name string) {
	s, ok := m[k]
	if !ok {
		return
	}
	s.remove(name)
	if s.len() == 0 {
		delete(m, k)
	} else {
		m[k] = s
	}
}

// MarkConflict records that a create found ip taken.
func (x *Cache) MarkConflict(pool string, ip netip.Addr, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.conflicts[pool]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		x.conflicts[pool] = m
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

// TakenFunc returns the predicate the allocator scans with.
func (x *Cache) TakenFunc(pool string, now time.Time) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		x.mu.RLock()
		defer x.mu.RUnlock()
		if _, ok := x.taken[pool][ip]; ok {
			return true
		}
		t, ok := x.conflicts[pool][ip]
		return ok && now.Sub(t) < conflictTTL
	}
}

// ConflictSince reports whether a create found ip taken at or after since.
func (x *Cache) ConflictSince(pool string, ip netip.Addr, since time.Time) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t, ok := x.conflicts[pool][ip]
	return ok && !t.Before(since)
}

// Releases is the pool's release counter, read before a live list
// that may confirm exhaustion.
func (x *Cache) Releases(pool string) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.releases[pool]
}

func (x *Cache) entries(s set) []Entry {
	out := make([]Entry, 0, s.len())
	for name := range s.all() {
		out = append(out, x.byName[name])
	}
	return out
}

// Attachment returns the reservations a pod Attachment holds.
func (x *Cache) Attachment(pool string, podUID types.UID, ifName string) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries(x.byPod[attachmentKey{pool, podUID, ifName}])
}

// Sandbox returns the pod reservations a Sandbox's interface made or holds.
func (x *Cache) Sandbox(pool, containerID, ifName string) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries(x.bySandbox[sandboxKey{pool, containerID, ifName}])
}

// OnNode returns a node's pod reservations on a pool.
func (x *Cache) OnNode(node, pool string) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries(x.byNode[nodeKey{node, pool}])
}

// Expired returns a node's released reservations on a pool whose
// cooldown is over at now.
func (x *Cache) Expired(node, pool string, now time.Time) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []Entry
	for name := range x.retired[nodeKey{node, pool}].all() {
		if e := x.byName[name]; !now.Before(e.ReuseAfter) {
			out = append(out, e)
		}
	}
	return out
}

// Get returns the reservation of that name, if the cache has it.
func (x *Cache) Get(name string) (Entry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.byName[name]
	return e, ok
}

func (x *Cache) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byName)
}

// ReservationOf renders an entry back as the fields a release decision
// reads, so one predicate judges cached entries and live objects alike.
func ReservationOf(e Entry) *ipkeeperv1alpha1.IPReservation {
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name, r.UID, r.ResourceVersion = e.Name, e.UID, e.ResourceVersion
	r.Spec = ipkeeperv1alpha1.IPReservationSpec{
		Pool: e.Pool, Network: e.Network, IP: e.IP.String(), Owner: e.Owner,
		InterfaceName: e.InterfaceName, ContainerID: e.ContainerID, Node: e.Node,
	}
	if e.Released() {
		r.Spec.ReuseAfter = &metav1.Time{Time: e.ReuseAfter}
	}
	return r
}
