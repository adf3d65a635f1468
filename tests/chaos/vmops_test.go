// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestInSharedPool(t *testing.T) {
	for _, tt := range []struct {
		from, to string
		want     bool
	}{
		{"blue-b", "blue-c", true},  // two networks, one named pool
		{"blue-c", "blue-b", true},  // swapped back
		{"blue-c", "blue-a", false}, // to an inline pool of its own
		{"blue-a", "blue-b", false},
		{"blue-b", "blue-b", false}, // one network keeps its claim
		{"red", "blue-b", false},
		{"blue-b", "nowhere", false},
	} {
		if got := inSharedPool(tt.from, tt.to); got != tt.want {
			t.Errorf("inSharedPool(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

// blue's swaps go round every blue NAD, each to another CNI network (a
// swap within one network keeps its claim and judges nothing of a swap),
// and a VM's first one stays in a named pool with a reuse cooldown, the
// case of docs/kubevirt.md the short run must reach: the two NADs name
// one pool, so the harness's record puts both claims' attachments in it
// (I1 compares them) and finds the source's reservation by the pool's
// lock key (I2).
func TestBlueSwaps(t *testing.T) {
	seen := map[string]bool{}
	nad := blueFirstNAD
	for range blueSwaps {
		if seen[nad] {
			t.Fatalf("blue's swaps come back to %s before visiting every NAD of %v", nad, blueSwaps)
		}
		seen[nad] = true
		next := blueSwaps[nad]
		if vmNetworks[nad] == nil || vmNetworks[next] == nil {
			t.Fatalf("swap %s -> %s: a NAD that is none of vmNetworks", nad, next)
		}
		if vmNetworks[nad].name == vmNetworks[next].name {
			t.Errorf("swap %s -> %s stays on CNI network %s", nad, next, vmNetworks[nad].name)
		}
		nad = next
	}
	if nad != blueFirstNAD {
		t.Errorf("blue's swaps end on %s, not back on %s", nad, blueFirstNAD)
	}
	from, to := vmNetworks[blueFirstNAD], vmNetworks[blueSwaps[blueFirstNAD]]
	if !inSharedPool(blueFirstNAD, blueSwaps[blueFirstNAD]) || from.key != to.key {
		t.Errorf("a VM's first swap, %s -> %s, is not within one pool (pools %s, %s; lock keys %s, %s)",
			from.nad, to.nad, from.pool, to.pool, from.key, to.key)
	}
	if cooldownOf(from.pool) <= 0 {
		t.Errorf("blue's shared pool %s has no reuse cooldown", from.pool)
	}
}

// The defect of docs/kubevirt.md's shared pool (the swapped claim took
// the live source claim's address: its reservation made the swapped
// claim's) is what I1 and I2 report, though both claims are of one VM
// network; the swapped claim getting another address of the pool, or
// the source's once the source let it go, is not.
func TestSharedPoolSwapJudged(t *testing.T) {
	src, dst := vmNetworks[blueFirstNAD], vmNetworks[blueSwaps[blueFirstNAD]]
	vm := "vm-0-g1"
	oldName, newName := naming.Claim(vm, blue), naming.SwappedClaim(vm, blue, dst.name)
	x, y := netip.MustParseAddr("10.64.1.10"), netip.MustParseAddr("10.64.1.11")
	launcher := func(n *network, claim, uid, pod string) *attachment {
		return &attachment{network: n.name, pool: n.pool, key: n.key, podNS: vmNamespace, podName: pod, podUID: types.UID("pod-" + pod),
			ifName: "pod" + blue, claimName: claim, claimUID: types.UID("uid-" + uid), remadeClaim: true}
	}
	// I1, on the target's ADD: the source's launcher got x, and runs or
	// has let it go (its DEL sent).
	for _, tt := range []struct {
		name           string
		released       bool
		claim          string // the target's
		ip             netip.Addr
		clashes, early int
	}{
		{"the target gets the running source's address", false, newName, x, 1, 0},
		{"the target gets another address of the pool", false, newName, y, 0, 0},
		{"the source's address taken back after the swap", true, newName, x, 0, 0},
		{"another VM gets it within the cooldown", true, naming.Claim("vm-1-g1", blue), x, 0, 1},
	} {
		t.Run("I1: "+tt.name, func(t *testing.T) {
			m := newModel()
			s, d := launcher(src, oldName, "old", "source"), launcher(dst, tt.claim, "new", "target")
			m.add(s)
			m.succeeded(s, []netip.Addr{x})
			if tt.released {
				m.setState(s, attReleasing)
			}
			m.add(d)
			clash, _, early := m.succeeded(d, []netip.Addr{tt.ip})
			if len(clash) != tt.clashes || len(early) != tt.early {
				t.Errorf("claim %s's launcher got %s: %d clashes, %d early reuses (%v), want %d and %d", tt.claim, tt.ip, len(clash), len(early), early, tt.clashes, tt.early)
			}
		})
	}

	s := launcher(src, oldName, "old", "source")
	res := func(owner, uid, network string, released bool) *ipkv1alpha1.IPReservation {
		r := reservation.New(reservation.Params{Pool: src.pool, Key: src.key, Network: network, IP: x, Interface: s.ifName, Block: reservation.ClaimsBlock,
			Owner: ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerIPAMClaim, Namespace: vmNamespace, Name: owner, UID: types.UID("uid-" + uid)}})
		if released {
			r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(blueCooldown)}
		}
		return r
	}
	for _, tt := range []struct {
		name string
		res  *ipkv1alpha1.IPReservation
		want bool
	}{
		{"the source claim's, pending or rolled back", res(oldName, "old", src.name, false), true},
		{"made the swapped claim's", res(newName, "new", dst.name, false), false},
		{"released while the source runs", res(oldName, "old", src.name, true), false},
	} {
		t.Run("I2: "+tt.name, func(t *testing.T) {
			if got := belongs(tt.res, s); got != tt.want {
				t.Errorf("belongs(reservation %s of %s uid %s, the source's launcher) = %v, want %v", tt.res.Name, tt.res.Spec.Owner.Name, tt.res.Spec.Owner.UID, got, tt.want)
			}
		})
	}
}
