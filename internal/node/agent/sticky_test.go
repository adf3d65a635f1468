// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// stickyConf and plainConf are two networks of IPPool "cool"; only the
// first is sticky_mac.
const (
	stickyConf = `{"cniVersion":"1.0.0","name":"stickynet","type":"bridge","ipam":{"type":"ipkeeper","pool":"cool","sticky_mac":true}}`
	plainConf  = `{"cniVersion":"1.0.0","name":"plainnet","type":"bridge","ipam":{"type":"ipkeeper","pool":"cool"}}`
)

// addWithMAC is an ADD of pod uid in namespace ns presenting mac as
// Multus passes an element's "mac" (CNI_ARGS MAC).
func addWithMAC(t *testing.T, a *Agent, conf, containerID, ns string, uid types2.UID, mac string) (string, error) {
	t.Helper()
	pod := testPod("pod-"+string(uid), uid)
	pod.Namespace = ns
	creq := &cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: containerID, Netns: "/var/run/netns/x", IfName: "net1", Config: []byte(conf),
		Args: "IgnoreUnknown=true;K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(uid) + ";MAC=" + mac,
	}
	req, err := parseRequest(creq)
	if err != nil {
		return "", err
	}
	if req.pool, err = a.resolvePool(context.Background(), req); err != nil {
		return "", err
	}
	ips, err := a.allocateForPod(context.Background(), req, pod)
	return formatIPs(ips), err
}

func reservationOf(t *testing.T, store *fakeStore, prefix string) *ipkeeperv1alpha1.IPReservation {
	t.Helper()
	r, ok := store.get(naming.Reservation("cool", netip.MustParsePrefix(prefix).Addr()))
	if !ok {
		t.Fatalf("no reservation of %s", prefix)
	}
	return r
}

// On a sticky_mac network a pod presenting the MAC of an address a pod
// of its namespace released gets it back while it cools down, even when
// the released reservation is another node's; nobody else does: not
// another MAC, not another namespace, not a network without sticky_mac.
func TestStickyMACGivesTheReleasedAddressBack(t *testing.T) {
	const mac1, mac2 = "02:00:00:00:00:01", "02:00:00:00:00:02"
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.9.0.0/28"))

	x, err := addWithMAC(t, a, stickyConf, "c1", "vms", "p1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	if got := reservationOf(t, store, x).Labels[macaddr.Label]; got != "02-00-00-00-00-01" {
		t.Fatalf("reservation of a sticky_mac network's pod: label %s=%q, want 02-00-00-00-00-01", macaddr.Label, got)
	}
	if err := delVia(t, a, stickyConf, "c1"); err != nil {
		t.Fatal(err)
	}
	if !reservationOf(t, store, x).Spec.Released() {
		t.Fatalf("DEL did not retire %s", x)
	}

	// Nobody else gets it: another MAC, another namespace, another
	// network of the pool, whatever MAC it presents.
	for _, c := range []struct{ what, conf, ns, mac string }{
		{"another MAC", stickyConf, "vms", mac2},
		{"another namespace", stickyConf, "other", mac1},
		{"a network without sticky_mac", plainConf, "vms", mac1},
	} {
		uid := types2.UID("o-" + strings.ReplaceAll(c.what, " ", "-"))
		y, err := addWithMAC(t, a, c.conf, "c-"+string(uid), c.ns, uid, c.mac)
		if err != nil || y == x {
			t.Fatalf("ADD with %s = %q, %v; want another address than %s", c.what, y, err, x)
		}
		if c.conf == plainConf {
			if l, ok := reservationOf(t, store, y).Labels[macaddr.Label]; ok {
				t.Errorf("a network without sticky_mac labelled its reservation %s=%s", macaddr.Label, l)
			}
		}
	}

	before := reservationOf(t, store, x)
	y, err := addWithMAC(t, a, stickyConf, "c2", "vms", "p2", mac1)
	if err != nil || y != x {
		t.Fatalf("ADD of another pod of the namespace presenting the MAC = %q, %v; want %s back", y, err, x)
	}
	r := reservationOf(t, store, x)
	if r.UID == before.UID || r.Spec.Released() || r.Spec.Owner.UID != "p2" || r.Labels[macaddr.Label] != "02-00-00-00-00-01" {
		t.Errorf("taken back: uid %s (was %s), released %v, owner %s, label %q; want a new reservation of p2, in use, with the MAC",
			r.UID, before.UID, r.Spec.Released(), r.Spec.Owner.UID, r.Labels[macaddr.Label])
	}
	// The same pod's next sandbox, after its DEL, gets it back too.
	if err := delVia(t, a, stickyConf, "c2"); err != nil {
		t.Fatal(err)
	}
	if y, err := addWithMAC(t, a, stickyConf, "c3", "vms", "p2", mac1); err != nil || y != x {
		t.Fatalf("ADD of the pod's next sandbox after its DEL = %q, %v; want %s back", y, err, x)
	}
	if n := testutil.ToFloat64(a.metrics.stickyBack); n != 2 {
		t.Errorf("ipkeeper_agent_sticky_mac_taken_back_total = %v, want 2", n)
	}
	checkIndex(t, a.reservations)
}

// The released reservation of another node's pod (which this agent does
// not watch) is found by its MAC and taken back: a delete of it and a
// create of this node's, labelled shared when the address is in no
// block of this node.
func TestStickyMACTakesBackAnotherNodesAddress(t *testing.T) {
	const mac = "02:00:00:00:00:07"
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.9.0.0/28"))
	old := reservation.New(reservation.Params{
		Pool: "cool", Key: "cool", Network: "stickynet", IP: netip.MustParseAddr("10.9.0.9"), Interface: "net1",
		Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "gone", UID: "gone"},
		Node:  "node-b", Block: reservation.NodeBlock, MAC: mustMAC(t, mac),
	})
	old.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Minute)}
	old = store.put(old)

	y, err := addWithMAC(t, a, stickyConf, "c1", "vms", "p1", mac)
	if err != nil || y != "10.9.0.9/28" {
		t.Fatalf("ADD presenting the MAC of node-b's released address = %q, %v; want 10.9.0.9/28", y, err)
	}
	r := reservationOf(t, store, y)
	if r.UID == old.UID || r.Spec.Node != "node-a" || r.Labels[naming.NodeLabel] != naming.SharedNodeLabelValue {
		t.Errorf("taken back: uid %s (old %s), node %s, label %s=%q; want node-a's, labelled shared", r.UID, old.UID, r.Spec.Node, naming.NodeLabel, r.Labels[naming.NodeLabel])
	}
	if store.count("delete") != 1 {
		t.Errorf("%d deletes, want 1 (the released reservation, at its version)", store.count("delete"))
	}
}

// Someone else creating the address between the delete and the create
// costs the pod its old address, never a second holder: it gets another.
func TestStickyMACLosesARaceGracefully(t *testing.T) {
	const mac = "02:00:00:00:00:08"
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.9.0.0/28"))
	x, err := addWithMAC(t, a, stickyConf, "c1", "vms", "p1", mac)
	if err != nil {
		t.Fatal(err)
	}
	if err := delVia(t, a, stickyConf, "c1"); err != nil {
		t.Fatal(err)
	}
	name := naming.Reservation("cool", netip.MustParsePrefix(x).Addr())
	raced := false
	store.beforeCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
		if r.Name == name && !raced {
			raced = true
			other := r.DeepCopy()
			other.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "thief", UID: "thief"}
			store.put(other)
		}
		return nil
	}
	y, err := addWithMAC(t, a, stickyConf, "c2", "vms", "p2", mac)
	if err != nil || y == x || y == "" {
		t.Fatalf("ADD that lost its old address to a racing create = %q, %v; want another address", y, err)
	}
	if got := reservationOf(t, store, x).Spec.Owner.Name; got != "thief" {
		t.Errorf("%s is held by %s, want the racing pod's", x, got)
	}
}

// A MAC that is not one is the runtime's error, named; a network without
// sticky_mac never reads it.
func TestStickyMACRefusesABadMAC(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.9.0.0/28"))
	_, err := addWithMAC(t, a, stickyConf, "c1", "vms", "p1", "zz:00")
	if !codeIs(err, codeInvalidEnv) {
		t.Fatalf("ADD with CNI_ARGS MAC=zz:00: %v, want error code %d", err, codeInvalidEnv)
	}
	mustContainAll(t, err, "CNI_ARGS MAC", `"zz:00"`)
	if _, err := addWithMAC(t, a, plainConf, "c2", "vms", "p2", "zz:00"); err != nil {
		t.Fatalf("ADD on a network without sticky_mac with a bad MAC: %v, want it ignored", err)
	}
	if store.count("create") != 1 {
		t.Errorf("%d creates, want 1 (the refused ADD creates nothing)", store.count("create"))
	}
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Two released addresses of one MAC: the one its latest attachment had
// comes back, even when the other was released later (an earlier pod
// whose DEL never came, released by the garbage collector after its
// successor's DEL). Found by the chaos checker (I13, seed 3703).
func TestStickyMACGivesBackTheLatestAttachmentsAddress(t *testing.T) {
	const mac = "02:00:00:00:00:09"
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.9.0.0/28"))
	now := time.Now()
	released := func(ip, pod string, attached, reuseAfter time.Time) {
		r := reservation.New(reservation.Params{
			Pool: "cool", Key: "cool", Network: "stickynet", IP: netip.MustParseAddr(ip), Interface: "net1",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: pod, UID: types2.UID(pod)},
			Node:  "node-a", Block: reservation.NodeBlock, MAC: mustMAC(t, mac), AttachedAt: &metav1.Time{Time: attached},
		})
		r.Spec.ReuseAfter = &metav1.Time{Time: reuseAfter}
		store.put(r)
	}
	// g2 attached first; its release came last (the garbage collector's).
	released("10.9.0.3", "g2", now.Add(-10*time.Second), now.Add(time.Hour+2*time.Second))
	// g3 attached later; its DEL released it first.
	released("10.9.0.12", "g3", now.Add(-4*time.Second), now.Add(time.Hour))

	y, err := addWithMAC(t, a, stickyConf, "c1", "vms", "g3", mac)
	if err != nil || y != "10.9.0.12/28" {
		t.Fatalf("ADD presenting the MAC = %q, %v; want 10.9.0.12/28, the address of its latest attachment", y, err)
	}
}

// A MAC's attachments are ordered by when the agents saw them, not by
// their nodes' clocks in whole seconds: an attachment made while an
// earlier pod's reservation with the MAC was still in use (that pod
// deleted without its DEL) is the later one, whichever node's clock
// runs ahead and however quickly it followed, so the garbage collector
// releasing the earlier one last does not make it the MAC's address
// (chaos I13, seed 7311: the second case).
func TestStickyMACOrdersAttachmentsByWhatTheAgentSaw(t *testing.T) {
	const mac = "02:00:00:00:00:0a"
	for _, c := range []struct {
		what  string
		ahead time.Duration // how far the earlier pod's node's clock runs ahead
	}{
		{"the earlier pod's node's clock two seconds ahead", 2 * time.Second},
		{"both attached within one second", 0},
	} {
		t.Run(c.what, func(t *testing.T) {
			store := newFakeStore()
			a := newTestAgent(t, store, newFakeClaims())
			a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.9.0.0/28"))
			now := time.Now()
			// g2, on node-b, holds 10.9.0.3; deleted without its DEL, it
			// is released by the garbage collector after the pod's grace.
			g2 := reservation.New(reservation.Params{
				Pool: "cool", Key: "cool", Network: "stickynet", IP: netip.MustParseAddr("10.9.0.3"), Interface: "net1",
				Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "g2", UID: "g2"},
				Node:  "node-b", Block: reservation.NoBlock, MAC: mustMAC(t, mac), AttachedAt: &metav1.Time{Time: now.Add(c.ahead)},
			})
			store.put(g2)

			// g3 presents the MAC meanwhile: a new address, as g2's is in use.
			y, err := addWithMAC(t, a, stickyConf, "c3", "vms", "g3", mac)
			if err != nil || y == "10.9.0.3/28" {
				t.Fatalf("ADD of g3 while g2 holds the MAC's address = %q, %v; want another address", y, err)
			}
			if err := delVia(t, a, stickyConf, "c3"); err != nil {
				t.Fatal(err)
			}
			store.modify(g2.Name, func(r *ipkeeperv1alpha1.IPReservation) {
				r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour + 5*time.Second)}
			})

			z, err := addWithMAC(t, a, stickyConf, "c4", "vms", "g4", mac)
			if err != nil || z != y {
				t.Fatalf("ADD presenting the MAC after both were released = %q, %v; want %s, g3's, the MAC's latest attachment", z, err, y)
			}
		})
	}
}
