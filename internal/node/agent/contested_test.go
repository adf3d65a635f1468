// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// An address two ADDs of the node contested (one created it, the other
// collided and marked it taken) is free again once its DEL releases it:
// the next ADD gets it, even when its search makes a fresh live list of
// the pool (the fill's shared list has expired) while the collision's
// mark is still in the cache. It was refused as exhausted once
// (TestAgentExhaustion, in CI).
func TestAddAfterDelOfAContestedAddress(t *testing.T) {
	store := newFakeStore()
	agents, _ := blockAgents(t, store, "node-a")
	a := agents[0]
	conf := `{"cniVersion":"1.0.0","name":"small","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.0/29"}}`
	for _, uid := range []types.UID{"a0", "a1", "a2", "a3", "a4"} {
		if _, err := addVia(t, a, conf, "c-"+string(uid), uid); err != nil {
			t.Fatal(err)
		}
	}
	// P heads for the last free address; H, a concurrent ADD of the node,
	// creates it first (pick falls back to an address in flight).
	var holderIP string
	inner := false
	store.beforeCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
		if inner || r.Spec.Owner.UID != "P" {
			return nil
		}
		inner = true
		ip, err := addVia(t, a, conf, "c-H", "H")
		if err != nil {
			t.Errorf("H: %v", err)
		}
		holderIP = ip
		return nil
	}
	if _, err := addVia(t, a, conf, "c-P", "P"); reasonOf(err) != reasonExhausted {
		t.Fatalf("P: %v, want exhausted", err)
	}
	store.beforeCreate = nil
	if c := counterValue(t, a.metrics.conflicts); c != 1 {
		t.Fatalf("%v conflicts, want 1", c)
	}
	freed := netip.MustParsePrefix(holderIP).Addr()
	// The fill's shared live list has expired (ipam.BorrowTTL: a new
	// engine has no memo of it); the conflict mark (conflictTTL, 30 s),
	// which the agent's cache keeps, has not.
	a.engine = a.newEngine()

	del := testRequest(t, cniproto.CmdDel, conf, "c-H", testPod("pod-H", "H"))
	if err := a.Del(context.Background(), del.Request); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, ok := store.get(naming.Reservation("small", freed)); ok {
		t.Fatalf("DEL left the reservation")
	}
	got, err := addVia(t, a, conf, "c-late", "late")
	if err != nil {
		t.Fatalf("ADD after DEL freed %s: %v", freed, err)
	}
	if got != holderIP {
		t.Fatalf("got %s, want %s", got, holderIP)
	}
}
