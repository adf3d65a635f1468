// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/naming"
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
		name: name, uid: types.UID("uid-" + name), pool: network, network: network, ip: a,
		owner: ipkeeperv1alpha1.ReservationOwner{
			Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "default", Name: "pod-" + string(podUID), UID: podUID,
		},
		ifName: ifName, containerID: containerID, node: "node-a",
		created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// claimEntry is an index entry for an IPAMClaim-owned reservation (as an
// agent of an earlier version made them, with interface and node).
func claimEntry(t testing.TB, network, ip string, claimUID types.UID, ifName string) entry {
	t.Helper()
	e := podEntry(t, network, ip, claimUID, ifName, "")
	e.owner.Kind = ipkeeperv1alpha1.OwnerIPAMClaim
	e.owner.Name = "claim-" + string(claimUID)
	return e
}

// with returns a copy of e changed by f.
func with(e entry, f func(*entry)) entry {
	f(&e)
	return e
}

// checkIndex fails t when x's maps disagree with each other or hold empty
// inner maps (which would leak per network, attachment or node), or link a
// reservation that is not a pod's of the index's node.
func checkIndex(t testing.TB, x *index) {
	t.Helper()
	x.mu.RLock()
	defer x.mu.RUnlock()
	for name, e := range x.byName {
		if e.name != name {
			t.Errorf("byName[%q] holds an entry named %q", name, e.name)
		}
		if got := x.taken[e.pool][e.ip]; got != name {
			t.Errorf("taken[%q][%s] = %q, want %q", e.pool, e.ip, got, name)
		}
		k := attachmentKey{e.pool, e.owner.UID, e.ifName}
		inPod := x.byPod[k].has(name)
		inSandbox := x.bySandbox[sandboxKey{e.pool, e.containerID, e.ifName}].has(name)
		inNode := x.byNode[nodeKey{e.node, e.pool}].has(name)
		inRetired := x.retired[nodeKey{e.node, e.pool}].has(name)
		if x.remote(e) {
			// Not a pod of this node: only its address, identity and
			// owner kind are kept.
			if inPod || inSandbox || inNode || inRetired || e.owner.UID != "" || e.containerID != "" || e.ifName != "" {
				t.Errorf("%s (owner kind %s, node %q) is kept whole (%+v) or found by byPod %v, bySandbox %v, byNode %v, retired %v",
					name, e.owner.Kind, e.node, e, inPod, inSandbox, inNode, inRetired)
			}
			continue
		}
		if e.owner.Kind != ipkeeperv1alpha1.OwnerPod {
			// A claim's (or another owner's): the agent acts on none.
			if inPod || inSandbox || inNode || inRetired {
				t.Errorf("%s (owner kind %s) is found by byPod %v, bySandbox %v, byNode %v, retired %v", name, e.owner.Kind, inPod, inSandbox, inNode, inRetired)
			}
			continue
		}
		if inRetired != e.released() {
			t.Errorf("%s (released %v) in retired = %v", name, e.released(), inRetired)
		}
		if e.released() {
			// Nobody's: no attachment, sandbox or node finds it.
			if inPod || inSandbox || inNode {
				t.Errorf("released %s is still found by byPod %v, bySandbox %v, byNode %v", name, inPod, inSandbox, inNode)
			}
			continue
		}
		if !inPod || !inSandbox || !inNode {
			t.Errorf("pod reservation %s missing from byPod %v, bySandbox %v or byNode %v", name, inPod, inSandbox, inNode)
		}
	}
	for k, m := range x.retired {
		if m.len() == 0 {
			t.Errorf("retired[%+v] is an empty set (leak)", k)
		}
		for name := range m.all() {
			if e, ok := x.byName[name]; !ok || !e.released() || (nodeKey{e.node, e.pool}) != k {
				t.Errorf("retired[%+v] lists %q, which the index holds as %+v (present: %v)", k, name, e, ok)
			}
		}
	}
	for network, m := range x.taken {
		if len(m) == 0 {
			t.Errorf("taken[%q] is an empty map (leak)", network)
		}
		for ip, name := range m {
			if e, ok := x.byName[name]; !ok || e.pool != network || e.ip != ip {
				t.Errorf("taken[%q][%s] = %q, which the index holds as %+v (present: %v)", network, ip, name, e, ok)
			}
		}
	}
	for k, m := range x.bySandbox {
		for name := range m.all() {
			if e, ok := x.byName[name]; !ok || (sandboxKey{e.pool, e.containerID, e.ifName}) != k {
				t.Errorf("bySandbox[%+v] lists %q, which the index holds as %+v (present: %v)", k, name, e, ok)
			}
		}
		if m.len() == 0 {
			t.Errorf("bySandbox[%+v] is an empty set (leak)", k)
		}
	}
	for k, m := range x.byNode {
		for name := range m.all() {
			if e, ok := x.byName[name]; !ok || (nodeKey{e.node, e.pool}) != k {
				t.Errorf("byNode[%+v] lists %q, which the index holds as %+v (present: %v)", k, name, e, ok)
			}
		}
		if m.len() == 0 {
			t.Errorf("byNode[%+v] is an empty set (leak)", k)
		}
	}
	for k, m := range x.byPod {
		if m.len() == 0 {
			t.Errorf("byPod[%+v] is an empty set (leak)", k)
		}
		for name := range m.all() {
			e, ok := x.byName[name]
			if !ok || (attachmentKey{e.pool, e.owner.UID, e.ifName}) != k || e.owner.Kind != ipkeeperv1alpha1.OwnerPod {
				t.Errorf("byPod[%+v] lists %q, which the index holds as %+v (present: %v)", k, name, e, ok)
			}
		}
	}
}
