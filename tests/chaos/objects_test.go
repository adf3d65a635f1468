// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// What reservation.New makes is in one scope; each way out of one is a
// problem I7 reports.
func TestWatchScopeProblem(t *testing.T) {
	pod := ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "u"}
	claim := ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm.blue", UID: "u"}
	ip := netip.MustParseAddr("10.0.0.1")
	build := func(owner ipkv1alpha1.ReservationOwner, block reservation.Block, edit func(map[string]string)) *ipkv1alpha1.IPReservation {
		r := reservation.New(reservation.Params{Pool: "p", Key: "p", Network: "n", IP: ip, Owner: owner, Interface: "net1", Node: "node-a", Block: block})
		if edit != nil {
			edit(r.Labels)
		}
		return r
	}
	for _, tt := range []struct {
		name    string
		res     *ipkv1alpha1.IPReservation
		problem bool
	}{
		{"a pod's in its node's block", build(pod, reservation.NodeBlock, nil), false},
		{"a borrowed address's, shared", build(pod, reservation.NoBlock, nil), false},
		{"a claim's in a claims' block", build(claim, reservation.ClaimsBlock, nil), false},
		{"a claim's borrowed, shared", build(claim, reservation.NoBlock, nil), false},
		{"unlabelled", build(pod, reservation.NoBlock, func(l map[string]string) { delete(l, naming.NodeLabel) }), true},
		{"in two scopes", build(pod, reservation.NodeBlock, func(l map[string]string) { l[naming.ClaimsBlockLabel] = "true" }), true},
		{"labelled with another node", build(pod, reservation.NodeBlock, func(l map[string]string) { l[naming.NodeLabel] = "node-b" }), true},
		{"a claim's labelled with a node", build(claim, reservation.NoBlock, func(l map[string]string) { l[naming.NodeLabel] = "node-a" }), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := watchScopeProblem(tt.res); (got != "") != tt.problem {
				t.Errorf("watchScopeProblem(labels %v) = %q, want a problem: %v", tt.res.Labels, got, tt.problem)
			}
		})
	}
}
