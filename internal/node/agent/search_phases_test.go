// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// These tests pin the paths of the allocation search (search.go) that the
// tests of ADD, blocks and cooldown do not: which phase runs, and the API
// reads and writes it costs.

// fillSmall stores a reservation of another node for every usable address
// of smallConf's /29 (10.9.0.1-6) and shows them to a's reservation cache.
func fillSmall(t *testing.T, store *fakeStore, a *Agent) {
	t.Helper()
	for i := 1; i <= 6; i++ {
		ip := netip.AddrFrom4([4]byte{10, 9, 0, byte(i)})
		watched(a, store.put(&ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("small", ip)},
			Spec: ipkeeperv1alpha1.IPReservationSpec{
				Network: "small", Pool: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "c", Node: "node-b",
				Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "other", UID: types2.UID("other-" + ip.String())},
			},
		}))
	}
}

// The reservation cache errs towards "taken": a range it shows full is listed live
// once, and an address the list shows free is handed out.
func TestSearchConfirmsALaggingCacheBeforeRefusing(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	fillSmall(t, store, a)
	// Deleted by its holder; the cache has not seen the event yet.
	freed := netip.MustParseAddr("10.9.0.4")
	store.mu.Lock()
	delete(store.objs, naming.Reservation("small", freed))
	store.mu.Unlock()

	pod := testPod("web", "pod-lagging")
	ips, err := a.allocateForPod(context.Background(), testRequest(t, cniproto.CmdAdd, smallConf, "c", pod), pod)
	if err != nil || len(ips) != 1 || ips[0].Addr() != freed {
		t.Fatalf("ADD with the cache showing the range full = %v, %v; want %s, which a live list shows free", ips, err, freed)
	}
	if n := store.count("list"); n != 1 {
		t.Errorf("%d live lists, want 1", n)
	}
	if n := store.count("create"); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
	if c := counterValue(t, a.metrics.conflicts); c != 0 {
		t.Errorf("%v conflicts, want none", c)
	}
}

// Each address another writer holds unseen costs one failed create (and a
// read to see whose it is); past reservation.MaxCollisions the ADD is told to retry.
func TestSearchGivesUpAfterMaxConflicts(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	store.beforeCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
		return fmt.Errorf("%w: reservation %s", ErrTaken, r.Name)
	}
	const wide = `{"cniVersion":"1.0.0","name":"wide","type":"bridge","ipam":{"type":"ipkeeper","range":"10.8.0.0/24"}}`
	pod := testPod("web", "pod-conflicts")
	_, err := a.allocateForPod(context.Background(), testRequest(t, cniproto.CmdAdd, wide, "c", pod), pod)
	if reasonOf(err) != reasonConflict || cniCodeOf(err) != types.ErrTryAgainLater {
		t.Fatalf("ADD whose every create is refused: %v (reason %q, code %d), want a conflict to retry", err, reasonOf(err), cniCodeOf(err))
	}
	want := fmt.Sprintf(`network "wide": %d candidate addresses in 10.8.0.0/24 (10.8.0.1-10.8.0.254) were taken by others at create time; the agent's cache is lagging, retry`, reservation.MaxCollisions)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if c := counterValue(t, a.metrics.conflicts); c != reservation.MaxCollisions {
		t.Errorf("%v conflicts counted, want %d", c, reservation.MaxCollisions)
	}
	if n := store.count("get"); n != reservation.MaxCollisions {
		t.Errorf("%d reads of the refused names, want %d", n, reservation.MaxCollisions)
	}
	if n := store.count("list"); n != 0 {
		t.Errorf("%d live lists, want none (the range is not full)", n)
	}
}

// An address a create of this node is in flight for is skipped, unless
// nothing else is free.
func TestSearchSkipsAddressesInFlight(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()

	pod := testPod("web", "pod-pending")
	req := testRequest(t, cniproto.CmdAdd, smallConf, "c", pod)
	first, err := allocator.Candidate(req.cfg.Ranges[0], nil, string(pod.UID)+"/net1")
	if err != nil {
		t.Fatal(err)
	}
	var ips []netip.Prefix
	whileInFlight(ctx, a, req.pool.Name, []netip.Addr{first}, func() { ips, err = a.allocateForPod(ctx, req, pod) })
	if err != nil || ips[0].Addr() == first {
		t.Fatalf("ADD while a create of %s is in flight = %v, %v; want another address", first, ips, err)
	}

	other := testPod("db", "pod-pending-all")
	req = testRequest(t, cniproto.CmdAdd, smallConf, "c2", other)
	first, err = allocator.Candidate(req.cfg.Ranges[0], func(ip netip.Addr) bool { return ip == ips[0].Addr() }, string(other.UID)+"/net1")
	if err != nil {
		t.Fatal(err)
	}
	var inFlight []netip.Addr
	for i := 1; i <= 6; i++ {
		inFlight = append(inFlight, netip.AddrFrom4([4]byte{10, 9, 0, byte(i)}))
	}
	var got []netip.Prefix
	whileInFlight(ctx, a, req.pool.Name, inFlight, func() { got, err = a.allocateForPod(ctx, req, other) })
	if err != nil || got[0].Addr() != first {
		t.Fatalf("ADD with a create in flight for every free address = %v, %v; want %s rather than exhausted", got, err, first)
	}
	if n := store.count("list"); n != 0 {
		t.Errorf("%d live lists, want none", n)
	}
}

// whileInFlight runs fn while the agent's creates of ips are in flight.
func whileInFlight(ctx context.Context, a *Agent, pool string, ips []netip.Addr, fn func()) {
	if len(ips) == 0 {
		fn()
		return
	}
	_, _ = ipam.Reserve(ctx, a.engine, pool, ips[0], func(context.Context) (struct{}, error) {
		whileInFlight(ctx, a, pool, ips[1:], fn)
		return struct{}{}, nil
	})
}

// An agent whose blocks are full and that can take no other confirms the
// range full with one live list, remembers it until a release, and then
// reclaims its own released address whose cooldown is over.
func TestSearchInFullBlocksConfirmsOnceThenReclaims(t *testing.T) {
	store := newFakeStore()
	agents, fb := blockAgents(t, store, "node-a")
	a := agents[0]
	conf := `{"cniVersion":"1.0.0","name":"small","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.0/29"}}`
	var first string
	for i := range 6 { // both /30 blocks, three usable addresses each
		uid := types2.UID(fmt.Sprintf("a%d", i))
		ip, err := addVia(t, a, conf, "c-"+string(uid), uid)
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if i == 0 {
			first = ip
		}
	}
	if n := fb.createCount(); n != 2 {
		t.Fatalf("%d blocks taken for 6 addresses, want 2", n)
	}
	for i := range 2 {
		_, err := addVia(t, a, conf, fmt.Sprintf("c-full%d", i), types2.UID(fmt.Sprintf("full%d", i)))
		if reasonOf(err) != reasonExhausted || cniCodeOf(err) != types.ErrInternal {
			t.Fatalf("ADD %d into full blocks: %v, want exhausted", i, err)
		}
		const want = `network "small" (IPPool "small") is exhausted: no free address in range 10.6.0.0/29 (10.6.0.1-10.6.0.6)`
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := store.count("list"); n != 1 {
		t.Errorf("two ADDs into full blocks made %d live lists, want 1", n)
	}
	if n := store.count("create"); n != 6 {
		t.Errorf("%d creates, want 6 (none into full blocks)", n)
	}

	// a0's address, released with its cooldown over.
	name := naming.Reservation("small", netip.MustParsePrefix(first).Addr())
	watched(a, store.modify(name, func(r *ipkeeperv1alpha1.IPReservation) {
		r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(-time.Second)}
	}))
	got, err := addVia(t, a, conf, "c-reclaim", "reclaim")
	if err != nil || got != first {
		t.Fatalf("ADD once %s's cooldown is over = %q, %v; want it", first, got, err)
	}
	if n := store.count("delete"); n != 1 {
		t.Errorf("%d deletes, want 1 (the expired reservation)", n)
	}
	if n := store.count("list"); n != 1 {
		t.Errorf("%d live lists, want still 1: the range was confirmed full", n)
	}
}

// A borrowing ADD scans with the list another borrowing ADD of the node
// made a moment ago: an address taken since costs one failed create, and
// a shared list that shows the range full is confirmed by a fresh one.
func TestSearchBorrowerWithASharedList(t *testing.T) {
	store := newFakeStore()
	agents, _ := blockAgents(t, store, "node-a", "node-b")
	a, b := agents[0], agents[1]
	conf := `{"cniVersion":"1.0.0","name":"small","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.0/29"}}`
	for i := range 4 { // node-a takes both blocks
		uid := types2.UID(fmt.Sprintf("a%d", i))
		if _, err := addVia(t, a, conf, "c-"+string(uid), uid); err != nil {
			t.Fatalf("ADD %d on node-a: %v", i, err)
		}
	}
	if _, err := addVia(t, b, conf, "c-b0", "b0"); err != nil {
		t.Fatalf("node-b's borrowing ADD: %v", err)
	}
	if n := store.count("list"); n != 1 {
		t.Fatalf("%d live lists after one borrowing ADD, want 1", n)
	}
	// The pool's last free address, taken by node-a after node-b's list.
	taken := map[string]bool{}
	for _, r := range store.all() {
		taken[r.Spec.IP] = true
	}
	var last netip.Addr
	for i := 1; i <= 6; i++ {
		if ip := netip.AddrFrom4([4]byte{10, 6, 0, byte(i)}); !taken[ip.String()] {
			last = ip
		}
	}
	if !last.IsValid() {
		t.Fatal("no free address left after five ADDs into six")
	}
	if _, err := addVia(t, a, conf, "c-a4", "a4"); err != nil {
		t.Fatalf("node-a's ADD of the last address: %v", err)
	}

	if _, err := addVia(t, b, conf, "c-b1", "b1"); reasonOf(err) != reasonExhausted {
		t.Fatalf("node-b's ADD with a shared list showing %s free: %v, want exhausted", last, err)
	}
	if c := counterValue(t, b.metrics.conflicts); c != 1 {
		t.Errorf("node-b met %v conflicts, want 1 (the address the shared list showed free)", c)
	}
	if n := store.count("list"); n != 2 {
		t.Errorf("%d live lists, want 2 (the shared one, then one confirming the range full)", n)
	}
}
