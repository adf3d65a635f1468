// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
)

// A claim being deleted is explained by the finalizer that holds it: its
// users (claims.Finalizer), or only its retention still to apply
// (claims.RetentionFinalizer), which waits for ipkeeper-controller.
func TestClaimNextBeingDeleted(t *testing.T) {
	for _, tc := range []struct {
		name       string
		finalizers []string
		want       string
	}{
		{name: "in use", finalizers: []string{claims.Finalizer, claims.RetentionFinalizer}, want: "keeps its addresses until no VMI or launcher pod uses it"},
		{name: "released by another controller", finalizers: []string{claims.RetentionFinalizer}, want: "waits for ipkeeper-controller to keep its addresses for its retention (finalizer " + claims.RetentionFinalizer + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1.blue",
				Finalizers: tc.finalizers, DeletionTimestamp: &metav1.Time{Time: time.Now()}}}
			var rep Report
			claimNext(&rep, claim, nil)
			if len(rep.Next) != 1 || !strings.Contains(rep.Next[0], tc.want) {
				t.Fatalf("next %q, want one containing %q", rep.Next, tc.want)
			}
		})
	}
}

// A claim refused for a user's mistake says who must fix what, not that
// ipkeeper retries: the condition's reason names the mistake.
func TestClaimNextNamesWhoMustAct(t *testing.T) {
	for _, tc := range []struct {
		reason, want string
	}{
		{claimstatus.ReasonOutsidePool, "fix the claim's status.ips or its requested addresses, or the pool"},
		{claimstatus.ReasonInvalid, "fix the claim"},
		{claimstatus.ReasonNADInvalid, "fix the NetworkAttachmentDefinition"},
		{claimstatus.ReasonNADNotFound, "create the NetworkAttachmentDefinition"},
		{claimstatus.ReasonPoolNotFound, "create it if it is a named pool"},
		{claimstatus.ReasonPoolInvalid, "fix the IPPool"},
		{claimstatus.ReasonNotAdmitted, "namespaceSelector"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1.blue"},
				Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue"},
				Status: ipamclaimsv1alpha1.IPAMClaimStatus{Conditions: []metav1.Condition{{Type: claimstatus.ConditionIPsAllocated,
					Status: metav1.ConditionFalse, Reason: tc.reason, Message: "the message"}}}}
			var rep Report
			claimNext(&rep, claim, nil)
			if len(rep.Next) == 0 || !strings.Contains(rep.Next[0], tc.want) || strings.Contains(rep.Next[0], "it retries") {
				t.Fatalf("next %q, want the first containing %q, and no \"it retries\"", rep.Next, tc.want)
			}
		})
	}
}
