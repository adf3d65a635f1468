// SPDX-License-Identifier: Apache-2.0

package index

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// podEntry is an index entry for a pod-owned reservation, named as the
// agent names it.
func podEntry(t testing.TB, network, ip string, podUID types.UID, ifName, containerID string) Entry {
	t.Helper()
	a := netip.MustParseAddr(ip)
	name := naming.Reservation(network, a)
	return Entry{
		Name: name, UID: types.UID("uid-" + name), Pool: network, Network: network, IP: a,
		Owner: ipkeeperv1alpha1.ReservationOwner{
			Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "default", Name: "pod-" + string(podUID), UID: podUID,
		},
		InterfaceName: ifName, ContainerID: containerID, Node: "node-a",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// claimEntry is an index entry for an IPAMClaim-owned reservation (as an
// agent of an earlier version made them, with interface and node).
func claimEntry(t testing.TB, network, ip string, claimUID types.UID, ifName string) Entry {
	t.Helper()
	e := podEntry(t, network, ip, claimUID, ifName, "")
	e.Owner.Kind = ipkeeperv1alpha1.OwnerIPAMClaim
	e.Owner.Name = "claim-" + string(claimUID)
	return e
}

// with returns a copy of e changed by f.
func with(e Entry, f func(*Entry)) Entry {
	f(&e)
	return e
}

// checkIndex fails t when x's maps disagree with each other (Verify).
func checkIndex(t testing.TB, x *Cache) {
	t.Helper()
	if err := Verify(x); err != nil {
		t.Error(err)
	}
}
