// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// coolConf uses IPPool "cool", a /30: two addresses.
const coolConf = `{"cniVersion":"1.0.0","name":"coolnet","type":"bridge","ipam":{"type":"ipkeeper","pool":"cool"}}`

func coolPool(cooldown time.Duration, ranges ...string) *ipkeeperv1alpha1.IPPool {
	p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "cool"}}
	for _, r := range ranges {
		p.Spec.Ranges = append(p.Spec.Ranges, ipkeeperv1alpha1.PoolRange{Range: r})
	}
	if cooldown > 0 {
		p.Spec.ReuseCooldown = &ipkeeperv1alpha1.Duration{Duration: cooldown}
	}
	return p
}

func delVia(t *testing.T, a *Agent, conf, containerID string) error {
	t.Helper()
	return a.Del(context.Background(), &cniproto.Request{Command: cniproto.CmdDel, ContainerID: containerID, IfName: "net1", Config: []byte(conf)})
}

// A DEL in a pool with a reuse cooldown retires the reservation (sets
// spec.reuseAfter, preconditioned like the delete) instead of deleting
// it: the address stays taken, by nobody, until the cooldown is over; then
// an allocation that finds the pool exhausted deletes the expired
// reservation of its node and takes the address.
func TestDelInCooldownPoolRetiresTheReservation(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(30*time.Second, "10.9.0.0/30"))

	x, err := addVia(t, a, coolConf, "c1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	name := naming.Reservation("cool", netip.MustParsePrefix(x).Addr())
	before, _ := store.get(name)
	start := time.Now()
	if err := delVia(t, a, coolConf, "c1"); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	r, ok := store.get(name)
	if !ok {
		t.Fatalf("DEL in a pool with reuseCooldown 30s deleted the reservation of %s; want it kept with spec.reuseAfter", x)
	}
	if r.UID != before.UID || r.Spec.ReuseAfter == nil {
		t.Fatalf("reservation after DEL: uid %s (was %s), reuseAfter %v; want the same object with reuseAfter set", r.UID, before.UID, r.Spec.ReuseAfter)
	}
	if at := r.Spec.ReuseAfter.Time; at.Before(start.Add(30*time.Second)) || at.After(time.Now().Add(31*time.Second)) {
		t.Errorf("reuseAfter = %s, want 30s (rounded up to the second) after the DEL at %s", at, start)
	}
	if store.count("delete") != 0 {
		t.Errorf("%d deletes, want none", store.count("delete"))
	}
	checkIndex(t, a.reservations)
	// A retried DEL finds nothing of the sandbox's left.
	if err := delVia(t, a, coolConf, "c1"); err != nil {
		t.Fatalf("DEL again: %v", err)
	}
	if again, _ := store.get(name); again.ResourceVersion != r.ResourceVersion {
		t.Errorf("a retried DEL wrote the retired reservation again")
	}

	y, err := addVia(t, a, coolConf, "c2", "p2")
	if err != nil || y == x {
		t.Fatalf("ADD while %s cools down = %q, %v; want the other address", x, y, err)
	}
	if _, err := addVia(t, a, coolConf, "c3", "p3"); reasonOf(err) != reasonExhausted {
		t.Fatalf("ADD with one address held and one cooling down: %v, want exhausted", err)
	}

	// The cooldown is over (as if 30s had passed).
	expired := store.modify(name, func(r *ipkeeperv1alpha1.IPReservation) {
		r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(-time.Second)}
	})
	watched(a, expired)
	got, err := addVia(t, a, coolConf, "c3", "p3")
	if err != nil || got != x {
		t.Fatalf("ADD once %s's cooldown is over = %q, %v; want %s", x, got, err, x)
	}
	if r, _ := store.get(name); r.UID == before.UID || r.Spec.Released() || r.Spec.Owner.UID != "p3" {
		t.Errorf("reservation of %s: uid %s, released %v, owner %s; want a new one for p3", x, r.UID, r.Spec.Released(), r.Spec.Owner.UID)
	}
	checkIndex(t, a.reservations)
}

// An expired released reservation of another node is left to its node's
// agent or the controller's garbage collector: the node-bound admission
// policy lets an agent delete only its own node's reservations, and it
// cannot tell "expired" (admission CEL has no clock).
func TestExpiredReleaseOfAnotherNodeIsLeft(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(30*time.Second, "10.9.1.0/31"))
	for i, ip := range []string{"10.9.1.0", "10.9.1.1"} {
		r := &ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("cool", netip.MustParseAddr(ip))},
			Spec: ipkeeperv1alpha1.IPReservationSpec{Pool: "cool", Network: "coolnet", IP: ip, InterfaceName: "net1", Node: "node-b",
				Owner:      ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "default", Name: fmt.Sprint("gone", i), UID: types2.UID(fmt.Sprint("gone", i))},
				ReuseAfter: &metav1.Time{Time: time.Now().Add(-time.Minute)}}}
		watched(a, store.put(r))
	}
	if _, err := addVia(t, a, coolConf, "c1", "p1"); reasonOf(err) != reasonExhausted {
		t.Fatalf("ADD with only node-b's expired releases free: %v, want exhausted", err)
	}
	if n := store.count("delete"); n != 0 {
		t.Errorf("the agent tried %d deletes of another node's reservations", n)
	}
}

// The cooldown is the pool's: a DEL that cannot read the pool fails (the
// runtime retries it) rather than guess; a pool that no longer exists has
// no cooldown, so the reservation is deleted.
func TestDelCooldownPoolUnreadableOrGone(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ps := a.poolStore.(*fakePoolStore)
	ps.put(coolPool(30*time.Second, "10.9.2.0/29"))
	x, err := addVia(t, a, coolConf, "c1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	name := naming.Reservation("cool", netip.MustParsePrefix(x).Addr())

	ps.failGet = errors.New("apiserver unreachable")
	err = delVia(t, a, coolConf, "c1")
	if !codeIs(err, codeTryAgainLater) {
		t.Fatalf("DEL with the pool unreadable: %v, want try again later (code 11)", err)
	}
	mustContainAll(t, err, `"cool"`, "apiserver unreachable")
	if r, ok := store.get(name); !ok || r.Spec.Released() {
		t.Fatalf("DEL with the pool unreadable changed the reservation (present %v)", ok)
	}

	ps.failGet = nil
	ps.remove("cool")
	if err := delVia(t, a, coolConf, "c1"); err != nil {
		t.Fatalf("DEL with the pool gone: %v", err)
	}
	if _, ok := store.get(name); ok {
		t.Errorf("DEL with the pool gone kept the reservation; want it deleted (no pool, no cooldown)")
	}
}

// A rollback deletes at once what this very ADD created and nobody ever
// got: the address was never handed to a workload, so there is nothing to
// cool down.
func TestRollbackInCooldownPoolDeletes(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(30*time.Second, "10.9.3.0/29", "fd00:9:3::/125"))
	store.beforeCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
		if netip.MustParseAddr(r.Spec.IP).Is6() {
			return errors.New("injected: IPv6 create refused")
		}
		return nil
	}
	if _, err := addVia(t, a, coolConf, "c1", "p1"); err == nil {
		t.Fatal("ADD succeeded with its IPv6 create failing")
	}
	if all := store.all(); len(all) != 0 {
		t.Fatalf("after the rollback: %d reservations (released: %v), want none", len(all), all[0].Spec.Released())
	}
}
