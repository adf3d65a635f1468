// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"
	"time"

	types2 "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestAddWithinTheNamespaceQuota: in a pool with
// spec.maxAddressesPerNamespace 2 and a cooldown, a namespace whose two
// pods hold addresses, one of them released and cooling down, gets no
// third: the ADD is refused with reason quota, naming the pool, the
// namespace and the quota, and the reservation it created is deleted.
// Once the cooled address is gone, the ADD gets one.
func TestAddWithinTheNamespaceQuota(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	pool := coolPool(30*time.Second, "10.9.0.0/28")
	pool.Spec.MaxAddressesPerNamespace = ptr.To[int32](2)
	a.poolStore.(*fakePoolStore).put(pool)

	for _, p := range []string{"p1", "p2"} {
		if _, err := addVia(t, a, coolConf, "c-"+p, types2.UID(p)); err != nil {
			t.Fatalf("ADD of %s within the quota: %v", p, err)
		}
	}
	if err := delVia(t, a, coolConf, "c-p1"); err != nil {
		t.Fatal(err)
	}
	_, err := addVia(t, a, coolConf, "c-p3", types2.UID("p3"))
	if reasonOf(err) != reasonQuota || !codeIs(err, codeInternal) {
		t.Fatalf("third ADD of namespace vms = %v (reason %s), want refused with reason %s, code %d", err, reasonOf(err), reasonQuota, codeInternal)
	}
	mustContainAll(t, err, `namespace "vms" holds 2 addresses`, `IPPool "cool"`, "spec.maxAddressesPerNamespace is 2")
	if got := len(store.all()); got != 2 {
		t.Fatalf("%d reservations after the refused ADD, want the namespace's 2 (the refused one deleted)", got)
	}
	checkIndex(t, a.reservations)

	// The cooled-down address deleted: the namespace holds one, and gets a second.
	for _, r := range store.all() {
		if r.Spec.Released() {
			if err := store.Delete(t.Context(), r.Name, r.UID, ""); err != nil {
				t.Fatal(err)
			}
			watchedDeletion(a, r)
		}
	}
	if _, err := addVia(t, a, coolConf, "c-p3", types2.UID("p3")); err != nil {
		t.Fatalf("ADD once the namespace holds one address of its quota of 2: %v", err)
	}
}
