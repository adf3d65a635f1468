// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// mustParse parses a network configuration that the test expects to be valid.
func mustParse(t testing.TB, conf string) *ipamconfig.Config {
	t.Helper()
	cfg, err := ipamconfig.Parse([]byte(conf))
	if err != nil {
		t.Fatalf("bad test config: %v\n%s", err, conf)
	}
	return cfg
}

// podEntry is an index entry for a pod-owned reservation, named as the
// agent names it.
func podEntry(t testing.TB, network, ip string, podUID types.UID, ifName, containerID string) entry {
	t.Helper()
	a := netip.MustParseAddr(ip)
	name := naming.Reservation(network, a)
	return entry{
		Name: name, UID: types.UID("uid-" + name), Pool: network, Network: network, IP: a,
		Owner: ipkeeperv1alpha1.ReservationOwner{
			Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "default", Name: "pod-" + string(podUID), UID: podUID,
		},
		InterfaceName: ifName, ContainerID: containerID, Node: "node-a",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func sortedNames(es []entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

// checkIndex fails t when x's maps disagree with each other (see
// index.Verify).
func checkIndex(t testing.TB, x *index.Cache) {
	t.Helper()
	if err := index.Verify(x); err != nil {
		t.Error(err)
	}
}

// watched delivers r to a's cache as its watch would.
func watched(a *Agent, r *ipkeeperv1alpha1.IPReservation) {
	if e, ok := index.EntryOf(r); ok {
		a.reservations.Watched(e)
	}
}

// watchedDeletion delivers r's deletion to a's cache as its watch would.
func watchedDeletion(a *Agent, r *ipkeeperv1alpha1.IPReservation) {
	a.reservations.WatchedDeletion(r.Name, r.UID)
}
