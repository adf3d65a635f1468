// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"iter"
	"net/netip"
	"strconv"
	"sync"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// entry is the compact form of an IPReservation the index keeps.
type entry struct {
	name        string
	uid         types.UID
	rv          string // resourceVersion: a release deletes exactly this version
	pool        string // naming.PoolOf: the key the agent indexes and locks by
	network     string // spec.network, as written
	ip          netip.Addr
	owner       ipkeeperv1alpha1.ReservationOwner
	ifName      string
	containerID string
	node        string
	created     time.Time
	// attached is when the node's agent last pointed the reservation at an
	// attachment (spec.attachedAt, else its creation).
	attached time.Time
	// reuseAfter is set once the owner let it go and it only waits out its
	// pool's reuse cooldown (spec.reuseAfter): it keeps the address taken
	// but is nobody's, and may be deleted from then on.
	reuseAfter time.Time
}

// released reports whether the owner let the reservation go (it waits out
// its pool's cooldown).
func (e entry) released() bool { return !e.reuseAfter.IsZero() }

func attachedAt(r *ipkeeperv1alpha1.IPReservation) time.Time {
	if r.Spec.AttachedAt != nil {
		return r.Spec.AttachedAt.Time
	}
	return r.CreationTimestamp.Time
}

func entryOf(r *ipkeeperv1alpha1.IPReservation) (entry, bool) {
	ip, err := netip.ParseAddr(r.Spec.IP)
	if err != nil {
		return entry{}, false
	}
	var reuseAfter time.Time
	if r.Spec.Released() {
		reuseAfter = r.Spec.ReuseAfter.Time
	}
	network := intern(r.Spec.Network)
	return entry{
		name: r.Name, uid: r.UID, rv: r.ResourceVersion, pool: intern(naming.PoolOf(r.Spec.Pool, network)), network: network, ip: ip,
		owner: ipkeeperv1alpha1.ReservationOwner{
			Kind: intern(r.Spec.Owner.Kind), Namespace: intern(r.Spec.Owner.Namespace), Name: r.Spec.Owner.Name, UID: r.Spec.Owner.UID,
		},
		ifName: intern(r.Spec.InterfaceName), containerID: r.Spec.ContainerID, node: intern(r.Spec.Node),
		created: r.CreationTimestamp.Time, attached: attachedAt(r), reuseAfter: reuseAfter,
	}, true
}

// intern returns the one copy of s the process keeps: networks, pools,
// nodes, namespaces and interface names repeat across the reservations of
// a cluster, and each decoded object brings its own copy.
func intern[S ~string](s S) S { return unique.Make(s).Value() }

// olderThan reports whether e is an older version of the same object than
// o. resourceVersions are opaque to clients, but those of one object grow;
// when either does not parse as a number, neither is called older.
func (e entry) olderThan(o entry) bool {
	if e.uid != o.uid {
		return false
	}
	a, errA := strconv.ParseUint(e.rv, 10, 64)
	b, errB := strconv.ParseUint(o.rv, 10, 64)
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

// exhaustedMemo records a live confirmation that a range was full.
type exhaustedMemo struct {
	releases uint64 // the pool's release count when the live list began
	at       time.Time
}

// index answers "is this address taken" and "what does this attachment
// hold" without an API call. It is fed by the reservation informer and,
// ahead of it, by the agent's own writes; it errs on the side of "taken"
// (a stale entry only skips an address) and the API server's AlreadyExists
// is what guarantees uniqueness. It never goes back to an older version of
// an object it holds, nor brings back one this agent deleted: DEL and GC
// decide from it.
type index struct {
	// node is the agent's node; when set, other nodes' pod reservations
	// are kept compact (see remote).
	node      string
	mu        sync.RWMutex
	byName    map[string]entry
	taken     map[string]map[netip.Addr]string // pool -> IP -> reservation name
	byPod     map[attachmentKey]set
	bySandbox map[sandboxKey]set
	byNode    map[nodeKey]set
	// retired finds the released reservations a node made on a pool,
	// waiting out the cooldown: the ones its agent may delete once expired.
	retired map[nodeKey]set
	// conflicts are addresses a create found taken before the informer
	// showed them; they expire in case the holder is gone by then.
	conflicts map[string]map[netip.Addr]time.Time
	// pending are addresses this agent's creates in flight are for: its
	// other ADDs skip them.
	pending map[string]map[netip.Addr]int
	// unobserved holds the UIDs of reservations this agent wrote that the
	// informer has not delivered yet; a lagging event for an older object of
	// the same name must not replace them.
	unobserved map[string]unobservedWrite
	// deleted holds reservations this agent deleted whose deletion the
	// informer has not delivered yet; their lagging events are stale.
	deleted map[string]tombstone
	// releases counts, per pool, reservations that went away; a change
	// invalidates an exhaustion confirmation.
	releases  map[string]uint64
	exhausted map[string]exhaustedMemo // pool + range -> confirmation
}

// set holds reservation names. Almost every set of the index holds one
// name (an attachment's, a sandbox's or a claim's reservation), which it
// keeps without a map: a map per set was a third of the index's memory.
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

type unobservedWrite struct {
	uid types.UID
	at  time.Time
}

type tombstone struct {
	uid types.UID
	at  time.Time
}

const (
	conflictTTL = 30 * time.Second
	// exhaustedTTL bounds how long a live confirmation of exhaustion stands
	// without a release event (the informer may miss one while its watch
	// is down).
	exhaustedTTL = 10 * time.Second
	// tombstoneTTL bounds how long a deletion waits for its informer event.
	tombstoneTTL = 10 * time.Minute
	// unobservedTTL bounds how long a write of this agent that the informer
	// never delivered (created and deleted within a watch gap) keeps events
	// of another object of the same name out.
	unobservedTTL = 2 * time.Minute
)

// newNodeIndex returns the index of the agent of node.
func newNodeIndex(node string) *index {
	x := newIndex()
	x.node = node
	return x
}

// newIndex returns an index that keeps every reservation whole.
func newIndex() *index {
	return &index{
		byName:     map[string]entry{},
		taken:      map[string]map[netip.Addr]string{},
		byPod:      map[attachmentKey]set{},
		bySandbox:  map[sandboxKey]set{},
		byNode:     map[nodeKey]set{},
		retired:    map[nodeKey]set{},
		conflicts:  map[string]map[netip.Addr]time.Time{},
		pending:    map[string]map[netip.Addr]int{},
		unobserved: map[string]unobservedWrite{},
		deleted:    map[string]tombstone{},
		releases:   map[string]uint64{},
		exhausted:  map[string]exhaustedMemo{},
	}
}

// upsert records a reservation this agent just wrote or read live.
func (x *index) upsert(e entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byName[e.name]; ok && e.olderThan(old) {
		return
	}
	now := time.Now()
	x.unobserved[e.name] = unobservedWrite{uid: e.uid, at: now}
	delete(x.deleted, e.name)
	x.upsertLocked(e)
}

// observe records a reservation delivered by the informer. It ignores an
// event older than what the index holds: another object of the same name
// than one this agent wrote since, an older version of the same object, or
// an object this agent deleted.
func (x *index) observe(e entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t, ok := x.deleted[e.name]; ok && t.uid == e.uid {
		return
	}
	if w, ok := x.unobserved[e.name]; ok {
		if w.uid != e.uid && time.Since(w.at) < unobservedTTL {
			return
		}
		delete(x.unobserved, e.name)
	}
	if old, ok := x.byName[e.name]; ok {
		if e.olderThan(old) {
			return
		}
	}
	x.upsertLocked(e)
}

// remote reports whether e is anything but a pod reservation of this
// node. An agent acts only on its own node's pods (ADD, DEL, GC, cooldown
// expiry); of any other reservation it sees (another node's pod's, a
// claim's, another writer's) it needs the address, the object's identity
// and version, and the owner's kind, so those are kept without the rest
// and found by no attachment, sandbox or node.
func (x *index) remote(e entry) bool { return remoteTo(x.node, e.node, e.owner.Kind) }

// remoteTo reports whether a reservation made on node resNode for an owner
// of the given kind is not one of this node's pods', as seen by an agent
// of node ("" keeps every reservation whole).
func remoteTo(node, resNode string, ownerKind ipkeeperv1alpha1.OwnerKind) bool {
	return node != "" && (resNode != node || ownerKind != ipkeeperv1alpha1.OwnerPod)
}

func (x *index) upsertLocked(e entry) {
	if old, ok := x.byName[e.name]; ok {
		x.unlinkLocked(old)
	}
	remote := x.remote(e)
	if remote {
		e.owner = ipkeeperv1alpha1.ReservationOwner{Kind: e.owner.Kind}
		e.ifName, e.containerID = "", ""
	}
	x.byName[e.name] = e
	if x.taken[e.pool] == nil {
		x.taken[e.pool] = map[netip.Addr]string{}
	}
	x.taken[e.pool][e.ip] = e.name
	if c := x.conflicts[e.pool]; c != nil {
		delete(c, e.ip)
	}
	// Only pods' reservations are found by attachment, sandbox or node:
	// the agent acts on no other.
	if remote || e.owner.Kind != ipkeeperv1alpha1.OwnerPod {
		return
	}
	if e.released() {
		// Holds the address for nobody: no attachment finds it.
		link(x.retired, nodeKey{e.node, e.pool}, e.name)
		return
	}
	link(x.bySandbox, sandboxKey{e.pool, e.containerID, e.ifName}, e.name)
	link(x.byPod, attachmentKey{e.pool, e.owner.UID, e.ifName}, e.name)
	link(x.byNode, nodeKey{e.node, e.pool}, e.name)
}

// remove drops a reservation the informer reports deleted, if the index
// holds that very object (by UID; "" matches any).
func (x *index) remove(name string, uid types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t, ok := x.deleted[name]; ok && (uid == "" || t.uid == uid) {
		delete(x.deleted, name)
	}
	if old, ok := x.byName[name]; ok && (uid == "" || old.uid == uid) {
		x.dropLocked(old)
		delete(x.unobserved, name)
	}
}

// released drops a reservation this agent deleted (or found deleted) and
// remembers it until the informer reports the deletion.
func (x *index) released(name string, uid types.UID, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byName[name]; ok && old.uid == uid {
		x.dropLocked(old)
		delete(x.unobserved, name)
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

// dropLocked removes e for good: its address is free again.
func (x *index) dropLocked(e entry) {
	x.unlinkLocked(e)
	x.releases[e.pool]++
}

func (x *index) unlinkLocked(e entry) {
	delete(x.byName, e.name)
	if m := x.taken[e.pool]; m != nil && m[e.ip] == e.name {
		delete(m, e.ip)
		if len(m) == 0 {
			delete(x.taken, e.pool)
		}
	}
	if x.remote(e) || e.owner.Kind != ipkeeperv1alpha1.OwnerPod {
		return
	}
	if e.released() {
		unlink(x.retired, nodeKey{e.node, e.pool}, e.name)
		return
	}
	unlink(x.bySandbox, sandboxKey{e.pool, e.containerID, e.ifName}, e.name)
	unlink(x.byPod, attachmentKey{e.pool, e.owner.UID, e.ifName}, e.name)
	unlink(x.byNode, nodeKey{e.node, e.pool}, e.name)
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

// markConflict records that a create found ip taken.
func (x *index) markConflict(pool string, ip netip.Addr, now time.Time) {
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

// markPending records that a create of ip is in flight; the returned
// func ends it.
func (x *index) markPending(pool string, ip netip.Addr) (done func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.pending[pool]
	if m == nil {
		m = map[netip.Addr]int{}
		x.pending[pool] = m
	}
	m[ip]++
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if m := x.pending[pool]; m != nil {
			if m[ip]--; m[ip] <= 0 {
				delete(m, ip)
			}
			if len(m) == 0 {
				delete(x.pending, pool)
			}
		}
	}
}

// pendingFunc reports whether a create of this agent is in flight for an
// address of the pool: a candidate to avoid while there are others, but
// no proof that the pool is full.
func (x *index) pendingFunc(pool string) func(netip.Addr) bool {
	return func(ip netip.Addr) bool {
		x.mu.RLock()
		defer x.mu.RUnlock()
		return x.pending[pool][ip] > 0
	}
}

// takenFunc returns the predicate the allocator scans with.
func (x *index) takenFunc(pool string, now time.Time) func(netip.Addr) bool {
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

// conflictSince reports whether a create found ip taken at or after since.
func (x *index) conflictSince(pool string, ip netip.Addr, since time.Time) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t, ok := x.conflicts[pool][ip]
	return ok && !t.Before(since)
}

// releaseCount is the pool's release counter, read before a live list
// that may confirm exhaustion.
func (x *index) releaseCount(pool string) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.releases[pool]
}

func exhaustedKey(pool string, r iprange.Range) string { return pool + "\x00" + r.String() }

// confirmExhausted records that a live list begun at release count n found
// r full.
func (x *index) confirmExhausted(pool string, r iprange.Range, n uint64, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.exhausted[exhaustedKey(pool, r)] = exhaustedMemo{releases: n, at: now}
}

// exhaustionConfirmed reports whether r was confirmed full by a live list
// with no release on the pool seen since, within exhaustedTTL.
func (x *index) exhaustionConfirmed(pool string, r iprange.Range, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := exhaustedKey(pool, r)
	m, ok := x.exhausted[k]
	if !ok {
		return false
	}
	if m.releases != x.releases[pool] || now.Sub(m.at) >= exhaustedTTL {
		delete(x.exhausted, k)
		return false
	}
	return true
}

func (x *index) entries(s set) []entry {
	out := make([]entry, 0, s.len())
	for name := range s.all() {
		out = append(out, x.byName[name])
	}
	return out
}

// attachment returns the reservations a pod attachment holds.
func (x *index) attachment(pool string, podUID types.UID, ifName string) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries(x.byPod[attachmentKey{pool, podUID, ifName}])
}

// sandbox returns the pod reservations a sandbox's interface made or holds.
func (x *index) sandbox(pool, containerID, ifName string) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries(x.bySandbox[sandboxKey{pool, containerID, ifName}])
}

// onNode returns a node's pod reservations on a pool.
func (x *index) onNode(node, pool string) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries(x.byNode[nodeKey{node, pool}])
}

// expired returns a node's released reservations on a pool whose
// cooldown is over at now.
func (x *index) expired(node, pool string, now time.Time) []entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []entry
	for name := range x.retired[nodeKey{node, pool}].all() {
		if e := x.byName[name]; !now.Before(e.reuseAfter) {
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

func (x *index) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byName)
}

// reservationOf renders an entry back as the fields a release decision
// reads, so one predicate judges index entries and live objects alike.
func reservationOf(e entry) *ipkeeperv1alpha1.IPReservation {
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name, r.UID, r.ResourceVersion = e.name, e.uid, e.rv
	r.Spec = ipkeeperv1alpha1.IPReservationSpec{
		Pool: e.pool, Network: e.network, IP: e.ip.String(), Owner: e.owner,
		InterfaceName: e.ifName, ContainerID: e.containerID, Node: e.node,
	}
	if e.released() {
		r.Spec.ReuseAfter = &metav1.Time{Time: e.reuseAfter}
	}
	return r
}
