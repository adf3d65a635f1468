// SPDX-License-Identifier: Apache-2.0

package index

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

const (
	netA = "net-a"
	netB = "net-b"
)

func sortedNames(es []Entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

func TestIndexUpsertRemove(t *testing.T) {
	podA := podEntry(t, netA, "10.0.0.5", "pod-1", "net1", "sandbox-1")
	podA6 := podEntry(t, netA, "fd00::5", "pod-1", "net1", "sandbox-1")
	podB := podEntry(t, netB, "10.0.0.5", "pod-2", "net1", "sandbox-2")
	newerA := with(podA, func(e *Entry) { e.UID = "uid-newer"; e.Owner.UID = "pod-3"; e.ContainerID = "sandbox-3" })
	// Same name, different address: only the index's own bookkeeping can
	// produce it (names derive from the address), but the old address must
	// not stay taken.
	movedA := with(podA, func(e *Entry) { e.IP = netip.MustParseAddr("10.0.0.6") })
	adoptedA := with(podA, func(e *Entry) { e.ContainerID = "sandbox-9"; e.Node = "node-b" })
	claimedA := with(podA, func(e *Entry) { e.Owner.Kind = ipkeeperv1alpha1.OwnerIPAMClaim })

	type taken struct {
		network string
		ip      string
		want    bool
	}
	tests := []struct {
		name   string
		ops    func(x *Cache)
		len    int
		uids   map[string]types.UID // name -> UID the index must hold
		taken  []taken
		attach map[attachmentKey][]string
	}{
		{
			name:   "upsert",
			ops:    func(x *Cache) { x.Wrote(podA) },
			len:    1,
			uids:   map[string]types.UID{podA.Name: podA.UID},
			taken:  []taken{{netA, "10.0.0.5", true}, {netA, "10.0.0.6", false}, {netB, "10.0.0.5", false}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: {podA.Name}, {netA, "pod-1", "eth0"}: nil},
		},
		{
			name:   "upsert then remove by its UID",
			ops:    func(x *Cache) { x.Wrote(podA); x.WatchedDeletion(podA.Name, podA.UID) },
			len:    0,
			taken:  []taken{{netA, "10.0.0.5", false}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: nil},
		},
		{
			name:   "remove with an empty UID removes whatever holds the name",
			ops:    func(x *Cache) { x.Wrote(podA); x.WatchedDeletion(podA.Name, "") },
			len:    0,
			taken:  []taken{{netA, "10.0.0.5", false}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: nil},
		},
		{
			name:   "remove with a stale UID keeps the newer object",
			ops:    func(x *Cache) { x.Wrote(podA); x.Wrote(newerA); x.WatchedDeletion(podA.Name, podA.UID) },
			len:    1,
			uids:   map[string]types.UID{podA.Name: "uid-newer"},
			taken:  []taken{{netA, "10.0.0.5", true}},
			attach: map[attachmentKey][]string{{netA, "pod-3", "net1"}: {podA.Name}, {netA, "pod-1", "net1"}: nil},
		},
		{
			name:  "remove of an unknown name is a no-op",
			ops:   func(x *Cache) { x.Wrote(podA); x.WatchedDeletion("nope", podA.UID) },
			len:   1,
			uids:  map[string]types.UID{podA.Name: podA.UID},
			taken: []taken{{netA, "10.0.0.5", true}},
		},
		{
			name:   "upsert of a changed address under the same name moves the taken entry",
			ops:    func(x *Cache) { x.Wrote(podA); x.Wrote(movedA) },
			len:    1,
			taken:  []taken{{netA, "10.0.0.5", false}, {netA, "10.0.0.6", true}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: {podA.Name}},
		},
		{
			name:   "upsert of an adopted sandbox replaces the attachment entry",
			ops:    func(x *Cache) { x.Wrote(podA); x.Wrote(adoptedA) },
			len:    1,
			taken:  []taken{{netA, "10.0.0.5", true}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: {podA.Name}},
		},
		{
			name:   "an owner becoming a claim leaves the attachment lookup",
			ops:    func(x *Cache) { x.Wrote(podA); x.Wrote(claimedA) },
			len:    1,
			taken:  []taken{{netA, "10.0.0.5", true}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: nil},
		},
		{
			name:   "the same address on two networks is two reservations",
			ops:    func(x *Cache) { x.Wrote(podA); x.Wrote(podB); x.WatchedDeletion(podA.Name, podA.UID) },
			len:    1,
			uids:   map[string]types.UID{podB.Name: podB.UID},
			taken:  []taken{{netA, "10.0.0.5", false}, {netB, "10.0.0.5", true}},
			attach: map[attachmentKey][]string{{netB, "pod-2", "net1"}: {podB.Name}},
		},
		{
			name:   "dual-stack attachment holds both and loses one",
			ops:    func(x *Cache) { x.Wrote(podA); x.Wrote(podA6); x.WatchedDeletion(podA.Name, podA.UID) },
			len:    1,
			taken:  []taken{{netA, "10.0.0.5", false}, {netA, "fd00::5", true}},
			attach: map[attachmentKey][]string{{netA, "pod-1", "net1"}: {podA6.Name}},
		},
		{
			name: "upsert clears a conflict on its address",
			ops: func(x *Cache) {
				x.MarkConflict(netA, podA.IP, time.Now())
				x.Wrote(podA)
				x.WatchedDeletion(podA.Name, podA.UID)
			},
			len:   0,
			taken: []taken{{netA, "10.0.0.5", false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New("")
			tt.ops(x)
			checkIndex(t, x)
			if got := x.Len(); got != tt.len {
				t.Errorf("len() = %d, want %d", got, tt.len)
			}
			for name, uid := range tt.uids {
				if got := x.byName[name].UID; got != uid {
					t.Errorf("%s has UID %q, want %q", name, got, uid)
				}
			}
			now := time.Now()
			for _, tk := range tt.taken {
				if got := x.TakenFunc(tk.network, now)(netip.MustParseAddr(tk.ip)); got != tk.want {
					t.Errorf("taken(%s, %s) = %v, want %v", tk.network, tk.ip, got, tk.want)
				}
			}
			for k, want := range tt.attach {
				got := x.Attachment(k.pool, k.podUID, k.ifName)
				if names := sortedNames(got); !slices.Equal(names, want) {
					t.Errorf("attachment(%+v) = %v, want %v", k, names, want)
				}
			}
		})
	}
}

func TestIndexAttachmentReturnsCurrentEntry(t *testing.T) {
	x := New("")
	e := podEntry(t, netA, "10.0.0.5", "pod-1", "net1", "sandbox-1")
	x.Wrote(e)
	adopted := with(e, func(e *Entry) { e.ContainerID = "sandbox-2"; e.Node = "node-b" })
	x.Wrote(adopted)
	got := x.Attachment(netA, "pod-1", "net1")
	if len(got) != 1 || got[0] != adopted {
		t.Fatalf("attachment = %+v, want [%+v]", got, adopted)
	}
}

func TestIndexTakenFunc(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		setup func(x *Cache)
		now   time.Time
		ip    string
		want  bool
	}{
		{"free", func(*Cache) {}, t0, "10.0.0.5", false},
		{"taken by a reservation", func(x *Cache) { x.Wrote(podEntry(t, netA, "10.0.0.5", "p", "net1", "c")) }, t0, "10.0.0.5", true},
		{"reservation on another network", func(x *Cache) { x.Wrote(podEntry(t, netB, "10.0.0.5", "p", "net1", "c")) }, t0, "10.0.0.5", false},
		{"taken by a claim-owned reservation", func(x *Cache) { x.Wrote(claimEntry(t, netA, "10.0.0.5", "c", "net1")) }, t0, "10.0.0.5", true},
		{"taken by a fresh conflict", func(x *Cache) { x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0) }, t0, "10.0.0.5", true},
		{"conflict just under the TTL", func(x *Cache) { x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0) }, t0.Add(conflictTTL - time.Nanosecond), "10.0.0.5", true},
		{"conflict exactly conflictTTL old", func(x *Cache) { x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0) }, t0.Add(conflictTTL), "10.0.0.5", false},
		{"conflict older than conflictTTL", func(x *Cache) { x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0) }, t0.Add(time.Hour), "10.0.0.5", false},
		{"conflict renewed", func(x *Cache) {
			x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0)
			x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0.Add(conflictTTL))
		}, t0.Add(conflictTTL), "10.0.0.5", true},
		{"conflict on another network", func(x *Cache) { x.MarkConflict(netB, netip.MustParseAddr("10.0.0.5"), t0) }, t0, "10.0.0.5", false},
		{"conflict on another address", func(x *Cache) { x.MarkConflict(netA, netip.MustParseAddr("10.0.0.6"), t0) }, t0, "10.0.0.5", false},
		{"IPv6 conflict", func(x *Cache) { x.MarkConflict(netA, netip.MustParseAddr("fd00::5"), t0) }, t0, "fd00::5", true},
		{"old conflict, address reserved since", func(x *Cache) {
			x.MarkConflict(netA, netip.MustParseAddr("10.0.0.5"), t0)
			x.Wrote(podEntry(t, netA, "10.0.0.5", "p", "net1", "c"))
		}, t0.Add(time.Hour), "10.0.0.5", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New("")
			tt.setup(x)
			if got := x.TakenFunc(netA, tt.now)(netip.MustParseAddr(tt.ip)); got != tt.want {
				t.Errorf("takenFunc(%s, t0+%v)(%s) = %v, want %v", netA, tt.now.Sub(t0), tt.ip, got, tt.want)
			}
		})
	}
}

// The predicate reads the index live: the allocator scans while informer
// events and conflicts keep arriving.
func TestIndexTakenFuncIsLive(t *testing.T) {
	now := time.Now()
	x := New("")
	taken := x.TakenFunc(netA, now)
	e := podEntry(t, netA, "10.0.0.5", "p", "net1", "c")
	c := netip.MustParseAddr("10.0.0.6")
	if taken(e.IP) || taken(c) {
		t.Fatal("empty index reports an address taken")
	}
	x.Wrote(e)
	x.MarkConflict(netA, c, now)
	if !taken(e.IP) {
		t.Error("reservation upserted after takenFunc was built is not seen")
	}
	if !taken(c) {
		t.Error("conflict marked after takenFunc was built is not seen")
	}
	x.WatchedDeletion(e.Name, e.UID)
	if taken(e.IP) {
		t.Error("reservation removed after takenFunc was built is still seen")
	}
}

func TestIndexConflictSince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr("10.0.0.5")
	tests := []struct {
		name    string
		setup   func(x *Cache)
		network string
		since   time.Time
		want    bool
	}{
		{"never marked", func(*Cache) {}, netA, t0, false},
		{"marked at since", func(x *Cache) { x.MarkConflict(netA, ip, t0) }, netA, t0, true},
		{"marked after since", func(x *Cache) { x.MarkConflict(netA, ip, t0.Add(time.Millisecond)) }, netA, t0, true},
		{"marked before since", func(x *Cache) { x.MarkConflict(netA, ip, t0.Add(-time.Nanosecond)) }, netA, t0, false},
		{"marked before, then again after since", func(x *Cache) {
			x.MarkConflict(netA, ip, t0.Add(-time.Second))
			x.MarkConflict(netA, ip, t0.Add(time.Second))
		}, netA, t0, true},
		{"marked on another network", func(x *Cache) { x.MarkConflict(netB, ip, t0) }, netA, t0, false},
		{"cleared by an upsert of the address", func(x *Cache) {
			x.MarkConflict(netA, ip, t0)
			x.Wrote(podEntry(t, netA, ip.String(), "p", "net1", "c"))
		}, netA, t0, false},
		{"ages out of conflictSince only by since, not by TTL", func(x *Cache) { x.MarkConflict(netA, ip, t0) }, netA, t0.Add(-time.Hour), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New("")
			tt.setup(x)
			if got := x.ConflictSince(tt.network, ip, tt.since); got != tt.want {
				t.Errorf("conflictSince(%s, %s, t0%+v) = %v, want %v", tt.network, ip, tt.since.Sub(t0), got, tt.want)
			}
		})
	}
}

func TestIndexAttachment(t *testing.T) {
	v4 := podEntry(t, netA, "10.0.0.5", "pod-1", "net1", "s1")
	v6 := podEntry(t, netA, "fd00::5", "pod-1", "net1", "s1")
	otherIf := podEntry(t, netA, "10.0.0.6", "pod-1", "net2", "s1")
	otherNet := podEntry(t, netB, "10.0.0.7", "pod-1", "net1", "s1")
	otherPod := podEntry(t, netA, "10.0.0.8", "pod-2", "net1", "s2")
	// A claim whose UID and interface collide with pod-1's attachment must
	// still never be returned: DEL and GC rely on attachment only ever
	// holding ephemeral, pod-owned addresses.
	claim := claimEntry(t, netA, "10.0.0.9", "pod-1", "net1")
	claim6 := claimEntry(t, netA, "fd00::9", "claim-1", "net1")

	x := New("")
	for _, e := range []Entry{v4, v6, otherIf, otherNet, otherPod, claim, claim6} {
		x.Wrote(e)
	}
	checkIndex(t, x)

	tests := []struct {
		name    string
		network string
		podUID  types.UID
		ifName  string
		want    []Entry
	}{
		{"dual-stack attachment", netA, "pod-1", "net1", []Entry{v4, v6}},
		{"second interface", netA, "pod-1", "net2", []Entry{otherIf}},
		{"other network", netB, "pod-1", "net1", []Entry{otherNet}},
		{"other pod", netA, "pod-2", "net1", []Entry{otherPod}},
		{"claim UID is not a pod attachment", netA, "claim-1", "net1", nil},
		{"unknown interface", netA, "pod-1", "eth0", nil},
		{"unknown network", "net-z", "pod-1", "net1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := x.Attachment(tt.network, tt.podUID, tt.ifName)
			slices.SortFunc(got, func(a, b Entry) int { return a.IP.Compare(b.IP) })
			if !slices.Equal(got, tt.want) {
				t.Errorf("attachment(%s, %s, %s) =\n  %+v\nwant\n  %+v", tt.network, tt.podUID, tt.ifName, got, tt.want)
			}
			for _, e := range got {
				if e.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
					t.Errorf("attachment returned %s owned by %s", e.Name, e.Owner.Kind)
				}
			}
		})
	}
}

// The agent acts only on pods' reservations (DEL, GC, cooldown expiry):
// a claim's is ipkeeper-controller's. So a claim reservation keeps its
// address taken but no lookup finds it, even one made, as agents of an
// earlier version did, with a sandbox, an interface and a node that a
// pod's DEL or GC would name.
func TestIndexLinksOnlyPodReservations(t *testing.T) {
	pod := podEntry(t, netA, "10.0.0.5", "uid-1", "net1", "s1")
	// The same UID, sandbox, interface and node as the pod's.
	claim := with(claimEntry(t, netA, "10.0.0.6", "uid-1", "net1"), func(e *Entry) { e.ContainerID = "s1" })
	expired := with(claimEntry(t, netA, "10.0.0.7", "claim-2", "net1"), func(e *Entry) { e.ReuseAfter = time.Now().Add(-time.Hour) })
	for _, x := range []*Cache{New(""), New("node-a")} {
		for _, e := range []Entry{pod, claim, expired} {
			x.Wrote(e)
		}
		checkIndex(t, x)
		taken := x.TakenFunc(netA, time.Now())
		if !taken(claim.IP) || !taken(expired.IP) {
			t.Errorf("index of node %q: a claim's address is free (taken %v, %v)", x.node, taken(claim.IP), taken(expired.IP))
		}
		for _, tt := range []struct {
			name   string
			lookup func() []Entry
		}{
			{"attachment (ADD, CHECK)", func() []Entry { return x.Attachment(netA, "uid-1", "net1") }},
			{"sandbox (DEL)", func() []Entry { return x.Sandbox(netA, "s1", "net1") }},
			{"node (GC)", func() []Entry { return x.OnNode("node-a", netA) }},
			{"expired (reclaim)", func() []Entry { return x.Expired("node-a", netA, time.Now()) }},
		} {
			for _, e := range tt.lookup() {
				if e.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
					t.Errorf("index of node %q: %s found %s, owned by %s", x.node, tt.name, e.Name, e.Owner.Kind)
				}
			}
		}
		if got := x.Sandbox(netA, "s1", "net1"); len(got) != 1 || got[0].Name != pod.Name {
			t.Errorf("index of node %q: sandbox s1 = %v, want the pod's reservation only", x.node, sortedNames(got))
		}
		// A reservation whose owner became a claim leaves every lookup.
		x.Wrote(with(pod, func(e *Entry) { e.Owner.Kind = ipkeeperv1alpha1.OwnerIPAMClaim }))
		checkIndex(t, x)
		if got := x.Sandbox(netA, "s1", "net1"); len(got) != 0 {
			t.Errorf("index of node %q: sandbox s1 still finds %v after its owner became a claim", x.node, sortedNames(got))
		}
		if !x.TakenFunc(netA, time.Now())(pod.IP) {
			t.Errorf("index of node %q: %s is free after its owner became a claim", x.node, pod.IP)
		}
	}
}

func TestIndexGet(t *testing.T) {
	e := podEntry(t, netA, "10.0.0.5", "pod-1", "net1", "s1")
	newer := with(e, func(e *Entry) { e.UID = "uid-newer" })
	tests := []struct {
		name   string
		ops    func(x *Cache)
		lookup string
		want   Entry
		wantOK bool
	}{
		{"empty", func(*Cache) {}, e.Name, Entry{}, false},
		{"present", func(x *Cache) { x.Wrote(e) }, e.Name, e, true},
		{"other name", func(x *Cache) { x.Wrote(e) }, "net-a.10-0-0-6", Entry{}, false},
		{"replaced", func(x *Cache) { x.Wrote(e); x.Wrote(newer) }, e.Name, newer, true},
		{"stale remove", func(x *Cache) { x.Wrote(newer); x.WatchedDeletion(e.Name, e.UID) }, e.Name, newer, true},
		{"removed", func(x *Cache) { x.Wrote(e); x.WatchedDeletion(e.Name, e.UID) }, e.Name, Entry{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New("")
			tt.ops(x)
			got, ok := x.Get(tt.lookup)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("get(%q) = %+v, %v, want %+v, %v", tt.lookup, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestIndexLookupsAndLen(t *testing.T) {
	a1 := podEntry(t, netA, "10.0.0.1", "pod-1", "net1", "s1")
	a2 := with(podEntry(t, netA, "10.0.0.2", "pod-2", "net1", "s2"), func(e *Entry) { e.Node = "node-b" })
	b1 := podEntry(t, netB, "fd00::1", "pod-1", "net1", "s1")
	c1 := claimEntry(t, netA, "10.0.0.3", "claim-1", "net1")
	all := []Entry{a1, a2, b1, c1}

	x := New("")
	for _, e := range all {
		x.Wrote(e)
	}
	tests := []struct {
		name   string
		lookup func() []Entry
		want   []Entry
	}{
		{"pod-owned on a node and network (GC)", func() []Entry { return x.OnNode("node-a", netA) }, []Entry{a1}},
		{"other node", func() []Entry { return x.OnNode("node-b", netA) }, []Entry{a2}},
		{"node without reservations", func() []Entry { return x.OnNode("node-c", netA) }, nil},
		{"sandbox on a network (DEL)", func() []Entry { return x.Sandbox(netA, "s1", "net1") }, []Entry{a1}},
		{"same sandbox, other network", func() []Entry { return x.Sandbox(netB, "s1", "net1") }, []Entry{b1}},
		{"sandbox, other interface", func() []Entry { return x.Sandbox(netA, "s1", "net2") }, nil},
		{"a claim is no attachment", func() []Entry { return x.Attachment(netA, "claim-1", "net1") }, nil},
		{"attachment", func() []Entry { return x.Attachment(netA, "pod-2", "net1") }, []Entry{a2}},
	}
	byName := func(a, b Entry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.lookup()
			want := slices.Clone(tt.want)
			slices.SortFunc(got, byName)
			slices.SortFunc(want, byName)
			if !slices.Equal(got, want) {
				t.Errorf("lookup = %v, want %v", sortedNames(got), sortedNames(want))
			}
		})
	}

	lens := []struct {
		name string
		op   func()
		want int
	}{
		{"after four upserts", func() {}, 4},
		{"re-upsert of a held name", func() { x.Wrote(with(a1, func(e *Entry) { e.ContainerID = "s9" })) }, 4},
		{"stale remove", func() { x.WatchedDeletion(a2.Name, "stale") }, 4},
		{"remove", func() { x.WatchedDeletion(a2.Name, a2.UID) }, 3},
		{"conflicts do not count", func() { x.MarkConflict(netA, netip.MustParseAddr("10.0.0.99"), time.Now()) }, 3},
		{"remove all", func() {
			for _, e := range all {
				x.WatchedDeletion(e.Name, "")
			}
		}, 0},
	}
	for _, l := range lens {
		l.op()
		if got := x.Len(); got != l.want {
			t.Errorf("%s: len() = %d, want %d", l.name, got, l.want)
		}
	}
	checkIndex(t, x)
}

func TestIndexConflictPruning(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	tests := []struct {
		name      string
		expired   int // marked at t0
		fresh     int // marked at t0 + conflictTTL/2
		markAt    time.Time
		wantLen   int
		wantStale bool // expired marks still present
	}{
		{"at the bound nothing is pruned", 1023, 0, t0.Add(conflictTTL), 1024, true},
		{"beyond the bound expired marks go", 1024, 0, t0.Add(conflictTTL), 1, false},
		{"beyond the bound fresh marks stay", 600, 500, t0.Add(conflictTTL), 501, false},
		{"beyond the bound nothing expired yet", 600, 500, t0.Add(conflictTTL - time.Nanosecond), 1101, true},
		{"beyond the bound all fresh", 0, 1100, t0.Add(conflictTTL), 1101, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New("")
			i := 0
			for ; i < tt.expired; i++ {
				x.MarkConflict(netA, addr(i), t0)
			}
			for ; i < tt.expired+tt.fresh; i++ {
				x.MarkConflict(netA, addr(i), t0.Add(conflictTTL/2))
			}
			// Another network's marks are never pruned by this one's.
			other := netip.MustParseAddr("fd00::1")
			x.MarkConflict(netB, other, t0)

			last := addr(i)
			x.MarkConflict(netA, last, tt.markAt)

			if got := len(x.conflicts[netA]); got != tt.wantLen {
				t.Errorf("%d conflicts kept, want %d", got, tt.wantLen)
			}
			if !x.ConflictSince(netA, last, tt.markAt) {
				t.Error("the conflict just marked was pruned")
			}
			for j := tt.expired; j < tt.expired+tt.fresh; j++ {
				if !x.ConflictSince(netA, addr(j), t0) {
					t.Fatalf("fresh conflict %s was pruned", addr(j))
				}
			}
			for j := 0; j < tt.expired; j++ {
				if got := x.ConflictSince(netA, addr(j), t0); got != tt.wantStale {
					t.Fatalf("expired conflict %s present = %v, want %v", addr(j), got, tt.wantStale)
				}
			}
			if !x.ConflictSince(netB, other, t0) {
				t.Error("another network's conflict was pruned")
			}
		})
	}
}

func TestIndexConcurrentReadersAndWriters(t *testing.T) {
	const (
		writers = 4
		perW    = 200
		readers = 4
	)
	x := New("")
	entryFor := func(w, i int) Entry {
		ip := fmt.Sprintf("10.%d.%d.%d", w, i>>8, i&0xff)
		if i%3 == 0 {
			ip = fmt.Sprintf("fd00:%x::%x", w, i)
		}
		if i%4 == 0 {
			return claimEntry(t, netA, ip, types.UID(fmt.Sprintf("claim-%d-%d", w, i/8)), "net1")
		}
		return podEntry(t, netA, ip, types.UID(fmt.Sprintf("pod-%d-%d", w, i/2)), "net1", "s")
	}
	// Entries are built up front: t.Fatalf is not for other goroutines.
	all := make([][]Entry, writers)
	for w := range all {
		for i := range perW {
			all[w] = append(all[w], entryFor(w, i))
		}
	}

	stop := make(chan struct{})
	var readersWG, writersWG sync.WaitGroup
	for r := range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			taken := x.TakenFunc(netA, time.Now())
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				e := all[(r+n)%writers][n%perW]
				taken(e.IP)
				x.ConflictSince(netA, e.IP, time.Time{})
				for _, got := range x.Attachment(netA, e.Owner.UID, "net1") {
					if got.Owner.UID != e.Owner.UID || got.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
						t.Errorf("attachment for %s returned %s's entry (%s)", e.Owner.UID, got.Owner.UID, got.Owner.Kind)
					}
				}
				for _, got := range x.Sandbox(netA, e.ContainerID, "net1") {
					if got.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
						t.Errorf("sandbox %s returned %s, owned by %s", e.ContainerID, got.Name, got.Owner.Kind)
					}
				}
				if got, ok := x.Get(e.Name); ok && got.Name != e.Name {
					t.Errorf("get(%s) returned %s", e.Name, got.Name)
				}
				for _, got := range x.OnNode("node-a", netA) {
					if got.Node != "node-a" || got.Network != netA {
						t.Errorf("onNode(node-a) returned %s on %s", got.Name, got.Node)
					}
				}
				x.Len()
			}
		}()
	}
	for w := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			for i, e := range all[w] {
				x.Wrote(e)
				x.MarkConflict(netB, e.IP, time.Now())
				if i%2 == 1 {
					x.WatchedDeletion(e.Name, "stale-uid") // must keep it
					x.WatchedDeletion(e.Name, e.UID)
				}
			}
		}()
	}
	writersWG.Wait()
	close(stop)
	readersWG.Wait()

	checkIndex(t, x)
	if got, want := x.Len(), writers*perW/2; got != want {
		t.Errorf("len() = %d, want %d", got, want)
	}
	taken := x.TakenFunc(netA, time.Now())
	for w := range all {
		for i, e := range all[w] {
			if got, want := taken(e.IP), i%2 == 0; got != want {
				t.Errorf("taken(%s) = %v, want %v", e.IP, got, want)
			}
		}
	}
}

// An informer that lags behind the agent's own write can deliver an event
// for the previous object of the same name (another UID) after the agent
// recorded its new one; taking it would let the old object's Delete event
// remove the name altogether until the informer's Add of the new one.
func TestIndexStaleObjectDoesNotClobberNewer(t *testing.T) {
	old := podEntry(t, netA, "10.0.0.5", "pod-q", "net1", "sandbox-q")
	ours := with(old, func(e *Entry) { e.UID = "uid-ours"; e.Owner.UID = "pod-p"; e.ContainerID = "sandbox-p" })
	x := New("")
	x.Watched(old)                                                        // informer: Q's reservation
	x.Wrote(ours)                                                         // our create, after Q's agent deleted it
	x.Watched(with(old, func(e *Entry) { e.ContainerID = "sandbox-q2" })) // informer, lagging: Update of Q's
	x.WatchedDeletion(old.Name, old.UID)                                  // informer, lagging: Delete of Q's
	if !x.TakenFunc(netA, time.Now())(ours.IP) {
		t.Error("our reservation's address is not taken")
	}
	if got := x.Attachment(netA, "pod-p", "net1"); len(got) != 1 || got[0].UID != "uid-ours" {
		t.Errorf("attachment of pod-p = %+v, want our reservation", got)
	}
}

func TestIndexNeverGoesBack(t *testing.T) {
	e := podEntry(t, netA, "10.0.0.5", "pod-1", "net1", "s1")
	e.ResourceVersion = "10"
	older := with(e, func(x *Entry) { x.ResourceVersion = "9"; x.ContainerID = "s0" })
	newer := with(e, func(x *Entry) { x.ResourceVersion = "11"; x.ContainerID = "s2" })
	tests := []struct {
		name string
		ops  func(x *Cache)
		want string // container ID in the index; "" means absent
	}{
		{"older informer event after our write", func(x *Cache) { x.Wrote(e); x.Watched(older) }, "s1"},
		{"older live read after a newer event", func(x *Cache) { x.Watched(e); x.Wrote(older) }, "s1"},
		{"newer event replaces", func(x *Cache) { x.Wrote(e); x.Watched(newer) }, "s2"},
		{"event of an object we deleted", func(x *Cache) { x.Wrote(e); x.Deleted(e.Name, e.UID, timeZero); x.Watched(e) }, ""},
		{"informer delete clears the tombstone", func(x *Cache) {
			x.Wrote(e)
			x.Deleted(e.Name, e.UID, timeZero)
			x.WatchedDeletion(e.Name, e.UID)
			x.Watched(with(e, func(y *Entry) { y.UID = "new-object"; y.ContainerID = "s3" }))
		}, "s3"},
		{"unparsable versions: the event wins", func(x *Cache) {
			x.Wrote(with(e, func(y *Entry) { y.ResourceVersion = "a" }))
			x.Watched(with(older, func(y *Entry) { y.ResourceVersion = "b" }))
		}, "s0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New("")
			tt.ops(x)
			got, ok := x.Get(e.Name)
			if !ok {
				got.ContainerID = ""
			}
			if got.ContainerID != tt.want {
				t.Errorf("container ID = %q, want %q", got.ContainerID, tt.want)
			}
			checkIndex(t, x)
		})
	}
}

var timeZero time.Time
