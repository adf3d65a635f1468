// SPDX-License-Identifier: Apache-2.0

package index

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func feedReservation(ip string, uid types.UID, rv string) *ipkeeperv1alpha1.IPReservation {
	addr := netip.MustParseAddr(ip)
	return &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", addr), UID: uid, ResourceVersion: rv},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: "blue", Network: "blue", IP: ip, InterfaceName: "net1", ContainerID: "c-" + ip, Node: "node-b",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "p-" + ip, UID: types.UID("pod-" + ip)},
		},
	}
}

// indexedIPs lists the addresses the index holds on network blue, with
// the UID of each holder.
func indexedIPs(x *Cache) []string {
	var out []string
	for ip, name := range x.taken["blue"] {
		out = append(out, ip.String()+"="+string(x.byName[name].UID))
	}
	slices.Sort(out)
	return out
}

// The feed stands in for an informer's store and handlers: it must give
// the index exactly what their events gave it, relists included.
func TestReservationFeed(t *testing.T) {
	x := New("")
	f := newReservationFeeds(x, 1)[0]
	step := func(what string, want ...string) {
		t.Helper()
		if got := indexedIPs(x); !slices.Equal(got, want) {
			t.Errorf("after %s the index holds %v, want %v", what, got, want)
		}
		checkIndex(t, x)
	}
	if f.HasSynced() {
		t.Fatal("synced before the first list")
	}
	mustFeed(t, f.Replace([]any{feedReservation("10.0.0.1", "u1", "10"), feedReservation("10.0.0.2", "u2", "11")}, "11"))
	if !f.HasSynced() {
		t.Fatal("not synced after the first list")
	}
	step("the first list", "10.0.0.1=u1", "10.0.0.2=u2")

	mustFeed(t, f.Add(feedReservation("10.0.0.3", "u3", "12")))
	mustFeed(t, f.Delete(feedReservation("10.0.0.2", "u2", "13")))
	step("watch events", "10.0.0.1=u1", "10.0.0.3=u3")

	// The agent's own create, which the watch has not delivered yet.
	own, _ := EntryOf(feedReservation("10.0.0.4", "u4", "20"))
	x.Wrote(own)
	// The watch is lost; meanwhile 10.0.0.3 is deleted and 10.0.0.1 is
	// deleted and created again under another UID. The relist, made before
	// the agent's create, lacks it: an informer never delivered it either,
	// so it stays; 10.0.0.3 was delivered and is gone.
	mustFeed(t, f.Replace([]any{feedReservation("10.0.0.1", "u1b", "18")}, "18"))
	step("a relist after a watch gap", "10.0.0.1=u1b", "10.0.0.4=u4")

	// Once delivered, the agent's reservation is deleted by the next relist
	// that lacks it, as an informer's DeletedFinalStateUnknown would.
	mustFeed(t, f.Update(feedReservation("10.0.0.4", "u4", "20")))
	mustFeed(t, f.Replace([]any{feedReservation("10.0.0.1", "u1b", "18")}, "25"))
	step("a relist without a delivered reservation", "10.0.0.1=u1b")

	// Objects of other types are ignored, not a panic.
	mustFeed(t, f.Add(&ipkeeperv1alpha1.IPPool{}))
	mustFeed(t, f.Delete("not an object"))
	step("foreign objects", "10.0.0.1=u1b")
}

// A reservation whose node label changed leaves one of the agent's two
// scopes and enters the other: the first sends it as deleted, the second
// as added, in either order. The index keeps it either way, and a relist
// of the scope it left does not take it out.
func TestReservationFeedsShareDeliveries(t *testing.T) {
	for _, deleteFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete first %v", deleteFirst), func(t *testing.T) {
			x := New("")
			feeds := newReservationFeeds(x, 2)
			labelled, unlabelled := feeds[0], feeds[1]
			mustFeed(t, labelled.Replace([]any{feedReservation("10.0.0.1", "u1", "10")}, "10"))
			mustFeed(t, unlabelled.Replace(nil, "10"))
			moved := feedReservation("10.0.0.1", "u1", "11")
			if deleteFirst {
				mustFeed(t, labelled.Delete(moved))
				mustFeed(t, unlabelled.Add(moved))
			} else {
				mustFeed(t, unlabelled.Add(moved))
				mustFeed(t, labelled.Delete(moved))
			}
			if got := indexedIPs(x); !slices.Equal(got, []string{"10.0.0.1=u1"}) {
				t.Errorf("after the move the index holds %v, want 10.0.0.1=u1", got)
			}
			mustFeed(t, labelled.Replace(nil, "12"))
			if got := indexedIPs(x); !slices.Equal(got, []string{"10.0.0.1=u1"}) {
				t.Errorf("a relist of the scope it left took it out: the index holds %v", got)
			}
			mustFeed(t, unlabelled.Delete(moved))
			if got := indexedIPs(x); len(got) != 0 {
				t.Errorf("deleted in the scope that delivered it last, the index still holds %v", got)
			}
		})
	}
}

func mustFeed(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// An agent's index keeps only its own node's pod reservations whole: of
// another node's pods', and of every claim's (ipkeeper-controller's to
// write, whichever node made it), it keeps the taken address, the
// object's identity and version and the owner's kind, and no attachment,
// sandbox or node lookup finds them.
func TestIndexKeepsAllButOwnNodesPodsCompact(t *testing.T) {
	x := New("node-a")
	mine := podEntry(t, "blue", "10.0.0.1", "pod-1", "net1", "c1")
	mine.Node = "node-a"
	theirs := podEntry(t, "blue", "10.0.0.2", "pod-2", "net1", "c2")
	theirs.Node = "node-b"
	claimThere := claimEntry(t, "blue", "10.0.0.3", "claim-1", "net1")
	claimThere.Node = "node-b"
	// A claim reservation an agent of an earlier version made on this
	// node, with its sandbox: no DEL or GC of this node may find it.
	claimHere := with(claimEntry(t, "blue", "10.0.0.5", "claim-2", "net1"), func(e *Entry) { e.ContainerID = "c1"; e.Node = "node-a" })
	// One ipkeeper-controller made: no node, no sandbox.
	claimOfController := with(claimEntry(t, "blue", "10.0.0.6", "claim-3", ""), func(e *Entry) { e.Node = "" })
	retiredThere := with(podEntry(t, "blue", "10.0.0.4", "pod-4", "net1", "c4"), func(e *Entry) {
		e.Node = "node-b"
		e.ReuseAfter = time.Now().Add(time.Hour)
	})
	all := []Entry{mine, theirs, claimThere, claimHere, claimOfController, retiredThere}
	for _, e := range all {
		x.Watched(e)
	}
	checkIndex(t, x)

	taken := x.TakenFunc("blue", time.Now())
	for _, e := range all {
		if !taken(e.IP) {
			t.Errorf("%s is not taken", e.IP)
		}
	}
	for _, e := range []Entry{theirs, claimThere, claimHere, claimOfController} {
		if got, ok := x.Get(e.Name); !ok || got.UID != e.UID || got.ResourceVersion != e.ResourceVersion || got.Owner.Kind != e.Owner.Kind || got.Owner.UID != "" || got.ContainerID != "" || got.InterfaceName != "" {
			t.Errorf("%s (%s on %q) is held as %+v (present %v), want its identity, version and owner kind only", e.Name, e.Owner.Kind, e.Node, got, ok)
		}
	}
	if got, _ := x.Get(retiredThere.Name); !got.Released() {
		t.Error("another node's released reservation is no longer released")
	}
	if got := x.Attachment("blue", "pod-2", "net1"); len(got) != 0 {
		t.Errorf("another node's pod attachment found: %+v", got)
	}
	if got := x.Attachment("blue", "claim-2", "net1"); len(got) != 0 {
		t.Errorf("a claim's reservation found as an attachment: %+v", got)
	}
	if got := x.Attachment("blue", "pod-1", "net1"); len(got) != 1 || got[0].ContainerID != "c1" {
		t.Errorf("own pod attachment = %+v, want it whole", got)
	}
	if got := x.Sandbox("blue", "c1", "net1"); len(got) != 1 || got[0].Name != mine.Name {
		t.Errorf("sandbox c1 = %v, want only the pod's reservation, not the claim's made with the same sandbox", sortedNames(got))
	}
	if got := x.OnNode("node-a", "blue"); len(got) != 1 || got[0].Name != mine.Name {
		t.Errorf("onNode(node-a) = %v, want only its own pod's reservation", sortedNames(got))
	}

	// Removing them leaves nothing behind.
	for _, e := range all {
		x.WatchedDeletion(e.Name, e.UID)
	}
	checkIndex(t, x)
	if x.Len() != 0 || len(x.taken) != 0 || len(x.byPod) != 0 || len(x.bySandbox) != 0 || len(x.retired) != 0 || len(x.byNode) != 0 {
		t.Errorf("after removing everything: %d entries, taken %v, byPod %v, bySandbox %v, retired %v, byNode %v",
			x.Len(), x.taken, x.byPod, x.bySandbox, x.retired, x.byNode)
	}
}

func TestSet(t *testing.T) {
	var s set
	if s.len() != 0 || s.has("") || s.has("a") {
		t.Fatalf("empty set: len %d, has(\"\") %v, has(a) %v", s.len(), s.has(""), s.has("a"))
	}
	s.add("a")
	s.add("a")
	if s.len() != 1 || !s.has("a") || s.many != nil {
		t.Fatalf("{a}: len %d, has(a) %v, map %v", s.len(), s.has("a"), s.many)
	}
	s.add("b")
	s.add("c")
	s.remove("a")
	s.remove("x")
	if got := slices.Sorted(s.all()); !slices.Equal(got, []string{"b", "c"}) || s.has("a") {
		t.Fatalf("{b, c} = %v, has(a) %v", got, s.has("a"))
	}
	s.remove("b")
	s.remove("c")
	if s.len() != 0 || slices.Collect(s.all()) != nil {
		t.Fatalf("emptied set: len %d, %v", s.len(), slices.Collect(s.all()))
	}
	s.add("d") // a set that had a map keeps using it
	if got := slices.Collect(s.all()); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("{d} = %v", got)
	}
}

// A streamed first list collects every object before Replace: the feed's
// transformer must leave of each only what the index keeps.
func TestReservationFeedTrims(t *testing.T) {
	x := New("node-a")
	var f toolscache.TransformingStore = newReservationFeeds(x, 1)[0]
	trim := f.Transformer()
	if trim == nil {
		t.Fatal("the feed has no transformer: a streamed list would hold whole objects")
	}
	full := func(ip, node string, kind ipkeeperv1alpha1.OwnerKind) *ipkeeperv1alpha1.IPReservation {
		r := feedReservation(ip, types.UID("u-"+ip), "7")
		r.Spec.Node, r.Spec.Owner.Kind = node, kind
		r.Labels = map[string]string{"a": "b"}
		r.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "ipkeeper-agent"}}
		r.CreationTimestamp = metav1.Unix(100, 0)
		return r
	}
	cases := []struct {
		name  string
		in    *ipkeeperv1alpha1.IPReservation
		whole bool // owner, interface and sandbox kept
	}{
		{"another node's pod", full("10.0.0.1", "node-b", ipkeeperv1alpha1.OwnerPod), false},
		{"own node's pod", full("10.0.0.2", "node-a", ipkeeperv1alpha1.OwnerPod), true},
		{"a claim made on another node", full("10.0.0.3", "node-b", ipkeeperv1alpha1.OwnerIPAMClaim), false},
		{"a claim made on this node", full("10.0.0.4", "node-a", ipkeeperv1alpha1.OwnerIPAMClaim), false},
		{"a claim of no node", full("10.0.0.5", "", ipkeeperv1alpha1.OwnerIPAMClaim), false},
	}
	for _, c := range cases {
		want := c.in.DeepCopy()
		got, err := trim(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := got.(*ipkeeperv1alpha1.IPReservation)
		if r.ManagedFields != nil || r.Labels != nil {
			t.Errorf("%s: metadata not trimmed: %+v", c.name, r.ObjectMeta)
		}
		if r.Name != want.Name || r.UID != want.UID || r.ResourceVersion != want.ResourceVersion || !r.CreationTimestamp.Equal(&want.CreationTimestamp) {
			t.Errorf("%s: identity lost: %+v, want name %s uid %s rv %s", c.name, r.ObjectMeta, want.Name, want.UID, want.ResourceVersion)
		}
		if r.Spec.IP != want.Spec.IP || r.Spec.Node != want.Spec.Node || r.Spec.Owner.Kind != want.Spec.Owner.Kind || r.Spec.Network != want.Spec.Network {
			t.Errorf("%s: spec the index needs lost: %+v", c.name, r.Spec)
		}
		kept := r.Spec.Owner == want.Spec.Owner && r.Spec.InterfaceName == want.Spec.InterfaceName && r.Spec.ContainerID == want.Spec.ContainerID
		if kept != c.whole {
			t.Errorf("%s: owner, interface and sandbox kept = %v, want %v (%+v)", c.name, kept, c.whole, r.Spec)
		}
		// What the index makes of the trimmed object equals what it makes
		// of the whole one.
		x := New("node-a")
		we, _ := EntryOf(want)
		x.Watched(we)
		fromWhole, _ := x.Get(want.Name)
		y := New("node-a")
		te, _ := EntryOf(r)
		y.Watched(te)
		fromTrimmed, _ := y.Get(want.Name)
		if fromWhole != fromTrimmed {
			t.Errorf("%s: the index holds %+v from the trimmed object, %+v from the whole one", c.name, fromTrimmed, fromWhole)
		}
	}
}
