// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"net/netip"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// I4 allows exactly the controller's transient states of a claim; any
// other difference between what a claim records and what it holds is a
// problem, and only the states someone else causes count as settled.
func TestClaimAddressStates(t *testing.T) {
	const me, other types.UID = "claim-uid", "other-uid"
	a4, b4, c4 := netip.MustParseAddr("10.62.0.20"), netip.MustParseAddr("10.62.0.21"), netip.MustParseAddr("10.62.0.22")
	a6 := netip.MustParseAddr("fd62::20")
	edit := &claimEdit{from: []netip.Addr{a4, a6}, to: []netip.Addr{b4, a6}}
	refusedTaken := []metav1.Condition{{Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonRequestedTaken}}
	tests := []struct {
		name       string
		status     []string
		conditions []metav1.Condition
		requested  string
		mine       []netip.Addr // the claim's reservations
		others     []netip.Addr // reservations of another holder
		edit       *claimEdit
		state      string
		problem    bool
		settled    bool
		unlabelled bool // its MAC label not written yet
	}{
		{name: "filled, holds what it records", status: []string{"10.62.0.20/24", "fd62::20/120"}, mine: []netip.Addr{a4, a6}, settled: true},
		{name: "filled, its MAC label not written yet", status: []string{"10.62.0.20/24", "fd62::20/120"}, mine: []netip.Addr{a4, a6}, unlabelled: true},
		{name: "not filled yet", state: ""},
		{name: "reserved before the status write", mine: []netip.Addr{a4}, state: stateReservedBeforeStatus},
		{name: "request refused, address held by another", conditions: refusedTaken, requested: `["10.62.0.21"]`, others: []netip.Addr{b4},
			state: stateRequestRefused, settled: true},
		{name: "request refused, address free now", conditions: refusedTaken, requested: `["10.62.0.21"]`, state: stateRequestRefused},
		{name: "holds more than it records", status: []string{"10.62.0.20/24"}, mine: []netip.Addr{a4, c4}, state: stateHoldsUnrecorded},
		{name: "holds more than it records while a pod of it runs", status: []string{"10.62.0.20/24"}, mine: []netip.Addr{a4, c4}, state: stateHoldsUnrecorded,
			conditions: []metav1.Condition{{Type: claimstatus.ConditionHeld, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonPodRunning}}, settled: true},
		{name: "records an address it does not hold", status: []string{"10.62.0.20/24", "fd62::20/120"}, mine: []netip.Addr{a6}, problem: true},
		{name: "records an address another holds", status: []string{"10.62.0.20/24"}, others: []netip.Addr{a4}, problem: true},
		{name: "edited, new one not reserved yet", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{a4, a6}, edit: edit, state: stateEditOldHeld},
		{name: "edited, both held", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{a4, b4, a6}, edit: edit, state: stateEditOldHeld},
		{name: "edited, both held while a pod of it runs", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{a4, b4, a6}, edit: edit, state: stateEditOldHeld,
			conditions: []metav1.Condition{{Type: claimstatus.ConditionHeld, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonPodRunning}}, settled: true},
		{name: "edited, done", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{b4, a6}, edit: edit, settled: true},
		{name: "edited, new one someone else's", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{a4, a6}, others: []netip.Addr{b4}, edit: edit,
			state: stateEditConflict, settled: true},
		{name: "edited, old one lost before the new one is held", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{a6}, edit: edit, problem: true},
		// A create whose answer was lost left it a third address, which
		// it releases too (as outside an edit): transient, judged at
		// quiescence (chaos seed 3703).
		{name: "edited, holds a third address", status: []string{"10.62.0.21/24", "fd62::20/120"}, mine: []netip.Addr{a4, c4, a6}, edit: edit, state: stateEditOldHeld},
		{name: "records other addresses than the edit", status: []string{"10.62.0.22/24", "fd62::20/120"}, mine: []netip.Addr{a4, a6}, edit: edit, problem: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claim := &ipamclaimsv1alpha1.IPAMClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "vm-0.chaos-vm", Namespace: namespace, UID: me},
				Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: tt.status, Conditions: tt.conditions},
			}
			if tt.requested != "" {
				claim.Annotations = map[string]string{claimstatus.RequestedAnnotation: tt.requested}
			}
			if mac, _, ok := macaddr.OfClaim(claim); ok && !tt.unlabelled {
				claim.Labels = map[string]string{macaddr.Label: macaddr.LabelValue(mac)}
			}
			ls := &liveState{res: map[string]*ipkv1alpha1.IPReservation{}}
			for owner, ips := range map[types.UID][]netip.Addr{me: tt.mine, other: tt.others} {
				for _, ip := range ips {
					name := naming.Reservation(networks[poolVM].key, ip)
					ls.res[name] = &ipkv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipkv1alpha1.IPReservationSpec{
						Network: networks[poolVM].name, Pool: networks[poolVM].pool, IP: ip.String(), Owner: ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerIPAMClaim, UID: owner}}}
				}
			}
			v, facts := viewClaim(ls, claim), claimFacts{edit: tt.edit}
			state, problem := addressState(ls, v, facts)
			if state != tt.state || (problem != "") != tt.problem {
				t.Errorf("addressState = %q, problem %q; want %q, problem %v", state, problem, tt.state, tt.problem)
			}
			if got := settled(ls, v, facts); got != tt.settled {
				t.Errorf("settled = %v, want %v", got, tt.settled)
			}
		})
	}
}

// I4 at quiescence: a filled claim carries its MAC label, the VM's own MAC
// where the claim records one; a claim without addresses, or being
// deleted, needs none.
func TestMACLabelProblem(t *testing.T) {
	filled := func(labels, annotations map[string]string) *ipamclaimsv1alpha1.IPAMClaim {
		return &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.10.0.37/24"}}}
	}
	deleted := filled(nil, nil)
	deleted.DeletionTimestamp = &metav1.Time{}
	for _, tt := range []struct {
		name  string
		claim *ipamclaimsv1alpha1.IPAMClaim
		want  bool
	}{
		{"labelled with the derived MAC", filled(map[string]string{macaddr.Label: "0a-58-0a-0a-00-25"}, nil), false},
		{"not labelled yet", filled(nil, nil), true},
		{"labelled with another MAC", filled(map[string]string{macaddr.Label: "0a-58-0a-0a-00-26"}, nil), true},
		{"the VM's own MAC", filled(map[string]string{macaddr.Label: "02-00-00-00-aa-02"}, map[string]string{macaddr.OwnAnnotation: "02:00:00:00:aa:02"}), false},
		{"the derived MAC where the VM has its own", filled(map[string]string{macaddr.Label: "0a-58-0a-0a-00-25"}, map[string]string{macaddr.OwnAnnotation: "02:00:00:00:aa:02"}), true},
		{"no addresses", &ipamclaimsv1alpha1.IPAMClaim{}, false},
		{"being deleted", deleted, false},
	} {
		if got := macLabelProblem(tt.claim); (got != "") != tt.want {
			t.Errorf("%s: macLabelProblem = %q, want a problem: %v", tt.name, got, tt.want)
		}
	}
}

// I13 judges a sticky MAC's next ADD from the earliest time its address may
// have been released: a DEL that failed (its answer lost, the agent killed
// after its write) may have released it before the DEL that succeeded.
func TestStickyReleaseCountsFromAFailedDEL(t *testing.T) {
	r := &runner{}
	r.sticky = stickyState{holder: map[string]*slot{}, last: map[string]*stickyRecord{}}
	a := &attachment{mac: stickyMAC(2)}
	ip := netip.MustParseAddr("10.66.0.4")
	r.sticky.last[a.mac] = &stickyRecord{ip: ip, att: a}
	failed := time.Now().Add(-28 * time.Second)
	r.stickyDelFailed(a, failed)
	r.stickyDelFailed(a, failed.Add(time.Second)) // a later failure changes nothing
	r.stickyReleased(a)
	want, deadline, ok := r.stickyExpect(a)
	if !ok || want != ip || !deadline.Equal(failed.Add(stickyCooldown-stickyMargin)) {
		t.Errorf("stickyExpect = %s, %s, %v; want %s judged until %s (from the failed DEL)", want, deadline, ok, ip, failed.Add(stickyCooldown-stickyMargin))
	}

	// Without a failed DEL, from the successful one.
	b := &attachment{mac: stickyMAC(3)}
	r.sticky.last[b.mac] = &stickyRecord{ip: ip, att: b}
	before := time.Now()
	r.stickyReleased(b)
	if _, deadline, ok := r.stickyExpect(b); !ok || deadline.Before(before.Add(stickyCooldown-stickyMargin)) {
		t.Errorf("after a DEL that succeeded first: judged until %s (%v), want from its success", deadline, ok)
	}
}

// I14: a pool's status counts its reservations' distinct addresses,
// observed at the pool's generation.
func TestPoolUsageProblem(t *testing.T) {
	pool := &ipkv1alpha1.IPPool{}
	pool.Name, pool.Generation = "red", 2
	r := func(name, poolName, ip string) *ipkv1alpha1.IPReservation {
		x := &ipkv1alpha1.IPReservation{Spec: ipkv1alpha1.IPReservationSpec{Pool: poolName, IP: ip}}
		x.Name = name
		return x
	}
	res := map[string]*ipkv1alpha1.IPReservation{
		"a": r("a", "red", "10.0.0.1"),
		"b": r("b", "red", "10.0.0.2"),
		"c": r("c", "red", "10.0.0.2"), // a second holder of one address
		"d": r("d", "blue", "10.0.0.3"),
	}
	for _, tt := range []struct {
		name string
		st   ipkv1alpha1.IPPoolStatus
		want bool
	}{
		{"counted", ipkv1alpha1.IPPoolStatus{ObservedGeneration: 2, Used: 2}, false},
		{"one out of range", ipkv1alpha1.IPPoolStatus{ObservedGeneration: 2, Used: 1, OutOfRange: 1}, false},
		{"a count behind", ipkv1alpha1.IPPoolStatus{ObservedGeneration: 2, Used: 1}, true},
		{"holders counted, not addresses", ipkv1alpha1.IPPoolStatus{ObservedGeneration: 2, Used: 3}, true},
		{"an old generation", ipkv1alpha1.IPPoolStatus{ObservedGeneration: 1, Used: 2}, true},
		{"more cooling down than used", ipkv1alpha1.IPPoolStatus{ObservedGeneration: 2, Used: 1, OutOfRange: 1, CoolingDown: 2}, true},
	} {
		pool.Status = tt.st
		if got := poolUsageProblem(pool, res); (got != "") != tt.want {
			t.Errorf("%s: poolUsageProblem = %q, want a problem: %v", tt.name, got, tt.want)
		}
	}
}
