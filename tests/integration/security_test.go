// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The security suite: what a compromised node can do with its agent's
// real credential (a ServiceAccount token bound to a pod on that node, as
// the DaemonSet's pods get), against the shipped RBAC and admission
// policies on the real API server.

// refusedByPolicy fails unless err is an admission refusal carrying want.
func refusedByPolicy(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed; want it refused by ipkeeper's admission policy (%q)", what, want)
		return
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v, want a refusal by ipkeeper's admission policy (%q)", what, err, want)
	}
}

// TestCompromisedNodeCannotFreeVMAddressesOrTouchPools: the agent of node
// A, with its real node-bound credential and even with RBAC granting it
// everything, can neither take over and release another node's (or any)
// VM's claim reservation, nor write a claim's status, nor create a pool
// that blocks another network or redirects a network's lock key. Only
// ipkeeper-controller writes those.
func TestCompromisedNodeCannotFreeVMAddressesOrTouchPools(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	grantAgentEverything(t)
	ns := cp.NewNamespace(t, "compromised")
	onA := agentOn(t, "node-a")

	claim := createClaim(t, ns, "vm1.sec", "sec-net")
	claimRes := func(ip, node string) *ipkeeperv1alpha1.IPReservation {
		r := newReservation("sec-net", ip)
		r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID}
		r.Spec.Node, r.Spec.ContainerID, r.Spec.InterfaceName = node, "", ""
		return r
	}
	// What exists before the node is compromised, written as the writers
	// of its kind write it (here, the test as administrator).
	held := claimRes("10.99.20.1", "node-b")
	retired := claimRes("10.99.20.2", "node-b")
	unassigned := claimRes("10.99.20.3", "")
	for _, r := range []*ipkeeperv1alpha1.IPReservation{held, retired, unassigned} {
		if err := cp.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), r) })
	}
	network := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "sec-older", Labels: map[string]string{ipkeeperv1alpha1.InlineLabel: "true"}},
		Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.21.0/24"}}},
	}
	if err := cp.Client.Create(ctx, network); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), network) })

	// Policies take effect asynchronously: wait for the first refusal.
	probe := newReservation("sec-net", "10.99.20.9")
	probe.Spec.Node = "node-b"
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = onA.Create(ctx, probe, client.DryRunAll)
		return apierrors.IsForbidden(last) || apierrors.IsInvalid(last), nil
	}); err != nil {
		t.Fatalf("the node-bound policy never refused a write for another node (last: %v)", last)
	}

	t.Run("take over and delete another node's VM reservation", func(t *testing.T) {
		moved := held.DeepCopy()
		moved.Spec.Node = "node-a"
		refusedByPolicy(t, "set spec.node of node-b's claim reservation to node-a", onA.Update(ctx, moved), "ipkeeper-agent")
		refusedByPolicy(t, "delete node-b's claim reservation", onA.Delete(ctx, held), "ipkeeper-agent")
		stillThere(t, held)
	})
	t.Run("release a VM reservation by a past reuseAfter", func(t *testing.T) {
		patch, err := reservation.RetirePatch(retired.UID, retired.ResourceVersion, time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		refusedByPolicy(t, "retire node-b's claim reservation", onA.Patch(ctx, retired.DeepCopy(), patch), "ipkeeper-agent")
		moved := retired.DeepCopy()
		moved.Spec.Node = "node-a"
		moved.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(-time.Hour).Truncate(time.Second)}
		refusedByPolicy(t, "take over and retire node-b's claim reservation in one update", onA.Update(ctx, moved), "ipkeeper-agent")
		stillThere(t, retired)
	})
	t.Run("claim reservations are the controller's", func(t *testing.T) {
		refusedByPolicy(t, "create a claim reservation for its own node", onA.Create(ctx, claimRes("10.99.20.4", "node-a")), "ipkeeper-agent")
		adopt := unassigned.DeepCopy()
		adopt.Spec.Node = "node-a"
		refusedByPolicy(t, "adopt a claim reservation no node holds", onA.Update(ctx, adopt), "ipkeeper-agent")
		refusedByPolicy(t, "delete a claim reservation no node holds", onA.Delete(ctx, unassigned), "ipkeeper-agent")
		stillThere(t, unassigned)
	})
	t.Run("claim status is the controller's", func(t *testing.T) {
		var c ipamclaimsv1alpha1.IPAMClaim
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
			t.Fatal(err)
		}
		c.Status.IPs = []string{"10.99.20.5/24"}
		refusedByPolicy(t, "set the addresses of a claim without any", onA.Status().Update(ctx, &c), "ipkeeper-agent")
	})
	t.Run("pools are the controller's and the administrator's", func(t *testing.T) {
		younger := &ipkeeperv1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "sec-younger", Labels: map[string]string{ipkeeperv1alpha1.InlineLabel: "true"}},
			Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.21.0/25"}}},
		}
		refusedByPolicy(t, "create a young inline pool overlapping another network's", onA.Create(ctx, younger), "ipkeeper-agent")
		redirect := &ipkeeperv1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{
				Name:        "sec-redirect",
				Labels:      map[string]string{ipkeeperv1alpha1.InlineLabel: "true"},
				Annotations: map[string]string{ipkeeperv1alpha1.InlineNetworkAnnotation: "sec-net"},
			},
			Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.22.0/24"}}},
		}
		refusedByPolicy(t, "create an inline pool carrying a chosen lock key", onA.Create(ctx, redirect), "ipkeeper-agent")
		grown := network.DeepCopy()
		grown.Spec.Ranges = append(grown.Spec.Ranges, ipkeeperv1alpha1.PoolRange{Range: "10.99.23.0/24"})
		refusedByPolicy(t, "edit another network's pool", onA.Update(ctx, grown), "ipkeeper-agent")
		refusedByPolicy(t, "delete another network's pool", onA.Delete(ctx, network), "ipkeeper-agent")
		for _, p := range []*ipkeeperv1alpha1.IPPool{younger, redirect} {
			_ = cp.Client.Delete(ctx, p) // only if the test failed
		}
	})
}

// stillThere fails unless r exists unchanged: not deleted, not released,
// not moved to another node.
func stillThere(t *testing.T, r *ipkeeperv1alpha1.IPReservation) {
	t.Helper()
	var cur ipkeeperv1alpha1.IPReservation
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(r), &cur); err != nil {
		t.Errorf("reservation %s: %v; want it kept", r.Name, err)
		return
	}
	if cur.UID != r.UID || cur.Spec.Node != r.Spec.Node || cur.Spec.Released() {
		t.Errorf("reservation %s changed: node %q (was %q), released %v, uid %s (was %s)", r.Name, cur.Spec.Node, r.Spec.Node, cur.Spec.Released(), cur.UID, r.UID)
	}
}
